//go:build linux

// Command slowsub attacks a real slicerd process with resources rather than
// requests, and reports what the attack costs it.
//
// Mode subscribers (the default) stores a -slices-slice assignment of job
// kv over two tasks, starts slicerd on it (every role) and the two tasks'
// Slicelets in this process, then opens -subscribers WatchAssignment
// streams on the Distributor that never read (each on its own connection,
// from 127.0.0.2 up, -per-ip per source address, announcing an HTTP/2
// window of 0) and forces -generations new generations by starting and
// stopping a third task. After every step it prints slicerd's resident
// memory (VmRSS and its peak VmHWM, from /proc/PID/status), the CPU it
// used since the previous step, its health and the generation a normal
// subscriber holds; at the end, how many stalled streams slicerd reset.
//
//	go run ./bench/slowsub -subscribers 5000
//
// Mode idle opens -conns cleartext HTTP/2 connections that send the
// preface and a SETTINGS frame and then nothing, and prints how many
// slicerd keeps open, its memory and health, and whether a new task can
// still join:
//
//	go run ./bench/slowsub -mode idle -conns 20000 -slicerd-flag=--idle-timeout=30s
//
// The harness raises its file-descriptor limit (the child inherits it) to
// cover the connections; raising the hard limit needs root or
// CAP_SYS_RESOURCE. Linux only.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/slicelet"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	mode         string
	slicerd      string
	slices       int
	subscribers  int
	conns        int
	perIP        int
	generations  int
	settle       time.Duration
	hold         time.Duration
	slicerdFlags benchproc.Flags
	logDir       string
	gzip         bool
	target       string // hold mode
	ipFrom       int    // hold mode
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("slowsub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", "subscribers", "subscribers (slow WatchAssignment streams) or idle (idle HTTP/2 connections)")
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary to run (default: build it from this module)")
	fs.IntVar(&o.slices, "slices", 10000, "slices of the stored assignment (subscribers mode)")
	fs.IntVar(&o.subscribers, "subscribers", 5000, "slow subscriber streams, one connection each (subscribers mode)")
	fs.IntVar(&o.conns, "conns", 20000, "idle HTTP/2 connections (idle mode)")
	fs.IntVar(&o.perIP, "per-ip", 1000, "connections per loopback source address, from 127.0.0.2 up; keep it under slicerd's --max-connections-per-ip to measure slicerd rather than its cap")
	fs.IntVar(&o.generations, "generations", 4, "new generations forced while the subscribers are stalled (subscribers mode)")
	fs.DurationVar(&o.settle, "settle", 5*time.Second, "wait after opening the connections before measuring")
	fs.DurationVar(&o.hold, "hold", 40*time.Second, "wait at the end, longer than slicerd's --stream-write-timeout (subscribers) or --idle-timeout (idle), before the last measurement")
	fs.Var(&o.slicerdFlags, "slicerd-flag", "extra flag for slicerd, e.g. -slicerd-flag=--stream-write-timeout=10s (repeatable)")
	fs.BoolVar(&o.gzip, "gzip", false, "stalled subscribers accept gzip-compressed responses (subscribers mode)")
	fs.StringVar(&o.target, "target", "", "internal: the RPC address a holder process floods")
	fs.IntVar(&o.ipFrom, "ip-from", 2, "internal: a holder process's first loopback source address, 127.0.0.<ip-from>")
	fs.StringVar(&o.logDir, "log-dir", "", "keep slicerd's log and data here (default: a temporary directory, removed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case o.mode == "hold" && o.target == "":
		return nil, errors.New("-mode hold needs -target")
	case o.mode != "subscribers" && o.mode != "idle" && o.mode != "hold":
		return nil, fmt.Errorf("-mode %q: use subscribers or idle", o.mode)
	case o.slices < 1 || o.slices > 2*assign.MaxSlicesPerTaskLimit:
		return nil, fmt.Errorf("-slices %d: use 1 to %d (two tasks)", o.slices, 2*assign.MaxSlicesPerTaskLimit)
	case o.subscribers < 0 || o.conns < 0:
		return nil, errors.New("-subscribers and -conns must not be negative")
	case o.perIP < 1:
		return nil, fmt.Errorf("-per-ip %d: use at least 1", o.perIP)
	case o.ipFrom < 2 || o.ipFrom+(o.subscribers+o.perIP-1)/o.perIP > 252 || o.ipFrom+(o.conns+o.perIP-1)/o.perIP > 252:
		return nil, errors.New("too many connections for -per-ip: at most 250 source addresses (127.0.0.2-251)")
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "slowsub:", err)
		return 2
	}
	if o.mode == "hold" {
		err = hold(o, os.Stdin, stdout)
	} else {
		err = attack(o, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "slowsub:", err)
		return 1
	}
	return 0
}

// raiseFDLimit raises this process's file-descriptor limit, which the
// slicerd child inherits, to cover n connections.
func raiseFDLimit(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	// Set even when high enough: a Go program that never sets the limit
	// gives its children the limit it started with, not the raised one.
	want := n + 4096
	lim.Cur = max(lim.Cur, want)
	lim.Max = max(lim.Max, want)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise the file-descriptor limit to %d for %d connections: %w; run as root or lower -subscribers/-conns", want, n, err)
	}
	return nil
}

func attack(o *options, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "slowsub: "+format+"\n", args...) }
	n := o.subscribers
	if o.mode == "idle" {
		n = 8192 // holder processes keep the connections; slicerd keeps at most its --max-connections
	}
	if err := raiseFDLimit(uint64(n)); err != nil {
		return err
	}
	logDir, cleanup, err := benchproc.LogDir("slowsub", o.logDir)
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."}); err != nil {
		return err
	}

	dataDir := filepath.Join(logDir, "data")
	if o.mode == "subscribers" {
		if err := benchproc.Seed(ctx, dataDir, "kv", []assign.Task{{Name: "t0", Addr: taskAddr("t0")}, {Name: "t1", Addr: taskAddr("t1")}}, o.slices); err != nil {
			return err
		}
	}
	maxConns := strconv.Itoa(n + 1024)
	sargs := []string{"--node-name", "slicerd-0", "--data-dir", dataDir,
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--rebalance-delay", "200ms", "--startup-grace", "500ms", "--rebalance-interval", "0s",
		"--max-connections", maxConns}
	if o.mode == "idle" {
		sargs[len(sargs)-1] = "8192" // the default cap, which the flood exceeds
	}
	sargs = append(sargs, o.slicerdFlags...)
	sd, started, err := benchproc.StartSlicerd("slicerd", filepath.Join(logDir, "slicerd.log"), o.slicerd, sargs, 60*time.Second)
	if err != nil {
		return err
	}
	defer benchproc.StopAll([]*benchproc.Proc{sd}, 10*time.Second)
	say("slicerd pid %d rpc %s gossip %s; logs in %s; args %s", sd.Cmd.Process.Pid, started.RPC, started.Gossip, logDir, strings.Join(sargs, " "))

	tasks := newTasks(ctx, started.Gossip)
	defer tasks.stopAll()
	for _, name := range []string{"t0", "t1"} {
		if err := tasks.start(name); err != nil {
			return err
		}
	}
	normal := newSubscriber(ctx, started.RPC)
	defer normal.stop()
	a, err := normal.waitFor(func(a *assign.Assignment) bool { return len(a.Tasks) == 2 }, 60*time.Second)
	if err != nil {
		return err
	}
	size := proto.Size(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a)})
	say("assignment generation %d: %d slices over %d tasks, %d bytes encoded", a.Generation, len(a.Slices), len(a.Tasks), size)

	m := &meter{pid: sd.Cmd.Process.Pid, rpc: started.RPC, out: stdout, normal: normal}
	fmt.Fprintf(stdout, "%-34s %9s %9s %8s %10s %12s\n", "step", "rss_mb", "hwm_mb", "cpu_%", "health", "normal_gen")
	m.measure("baseline")

	switch o.mode {
	case "subscribers":
		return slowSubscribers(ctx, o, m, tasks, normal, started.RPC, say)
	default:
		return idleConns(ctx, o, m, tasks, started.RPC, say)
	}
}

func slowSubscribers(ctx context.Context, o *options, m *meter, tasks *taskSet, normal *subscriber, rpc string, say func(string, ...any)) error {
	req, err := proto.Marshal(&slicerv1.WatchAssignmentRequest{Job: "kv"})
	if err != nil {
		return err
	}
	path := "/" + slicerv1connect.DistributorServiceName + "/WatchAssignment"
	conns, _, err := dialMany(o.subscribers, o.perIP, 2, rpc, func(c net.Conn) error {
		if o.gzip {
			return testnet.StalledStream(c, rpc, path, req, "grpc-accept-encoding", "gzip")
		}
		return testnet.StalledStream(c, rpc, path, req)
	})
	defer closeAll(conns)
	if err != nil {
		return err
	}
	say("%d stalled subscribers open", len(conns))
	if err := benchproc.Sleep(ctx, o.settle); err != nil {
		return err
	}
	m.measure(fmt.Sprintf("%d stalled subscribers", len(conns)))
	for i := range o.generations {
		var step string
		if i%2 == 0 {
			if err := tasks.start("t2"); err != nil {
				return err
			}
			step = "t2 joined"
		} else {
			tasks.stop("t2")
			step = "t2 left"
		}
		want := 3 - i%2
		if _, err := normal.waitFor(func(a *assign.Assignment) bool { return len(a.Tasks) == want }, 60*time.Second); err != nil {
			return fmt.Errorf("normal subscriber after %s: %w", step, err)
		}
		if err := benchproc.Sleep(ctx, o.settle); err != nil {
			return err
		}
		m.measure(fmt.Sprintf("generation %d: %s", i+1, step))
	}
	if err := benchproc.Sleep(ctx, o.hold); err != nil {
		return err
	}
	m.measure(fmt.Sprintf("after %v hold", o.hold))
	reset, open := countResets(conns)
	fmt.Fprintf(m.out, "stalled streams reset by slicerd: %d of %d (%d still open)\n", reset, len(conns), open)
	return nil
}

// preface is what an idle HTTP/2 connection sends: the client preface and
// an empty SETTINGS frame.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// holdPerProcess is how many idle connections one holder process opens,
// under the usual hard file-descriptor limit of 20,000 or more.
const holdPerProcess = 9000

func idleConns(ctx context.Context, o *options, m *meter, tasks *taskSet, rpc string, say func(string, ...any)) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var holders []*holder
	defer func() {
		for _, h := range holders {
			h.stop()
		}
	}()
	ipFrom := 2
	for left := o.conns; left > 0; left -= holdPerProcess {
		n := min(left, holdPerProcess)
		h, err := startHolder(self, rpc, n, o.perIP, ipFrom)
		if err != nil {
			return err
		}
		holders = append(holders, h)
		ipFrom += (n + o.perIP - 1) / o.perIP
	}
	opened, failed := 0, 0
	for _, h := range holders {
		o, f, err := h.ready()
		if err != nil {
			return err
		}
		opened, failed = opened+o, failed+f
	}
	say("%d idle connections sent the preface from %d processes (%d refused while dialing)", opened, len(holders), failed)
	closed := func() int {
		total := 0
		for _, h := range holders {
			n, err := h.closed()
			if err != nil {
				say("holder: %v", err)
			}
			total += n
		}
		return total
	}
	if err := benchproc.Sleep(ctx, o.settle); err != nil {
		return err
	}
	m.measure(fmt.Sprintf("%d idle conns (%d closed)", o.conns, closed()))
	if err := tasks.start("t2"); err != nil {
		return fmt.Errorf("a new task could not join during the flood: %w", err)
	}
	if _, err := m.normal.waitFor(func(a *assign.Assignment) bool { return len(a.Tasks) == 3 }, 60*time.Second); err != nil {
		return fmt.Errorf("the new task got no slices during the flood: %w", err)
	}
	m.measure(fmt.Sprintf("t2 joined, assigned (%d closed)", closed()))
	if err := benchproc.Sleep(ctx, o.hold); err != nil {
		return err
	}
	c := closed()
	m.measure(fmt.Sprintf("after %v hold (%d closed)", o.hold, c))
	fmt.Fprintf(m.out, "idle connections closed by slicerd: %d of %d\n", c, o.conns)
	return nil
}

// holderEnv is set in a holder's environment.
const holderEnv = "SLOWSUB_HOLDER"

// holder is a child process of this harness, in mode hold, that keeps
// idle connections open: one process cannot hold 20,000 under a hard
// file-descriptor limit of 20,000.
type holder struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHolder(self, rpc string, n, perIP, ipFrom int) (*holder, error) {
	cmd := exec.Command(self, "-mode", "hold", "-target", rpc, "-conns", strconv.Itoa(n),
		"-per-ip", strconv.Itoa(perIP), "-ip-from", strconv.Itoa(ipFrom))
	benchproc.SetProcAttr(cmd)
	cmd.Env = append(os.Environ(), holderEnv+"=1") // tells a test binary to act as the harness
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder: %w", err)
	}
	return &holder{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// ready waits for the holder's "open N failed M" line.
func (h *holder) ready() (opened, failed int, err error) {
	if !h.out.Scan() {
		return 0, 0, fmt.Errorf("holder exited before opening its connections: %v", h.out.Err())
	}
	if _, err := fmt.Sscanf(h.out.Text(), "open %d failed %d", &opened, &failed); err != nil {
		return 0, 0, fmt.Errorf("holder said %q: %w", h.out.Text(), err)
	}
	return opened, failed, nil
}

// closed asks the holder how many of its connections are closed.
func (h *holder) closed() (int, error) {
	if _, err := io.WriteString(h.in, "report\n"); err != nil {
		return 0, err
	}
	if !h.out.Scan() {
		return 0, fmt.Errorf("holder exited: %v", h.out.Err())
	}
	var n int
	_, err := fmt.Sscanf(h.out.Text(), "closed %d", &n)
	return n, err
}

// stop closes the holder's input, which makes it close its connections
// and exit, and waits for it.
func (h *holder) stop() {
	h.in.Close()
	h.cmd.Wait()
}

// hold is the holder process: it opens o.conns idle connections to
// o.target, reports "open N failed M", then answers each input line with
// "closed N" (connections the server closed, refused dials included) until
// its input ends.
func hold(o *options, stdin io.Reader, stdout io.Writer) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) // best effort; dials fail visibly otherwise
	}
	conns, failed, _ := dialMany(o.conns, o.perIP, o.ipFrom, o.target, func(c net.Conn) error {
		_, err := io.WriteString(c, preface)
		return err
	})
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() { // ends when the server or closeAll closes c
			defer wg.Done()
			if _, err := io.Copy(io.Discard, c); !errors.Is(err, net.ErrClosed) {
				closed.Add(1)
			}
		}()
	}
	defer wg.Wait()
	defer closeAll(conns)
	fmt.Fprintf(stdout, "open %d failed %d\n", len(conns), failed)
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		fmt.Fprintf(stdout, "closed %d\n", int(closed.Load())+failed)
	}
	return nil
}

// dialMany opens n connections to addr, perIP from each loopback source
// address from 127.0.0.<ipFrom> up, and runs first on each. It returns the
// connections on which first succeeded, how many failed, and the first
// failure.
func dialMany(n, perIP, ipFrom int, addr string, first func(net.Conn) error) ([]net.Conn, int, error) {
	conns := make([]net.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(ipFrom+i/perIP))}}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				errs[i] = err
				return
			}
			if err := first(c); err != nil {
				c.Close()
				errs[i] = err
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	var ok []net.Conn
	var firstErr error
	failed := 0
	for i, c := range conns {
		if c != nil {
			ok = append(ok, c)
		} else {
			failed++
			if firstErr == nil {
				firstErr = errs[i]
			}
		}
	}
	return ok, failed, firstErr
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// countResets reads, without granting any window, what slicerd sent each
// stalled stream, and counts those it reset and those still open.
func countResets(conns []net.Conn) (reset, open int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err := testnet.ResetCode(c)
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			switch {
			case err == nil:
				reset++
			case errors.As(err, &ne) && ne.Timeout():
				open++
			}
		}()
	}
	wg.Wait()
	return reset, open
}

// taskAddr is the serving address task tN advertises; nothing listens
// there, as no request is routed.
func taskAddr(name string) string { return "127.0.0.1:1900" + name[len(name)-1:] }

// taskSet runs the job's Slicelets in this process.
type taskSet struct {
	ctx  context.Context
	join string
	mu   sync.Mutex
	runs map[string]*taskRun
}

type taskRun struct {
	cancel context.CancelFunc
	done   chan error
}

func newTasks(ctx context.Context, join string) *taskSet {
	return &taskSet{ctx: ctx, join: join, runs: map[string]*taskRun{}}
}

func (ts *taskSet) start(name string) error {
	g := gossip.DefaultConfig()
	g.Profile = gossip.ProfileLocal
	s, err := slicelet.New(slicelet.Config{Job: "kv", Task: name, Addr: taskAddr(name), Join: []string{ts.join}, Gossip: g})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ts.ctx)
	r := &taskRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	ts.mu.Lock()
	ts.runs[name] = r
	ts.mu.Unlock()
	select {
	case <-s.Joined():
		return nil
	case err := <-r.done:
		return fmt.Errorf("task %s: %v", name, err)
	case <-time.After(60 * time.Second):
		return fmt.Errorf("task %s did not join gossip within 60s", name)
	}
}

func (ts *taskSet) stop(name string) {
	ts.mu.Lock()
	r := ts.runs[name]
	delete(ts.runs, name)
	ts.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

func (ts *taskSet) stopAll() {
	ts.mu.Lock()
	var names []string
	for n := range ts.runs {
		names = append(names, n)
	}
	ts.mu.Unlock()
	for _, n := range names {
		ts.stop(n)
	}
}

// subscriber is a normal, reading WatchAssignment stream on the
// Distributor, reconnecting when its stream ends.
type subscriber struct {
	mu      sync.Mutex
	a       *assign.Assignment
	changed chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func newSubscriber(ctx context.Context, addr string) *subscriber {
	ctx, cancel := context.WithCancel(ctx)
	s := &subscriber{changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	hc := api.NewH2CClient()
	client := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr))
	go func() {
		defer close(s.done)
		defer hc.CloseIdleConnections()
		for ctx.Err() == nil {
			s.mu.Lock()
			var known uint64
			var inc string
			if s.a != nil {
				known, inc = s.a.Generation, s.a.Incarnation
			}
			s.mu.Unlock()
			stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: known, KnownIncarnation: inc}))
			if err == nil {
				for stream.Receive() {
					if a, err := api.FromProto(stream.Msg().GetAssignment()); err == nil {
						s.mu.Lock()
						s.a = a
						close(s.changed)
						s.changed = make(chan struct{})
						s.mu.Unlock()
					}
				}
				stream.Close()
			}
			_ = benchproc.Sleep(ctx, 100*time.Millisecond)
		}
	}()
	return s
}

func (s *subscriber) get() (*assign.Assignment, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a, s.changed
}

func (s *subscriber) waitFor(cond func(*assign.Assignment) bool, timeout time.Duration) (*assign.Assignment, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		a, changed := s.get()
		if a != nil && cond(a) {
			return a, nil
		}
		select {
		case <-changed:
		case <-t.C:
			return nil, fmt.Errorf("no such assignment within %v (holding %v)", timeout, a)
		}
	}
}

func (s *subscriber) stop() {
	s.cancel()
	<-s.done
}

// meter prints slicerd's memory, CPU and health, one line per step.
type meter struct {
	pid    int
	rpc    string
	out    io.Writer
	normal *subscriber

	lastCPU  time.Duration
	lastWall time.Time
}

func (m *meter) measure(step string) {
	rss, hwm := benchproc.Memory(m.pid)
	cpu := benchproc.CPUTime(m.pid)
	now := time.Now()
	pct := 0.0
	if !m.lastWall.IsZero() {
		pct = 100 * float64(cpu-m.lastCPU) / float64(now.Sub(m.lastWall))
	}
	m.lastCPU, m.lastWall = cpu, now
	gen := uint64(0)
	if a, _ := m.normal.get(); a != nil {
		gen = a.Generation
	}
	fmt.Fprintf(m.out, "%-34s %9.1f %9.1f %8.1f %10s %12d\n", step, float64(rss)/1024, float64(hwm)/1024, pct, health(m.rpc), gen)
}

// health asks slicerd's gRPC health service over a fresh connection.
func health(addr string) string {
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](
		hc, api.RPCURL(addr)+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	resp, err := client.CallUnary(ctx, connect.NewRequest(&healthv1.HealthCheckRequest{}))
	if err != nil {
		return "error:" + connect.CodeOf(err).String()
	}
	return resp.Msg.GetStatus().String()
}
