//go:build !failpoints

package failpoint

import "context"

// Compiled reports whether this binary has failpoints.
const Compiled = false

// Hit runs the action armed at the point name; in this build there is
// none.
func Hit(context.Context, string) error { return nil }

// Enable arms the point name with action; this build has no points.
func Enable(name, action string) error { return ErrDisabled }

// Disable disarms the point name.
func Disable(name string) {}
