package benchproc

import (
	"os/exec"
	"syscall"
)

// SetProcAttr puts the child in its own process group, so a Ctrl-C at the
// terminal reaches only the harness, which stops the children in order;
// and has the kernel kill the child if the harness dies without cleaning
// up.
func SetProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
