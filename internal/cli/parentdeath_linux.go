package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// stopWithParent asks the kernel to send this process SIGTERM when the
// process that started it exits, and reports false if that process has
// already exited. 'go run' does not pass signals on to the program it
// built, so without this, killing 'go run . demo' leaves the demo running.
//
// The kernel sends the signal when the thread that started this process
// exits, which for a shell or 'go run' is when the process does; a
// supervisor whose threads come and go could stop a node by mistake, so
// the agent asks for this only under 'go run' (see runAgent).
func stopWithParent() bool {
	parent := os.Getppid()
	if parent == 1 {
		return true // started by init, or orphaned already: no parent to follow
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return true
	}
	// The parent may have exited before the request took effect; then no
	// signal will come.
	return os.Getppid() == parent
}
