package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Python tasks: the kvcache example's task in Python
// (examples/kvcache/python/kvserver.py), each under a `slicerd sidecar`
// child process, in the same job as the in-process Go tasks.

// pythonApp is the Python kvserver, relative to Options.PythonDir.
const pythonApp = "examples/kvcache/python/kvserver.py"

// pythonReady is how long a Python task may take to serve.
const pythonReady = 30 * time.Second

// checkPython reports what is missing for Python tasks, saying how to get
// it.
func checkPython(o Options) error {
	if o.PythonTasks == 0 {
		return nil
	}
	if o.Self == "" {
		return optionError("--python-tasks needs the slicerd binary to run its sidecars, and its path is unknown")
	}
	app := filepath.Join(o.PythonDir, pythonApp)
	if _, err := os.Stat(app); err != nil {
		return optionError("--python-tasks runs %s, not found under --python-dir %q; run the demo from the repository, or give --python-dir", pythonApp, o.PythonDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, o.Python, "-c", "import xxhash").CombinedOutput(); err != nil {
		return optionError("--python-tasks needs Python 3 with xxhash: %s -c 'import xxhash' failed (%v: %s); install Debian's python3-xxhash (scripts/python.sh) or give --python",
			o.Python, err, firstLine(out))
	}
	return nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// startPyTask starts a Python task: its sidecar, which joins the job as
// the task, then the application beside it. Both die with the demo
// (Pdeathsig), should it be killed.
func (d *demo) startPyTask() (*demoTask, error) {
	name := fmt.Sprintf("py-%d", d.nextPy)
	d.nextPy++
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", name, err)
	}
	addr := ln.Addr().String()
	// The application inherits the listening socket (--listen-fd 3), so
	// no other process can take the port between here and its start.
	lnFile, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", name, err)
	}
	defer lnFile.Close() // the child has its own copy once started
	dir, err := os.MkdirTemp("", "slicerd-demo-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", name, err)
	}
	// No state handoff: the demo's Go tasks start moved keys cold, and
	// so do these.
	local := filepath.Join(dir, "sidecar.sock")
	sidecar := exec.Command(d.py.Self, "sidecar", "--job", Job, "--task", name, "--app-addr", addr, "--join", d.joinAddr,
		"--gossip-profile", d.profile, "--health-url", "http://"+addr+"/healthz", "--health-interval", "200ms", "--health-failures", "2",
		"--local-api-socket", local, "--log-level", "warn")
	app := exec.Command(d.py.Python, filepath.Join(d.py.PythonDir, pythonApp), "--job", Job, "--addr", addr,
		"--local-api-socket", local, "--listen-fd", "3")
	app.ExtraFiles = []*os.File{lnFile}
	app.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(d.py.PythonDir, "clients/python"))
	for _, c := range []*exec.Cmd{sidecar, app} {
		// Warnings and errors to the demo's stderr; the application's
		// "serving at" line is dropped, the demo prints its own.
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	}
	if err := sidecar.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("task %s: start its sidecar: %w", name, err)
	}
	if err := app.Start(); err != nil {
		sidecar.Process.Kill()
		sidecar.Wait()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("task %s: start %s: %w", name, d.py.Python, err)
	}
	t := &demoTask{name: name, addr: addr, done: make(chan struct{})}
	sidecarDone, appDone := make(chan error, 1), make(chan error, 1)
	go func() { sidecarDone <- sidecar.Wait() }()
	go func() { appDone <- app.Wait() }()
	stopped := make(chan struct{})
	t.stop = func() {
		select {
		case <-stopped:
		default:
			close(stopped)
		}
	}
	go func() {
		defer close(t.done)
		defer os.RemoveAll(dir)
		// The sidecar drains the task on SIGTERM (its keys move, with
		// their entries) and exits; then the application stops.
		var sidecarErr error
		select {
		case <-stopped:
			sidecar.Process.Signal(syscall.SIGTERM)
			sidecarErr = <-sidecarDone
		case sidecarErr = <-sidecarDone:
		}
		app.Process.Signal(syscall.SIGTERM)
		<-appDone
		if sidecarErr != nil && !errors.Is(sidecarErr, context.Canceled) {
			var ee *exec.ExitError
			if !errors.As(sidecarErr, &ee) || ee.ExitCode() != 0 {
				t.err = fmt.Errorf("sidecar: %w", sidecarErr)
			}
		}
	}()
	d.tasks[name] = t
	return t, nil
}

// entries is how many entries the task's cache holds, as text: a Python
// task is asked over HTTP (GET /stats), "?" if it does not answer.
func (t *demoTask) entries(ctx context.Context, hc *http.Client) string {
	if t.server != nil {
		return strconv.Itoa(t.server.Len())
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.addr+"/stats", nil)
	if err != nil {
		return "?"
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	var st struct{ Entries int }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&st) != nil {
		return "?"
	}
	return strconv.Itoa(st.Entries)
}
