//go:build !linux

package benchproc

import "os/exec"

// SetProcAttr leaves the child as it is; on Linux the harness also has
// the kernel kill children it could not clean up.
func SetProcAttr(*exec.Cmd) {}
