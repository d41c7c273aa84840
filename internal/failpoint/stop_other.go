//go:build failpoints && !unix

package failpoint

import "os"

// stopSelf cannot stop the process here; it crashes it instead.
func stopSelf() { os.Exit(CrashExit) }
