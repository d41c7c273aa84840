package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
)

// binaries built once for the whole package.
var bin struct {
	slicerd  string
	kvserver string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "slicerd-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.slicerd = filepath.Join(dir, "slicerd")
	bin.kvserver = filepath.Join(dir, "kvserver")
	for out, pkg := range map[string]string{bin.slicerd: "..", bin.kvserver: "../examples/kvcache/cmd/kvserver"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	if secure {
		if err := setupPKI(dir); err != nil {
			fmt.Fprintln(os.Stderr, "secure mode:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a started binary whose output is captured line by line.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, valid after done

	mu     sync.Mutex
	lines  []string // stdout and stderr, interleaved
	notify chan struct{}
}

func start(t *testing.T, name, path string, args ...string) *proc {
	t.Helper()
	return startEnv(t, name, path, append(append(os.Environ(), "SLICERD_LOG_FORMAT=json"), secureEnv(path, args)...), args...)
}

// startEnv starts path with exactly the environment env.
func startEnv(t *testing.T, name, path string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, done: make(chan struct{}), notify: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = env
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.notify)
			p.notify = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits for an output line containing every one of substrs and
// returns it.
func (p *proc) waitLine(timeout time.Duration, substrs ...string) string {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		p.mu.Lock()
		lines, notify := p.lines, p.notify
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			ok := true
			for _, s := range substrs {
				ok = ok && strings.Contains(lines[seen], s)
			}
			if ok {
				return lines[seen]
			}
		}
		select {
		case <-notify:
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before printing %q; output:\n%s", p.name, p.err, substrs, p.output())
		case <-deadline.C:
			p.t.Fatalf("%s did not print %q within %v; output:\n%s", p.name, substrs, timeout, p.output())
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v; output:\n%s", p.name, timeout, p.output())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func (p *proc) signal(s syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(s)
	}
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.signal(syscall.SIGKILL)
		<-p.done
	}
}

// slicerdNode is a running slicerd process and the addresses it reported.
type slicerdNode struct {
	*proc
	rpcAddr, gossipAddr string
}

// startSlicerd runs slicerd with fast test timers on free loopback ports and
// waits for its "slicerd started" log line.
func startSlicerd(t *testing.T, name string, args ...string) *slicerdNode {
	t.Helper()
	base := []string{
		"--node-name", name,
		"--rpc-addr", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0",
		"--gossip-profile", "local",
		"--rebalance-delay", "100ms",
		"--startup-grace", "300ms",
	}
	p := start(t, name, bin.slicerd, append(base, args...)...)
	line := p.waitLine(30*time.Second, `"msg":"slicerd started"`)
	var rec struct {
		RPC    string `json:"rpc_addr"`
		Gossip string `json:"gossip_addr"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.RPC == "" || rec.Gossip == "" {
		t.Fatalf("cannot parse start line %q: %v", line, err)
	}
	return &slicerdNode{proc: p, rpcAddr: rec.RPC, gossipAddr: rec.Gossip}
}

// kvTask is a running example task process.
type kvTask struct {
	*proc
	task, addr string
}

func startKV(t *testing.T, task, join string, extra ...string) *kvTask {
	t.Helper()
	args := []string{"-job", "kv", "-task", task, "-addr", "127.0.0.1:0",
		"-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local", "-join", join}
	p := start(t, task, bin.kvserver, append(args, extra...)...)
	line := p.waitLine(30*time.Second, "kvserver task="+task)
	var addr string
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "addr="); ok {
			addr = v
		}
	}
	if addr == "" {
		t.Fatalf("no addr in %q", line)
	}
	return &kvTask{proc: p, task: task, addr: addr}
}

// runSlicerd runs a short-lived slicerd command to completion.
func runSlicerd(t *testing.T, args ...string) (code int, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.slicerd, args...)
	cmd.Env = append(os.Environ(), secureEnv(bin.slicerd, args)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), buf.String()
	}
	if err != nil {
		t.Fatalf("run slicerd %v: %v", args, err)
	}
	return 0, buf.String()
}

// runClerk runs a Clerk for cfg in the test process until the test ends.
func runClerk(t *testing.T, cfg clerk.Config) *clerk.Clerk {
	t.Helper()
	c, err := clerk.New(secureClerk(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}
