package benchproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// PyTask is a task run as the Python kvserver (examples/kvcache/python)
// beside a slicerd sidecar, which is its member of the cluster.
type PyTask struct {
	Sidecar, App *Proc
	Addr         string // where the application serves
}

// PyTaskConfig says how to start a PyTask.
type PyTaskConfig struct {
	// Python is the interpreter, with Debian's python3-xxhash
	// (scripts/python.sh); "" means $SLICERD_PYTHON, else python3.
	Python  string
	Slicerd string // the slicerd binary
	Root    string // the module's directory (ModuleRoot)
	Dir     string // where the sockets and logs go
	Run     int    // the task's start number, for its log files' names
	Job     string
	Task    string
	Join    string // a slicerd node's gossip address
	// Handoff moves the application's entries with its keys
	// (--app-state-socket and --handoff-addr).
	Handoff bool
	// SidecarArgs and AppArgs are added to each one's command line.
	SidecarArgs, AppArgs []string
}

// Interpreter is c.Python or its default.
func (c PyTaskConfig) Interpreter() string {
	switch {
	case c.Python != "":
		return c.Python
	case os.Getenv("SLICERD_PYTHON") != "":
		return os.Getenv("SLICERD_PYTHON")
	}
	return "python3"
}

// Prepare finds the module's directory (Root) and checks that the
// interpreter can run the Python task library, for a harness about to
// start Python tasks.
func (c *PyTaskConfig) Prepare(ctx context.Context) error {
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	c.Root = root
	py := c.Interpreter()
	if out, err := exec.CommandContext(ctx, py, "-c", "import xxhash").CombinedOutput(); err != nil {
		return fmt.Errorf("%s cannot import xxhash (%v: %s); run scripts/python.sh, or give -python", py, err, out)
	}
	return nil
}

// StartPyTask starts the sidecar, then the application, and waits until
// both serve.
func StartPyTask(c PyTaskConfig) (*PyTask, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	base := filepath.Join(c.Dir, fmt.Sprintf("%s.%d", c.Task, c.Run))
	local, state := base+".sock", base+".state.sock"
	sargs := []string{"sidecar", "--job", c.Job, "--task", c.Task, "--app-addr", addr, "--join", c.Join,
		"--gossip-profile", "local", "--health-url", "http://" + addr + "/healthz", "--health-interval", "200ms", "--health-failures", "2",
		"--local-api-socket", local}
	aargs := []string{filepath.Join(c.Root, "examples/kvcache/python/kvserver.py"), "--job", c.Job, "--addr", addr, "--local-api-socket", local}
	if c.Handoff {
		sargs = append(sargs, "--app-state-socket", state, "--handoff-addr", "127.0.0.1:0")
		aargs = append(aargs, "--state-socket", state)
	}
	sargs = append(sargs, c.SidecarArgs...)
	aargs = append(aargs, c.AppArgs...)
	sc, err := Start(c.Task+"-sidecar", base+".sidecar.log", "sidecar local API serving", nil, c.Slicerd, sargs...)
	if err != nil {
		return nil, err
	}
	if _, err := sc.WaitReady(30 * time.Second); err != nil {
		StopAll([]*Proc{sc}, time.Second)
		return nil, fmt.Errorf("%s: %w (see %s.sidecar.log)", c.Task, err, base)
	}
	app, err := Start(c.Task+"-app", base+".app.log", "kvserver.py serving at", []string{"PYTHONPATH=" + filepath.Join(c.Root, "clients/python")},
		c.Interpreter(), aargs...)
	if err != nil {
		StopAll([]*Proc{sc}, time.Second)
		return nil, err
	}
	if _, err := app.WaitReady(30 * time.Second); err != nil {
		StopAll([]*Proc{sc, app}, time.Second)
		return nil, fmt.Errorf("%s: %w (see %s.app.log)", c.Task, err, base)
	}
	return &PyTask{Sidecar: sc, App: app, Addr: addr}, nil
}

// Procs are the task's two processes, the sidecar first.
func (t *PyTask) Procs() []*Proc { return []*Proc{t.Sidecar, t.App} }

// Signal sends s to both processes, as to a host or a cgroup.
func (t *PyTask) Signal(s syscall.Signal) {
	_ = t.Sidecar.Cmd.Process.Signal(s)
	_ = t.App.Cmd.Process.Signal(s)
}
