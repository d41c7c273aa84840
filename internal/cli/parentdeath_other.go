//go:build !linux

package cli

// stopWithParent does nothing where the kernel cannot signal a process
// when its parent exits.
func stopWithParent() bool { return true }
