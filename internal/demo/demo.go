// Package demo runs slicerd with a sharded example cache in one process and
// narrates what happens to the keys as tasks stop and join.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/slicelet"
)

// Job is the job the demo's cache tasks belong to.
const Job = "kv"

// demoWait bounds each step of the demo script, so a broken setup fails
// with a message instead of hanging.
const demoWait = 60 * time.Second

var (
	// ErrOptions matches (errors.Is) every *OptionError.
	ErrOptions = errors.New("demo: invalid options")
	// ErrAgentStopped ends the script when slicerd stops on its own.
	ErrAgentStopped = errors.New("slicerd stopped unexpectedly; rerun with --log-level info to see why")
	// ErrTimeout is returned when a step of the script does not happen in time.
	ErrTimeout = errors.New("demo: gave up waiting")
)

// OptionError says which option cannot work and why, in terms of the flag
// that sets it.
type OptionError struct {
	Msg string
	Err error // the underlying error, if any
}

func (e *OptionError) Error() string { return e.Msg }

// Is makes every OptionError match ErrOptions.
func (e *OptionError) Is(target error) bool { return target == ErrOptions }

func (e *OptionError) Unwrap() error { return e.Err }

func optionError(format string, args ...any) error {
	return &OptionError{Msg: fmt.Sprintf(format, args...)}
}

// Options configure a demo run. DefaultOptions returns working values.
type Options struct {
	Tasks          int           // cache tasks to start, at least 2
	Keys           int           // keys the client writes, at least 1
	Step           time.Duration // pause between the steps of the script
	Once           bool          // run the script once and return
	DataDir        string        // keep the store here; "" for a temporary one removed at exit
	RPCAddr        string        // host:port slicerd's RPC server listens on
	UIAddr         string        // host:port of slicerd's web UI; "" for none
	GossipAddr     string        // host:port slicerd's gossip binds to
	GossipProfile  string        // lan or local
	RebalanceDelay time.Duration // how long the assigner lets membership changes settle
	StartupGrace   time.Duration // how long the assigner waits for tasks before the first assignment
	// MetricsAddr, if set, is the host:port that serves Prometheus
	// metrics at /metrics: slicerd's, and the tasks' and client's.
	MetricsAddr string
	// Logger receives slicerd's logs; nil discards them.
	Logger *slog.Logger
	// QuietClients passes only errors of the in-process tasks and client
	// to Logger: they warn while they wait for gossip and the first
	// assignment, which is the expected start-up, not news.
	QuietClients bool
	// Command is how the reader runs slicerd, for the commands the demo
	// suggests: "slicerd", or "go run ." from a source tree.
	Command string
	// PythonTasks more tasks run the kvcache example in Python
	// (examples/kvcache/python under PythonDir, with Python), each under
	// a `Self sidecar` child process: a job mixing Go and Python tasks.
	PythonTasks int
	Python      string // the interpreter, with xxhash
	PythonDir   string // the repository's root
	Self        string // the slicerd binary
}

// DefaultOptions returns the options of 'slicerd demo' without flags.
func DefaultOptions() Options {
	d := roles.DefaultConfig()
	return Options{
		Tasks: 3, Keys: 1000, Step: 5 * time.Second,
		RPCAddr: d.RPCAddr, GossipAddr: d.Gossip.BindAddr, GossipProfile: "lan",
		RebalanceDelay: d.RebalanceDelay, StartupGrace: time.Second, Command: "slicerd",
		Python: "python3", PythonDir: ".",
	}
}

// Validate reports the first option that cannot work, naming its flag.
func (o Options) Validate() error {
	switch {
	case o.Tasks < 2:
		return optionError("--tasks must be at least 2, so one can stop while another serves")
	case o.Keys < 1:
		return optionError("--keys must be at least 1")
	case o.Step <= 0:
		return optionError("--step must be positive")
	case o.GossipProfile != "lan" && o.GossipProfile != "local":
		return optionError("invalid --gossip-profile %q: use lan or local", o.GossipProfile)
	case o.PythonTasks < 0:
		return optionError("--python-tasks must be 0 or more")
	}
	return checkPython(o)
}

// Run starts slicerd and the cache, runs the script and writes what happens
// to w. It returns nil when ctx ends (Ctrl-C is how the demo is meant to
// end) or, with Once, when the script is done; everything it started has
// stopped by then.
func Run(ctx context.Context, opts Options, w io.Writer) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clientLog := log
	if opts.QuietClients {
		clientLog = slog.New(minLevel{log.Handler(), slog.LevelError})
	}
	if opts.Command == "" {
		opts.Command = "slicerd"
	}

	dataDir, temp := opts.DataDir, false
	if dataDir == "" {
		var err error
		if dataDir, err = os.MkdirTemp("", "slicerd-demo-"); err != nil {
			return fmt.Errorf("create a temporary data dir: %w; set --data-dir", err)
		}
		temp = true
		defer os.RemoveAll(dataDir)
	}
	cfg := roles.DefaultConfig()
	cfg.NodeName = "demo"
	cfg.DataDir = dataDir
	cfg.RPCAddr = opts.RPCAddr
	cfg.UIAddr = opts.UIAddr
	cfg.Gossip.BindAddr = opts.GossipAddr
	cfg.Gossip.Profile = opts.GossipProfile
	cfg.RebalanceDelay = opts.RebalanceDelay
	cfg.StartupGrace = opts.StartupGrace
	cfg.Logger = log
	if err := cfg.Validate(); err != nil {
		return &OptionError{Msg: err.Error(), Err: err}
	}
	var reg *prometheus.Registry
	var metricsSrv *metrics.Server
	switch {
	case opts.MetricsAddr != "" && opts.MetricsAddr == opts.UIAddr:
		// One port for both: the UI's server answers GET /metrics too.
		reg = metrics.NewRegistry()
		cfg.Registerer, cfg.UIMetrics = reg, metrics.Handler(reg, log)
	case opts.MetricsAddr != "":
		reg = metrics.NewRegistry()
		cfg.Registerer = reg
		var err error
		if metricsSrv, err = metrics.Listen(opts.MetricsAddr, reg, log); err != nil {
			return &OptionError{Msg: fmt.Sprintf("%v; choose another --metrics-addr", err), Err: err}
		}
	}
	agent, err := roles.New(ctx, cfg)
	if err != nil {
		if metricsSrv != nil {
			metricsSrv.Close()
		}
		return err
	}

	d := &demo{
		out:     w,
		log:     clientLog,
		profile: opts.GossipProfile,
		command: opts.Command,
		step:    opts.Step,
		tasks:   make(map[string]*demoTask),
		changed: make(chan struct{}, 1),
		py:      opts,
	}
	if reg != nil {
		d.reg = reg // a nil *Registry in the interface would not be nil
		if metricsSrv != nil {
			d.metricsURL = "http://" + metricsSrv.Addr() + metrics.Path
		} else {
			d.metricsURL = "http://" + agent.UIAddr() + metrics.Path
		}
	}
	for i := range opts.Keys {
		d.keys = append(d.keys, fmt.Sprintf("key-%06d", i))
	}

	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	var agentErr error
	go func() {
		defer close(agentDone)
		agentErr = agent.Run(agentCtx)
	}()
	d.agentDone = agentDone
	metricsDone := make(chan error, 1)
	stopMetrics := func() {}
	if metricsSrv != nil {
		mctx, cancel := context.WithCancel(context.Background())
		go func() { metricsDone <- metricsSrv.Run(mctx) }()
		stopMetrics = func() { cancel(); <-metricsDone }
	}
	err = d.run(ctx, agent, opts.Tasks, opts.PythonTasks, opts.Once, dataDir, temp)
	if ctx.Err() != nil {
		fmt.Fprintln(d.out, "\n== shutting down")
		if errors.Is(err, context.Canceled) {
			err = nil // Ctrl-C is how the demo is meant to end
		}
	}

	// Tasks leave first so their departure is graceful, then slicerd.
	d.shutdown()
	stopAgent()
	<-agentDone
	stopMetrics()
	if agentErr != nil && (err == nil || errors.Is(err, ErrAgentStopped)) {
		err = fmt.Errorf("slicerd: %w", agentErr)
	}
	if err == nil {
		fmt.Fprintln(d.out, "\n== stopped cleanly")
	}
	return err
}

// demo drives the script and owns everything it starts.
type demo struct {
	out        io.Writer
	log        *slog.Logger
	profile    string
	command    string // how the reader runs slicerd: "slicerd" or "go run ."
	step       time.Duration
	keys       []string
	agentDone  <-chan struct{}       // closed when slicerd stops
	reg        prometheus.Registerer // every component's metrics; nil without --metrics-addr
	metricsURL string
	joinAddr   string

	clerk       *clerk.Clerk
	client      *kvcache.Client
	hc          *http.Client
	stopClerk   context.CancelFunc
	clerkDone   chan error
	nextTask    int
	nextPy      int
	py          Options // the Python tasks' settings
	tasks       map[string]*demoTask
	printed     uint64            // the last generation printed
	lastOwners  map[string]string // key → owning task, as last printed
	changed     chan struct{}     // signalled by the Clerk on every new assignment
	mu          sync.Mutex
	assignments []*assign.Assignment // accepted by the Clerk, not yet printed
}

// demoTask is one task of the cache: in process, an HTTP server and the
// Slicelet that tells it which keys it owns; or a Python one, two child
// processes (server nil).
type demoTask struct {
	name   string
	server *kvcache.Server
	addr   string // a Python task's serving address
	stop   func()
	done   chan struct{}
	err    error
}

func (d *demo) run(ctx context.Context, agent *roles.Agent, ntasks, npy int, once bool, dataDir string, temp bool) error {
	gossipAddr, err := d.waitGossip(ctx, agent)
	if err != nil {
		return err
	}
	d.joinAddr = gossipAddr
	d.header(agent.RPCAddr(), gossipAddr, ntasks+npy, dataDir, temp)
	if addr := agent.UIAddr(); addr != "" {
		fmt.Fprintf(d.out, "Web UI (read-only): http://%s/ui/?job=%s\n\n", addr, Job)
	}

	if err := d.startClerk(agent.RPCAddr()); err != nil {
		return err
	}
	var names []string
	for range ntasks {
		t, err := d.startTask()
		if err != nil {
			return err
		}
		names = append(names, t.name)
	}
	for range npy {
		t, err := d.startPyTask()
		if err != nil {
			return err
		}
		names = append(names, t.name+" (Python, under a sidecar)")
	}
	fmt.Fprintf(d.out, "== started tasks %s; waiting for slicerd to assign the key space to them\n", strings.Join(names, ", "))
	if err := d.waitAssignment(ctx, "the first assignment over every task", func(a *assign.Assignment) bool {
		return sameTasks(a, d.liveNames())
	}); err != nil {
		return err
	}
	if err := d.writeKeys(ctx); err != nil {
		return err
	}

	victim := d.liveNames()[ntasks/2] // a Go task
	if err := d.pause(ctx); err != nil {
		return nil
	}
	fmt.Fprintf(d.out, "\n== stopping %s: its Slicelet leaves gossip, and slicerd moves its keys to the survivors\n", victim)
	d.stopTask(victim)
	if err := d.waitAssignment(ctx, victim+" to leave the assignment", func(a *assign.Assignment) bool {
		return sameTasks(a, d.liveNames())
	}); err != nil {
		return err
	}
	if err := d.readKeys(ctx); err != nil {
		return err
	}

	if err := d.pause(ctx); err != nil {
		return nil
	}
	t, err := d.startTask()
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "\n== starting %s: it joins gossip and slicerd gives it a fair share\n", t.name)
	if err := d.waitAssignment(ctx, t.name+" to join the assignment", func(a *assign.Assignment) bool {
		return sameTasks(a, d.liveNames())
	}); err != nil {
		return err
	}
	if err := d.readKeys(ctx); err != nil {
		return err
	}

	if once {
		fmt.Fprintln(d.out, "\n== script done (--once); shutting down")
		return nil
	}
	fmt.Fprintf(d.out, "\n== script done; the client now reads %d keys a second, most of them from a few hot keys, so the load\n"+
		"   balancer has work to do (see 'job history', and the web UI or metrics if enabled). Every new assignment\n"+
		"   is printed. Ctrl-C to stop\n", readRate)
	readCtx, stopReads := context.WithCancel(ctx)
	readsDone := make(chan struct{})
	go func() {
		defer close(readsDone)
		d.readSteadily(readCtx)
	}()
	defer func() {
		stopReads()
		<-readsDone
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.agentDone:
			return ErrAgentStopped
		case <-d.changed:
			d.printNew()
		}
	}
}

// metricsLine is the header's line for the metrics URL, "" without one.
func (d *demo) metricsLine() string {
	if d.metricsURL == "" {
		return ""
	}
	return "\n  metrics " + d.metricsURL + "  (curl -s " + d.metricsURL + " | grep ^slicerd_)"
}

func (d *demo) header(rpcAddr, gossipAddr string, ntasks int, dataDir string, temp bool) {
	keep := "kept"
	if temp {
		keep = "removed at exit"
	}
	fmt.Fprintf(d.out, `slicerd demo

You are watching slicerd shard an in-memory cache. A single-node slicerd
(assigner, distributor and backup) assigns the keys of job %q to %d cache
tasks. Each task links a Slicelet, which joins gossip and learns which keys
it owns; a client routes %d keys to their owners through a Clerk. Every
new assignment is printed with each task's share of the key space and of
the demo keys. After %v a task stops and its keys move to the survivors;
after another %v a new task joins and takes a fair share.

  rpc     %s
  gossip  %s
  data    %s (%s)%[11]s

From another terminal, try:
  %[10]s job watch --addr %[6]s %[1]s
  %[10]s job get --addr %[6]s %[1]s
  %[10]s job history --addr %[6]s %[1]s
  %[10]s job why --addr %[6]s %[1]s key-000042
  curl -s -H 'Content-Type: application/json' -d '{"job": "%[1]s"}' http://%[6]s/slicer.v1.JobService/GetJob
  grpcurl -plaintext %[6]s list   # if you have grpcurl

`, Job, ntasks, len(d.keys), d.step, d.step, rpcAddr, gossipAddr, dataDir, keep, d.command, d.metricsLine())
}

// waitGossip returns slicerd's bound gossip address once Run has started
// gossip; with port 0 it is known only then.
func (d *demo) waitGossip(ctx context.Context, agent *roles.Agent) (string, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(demoWait)
	defer deadline.Stop()
	for {
		if addr := agent.GossipAddr(); addr != "" {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-d.agentDone:
			return "", ErrAgentStopped
		case <-deadline.C:
			return "", fmt.Errorf("%w: slicerd did not start gossip within %v; rerun with --log-level info", ErrTimeout, demoWait)
		case <-tick.C:
		}
	}
}

func (d *demo) startClerk(rpcAddr string) error {
	ck, err := clerk.New(clerk.Config{
		Job:        Job,
		Addrs:      []string{rpcAddr},
		Logger:     d.log.With("component", "clerk"),
		Registerer: d.reg,
		OnAssignment: func(_, next *assign.Assignment) {
			d.mu.Lock()
			d.assignments = append(d.assignments, next)
			d.mu.Unlock()
			select {
			case d.changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.clerk, d.stopClerk, d.clerkDone = ck, cancel, make(chan error, 1)
	// A transport of its own, so shutdown can close its idle connections.
	d.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 5 * time.Second}
	d.client = kvcache.NewClient(ck, d.hc)
	go func() { d.clerkDone <- ck.Run(ctx) }()
	return nil
}

func (d *demo) startTask() (*demoTask, error) {
	name := fmt.Sprintf("%s-%d", Job, d.nextTask)
	d.nextTask++
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("task %s: listen: %w", name, err)
	}
	gcfg := gossip.DefaultConfig()
	gcfg.Profile = d.profile
	sl, err := slicelet.New(slicelet.Config{
		Job:        Job,
		Task:       name,
		Addr:       ln.Addr().String(),
		GossipAddr: "127.0.0.1:0",
		Join:       []string{d.joinAddr},
		Gossip:     gcfg,
		Logger:     d.log,
		Registerer: d.reg,
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("task %s: %w", name, err)
	}
	log := d.log.With("task", name)
	t := &demoTask{name: name, server: kvcache.NewServer(sl, log), done: make(chan struct{})}
	srv := &http.Server{Handler: t.server, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	ctx, cancel := context.WithCancel(context.Background())
	t.stop = cancel
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	go func() {
		defer close(t.done)
		// Run returns after the Slicelet has left gossip; only then stop
		// serving, so requests routed on the old assignment still land.
		t.err = sl.Run(ctx)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			srv.Close()
		}
		<-served
	}()
	d.tasks[name] = t
	return t, nil
}

// stopTask stops a task gracefully and waits for it.
func (d *demo) stopTask(name string) {
	t := d.tasks[name]
	delete(d.tasks, name)
	t.stop()
	<-t.done
	if t.err != nil {
		d.log.Error("task stopped with an error", "task", name, "err", t.err)
	}
}

func (d *demo) shutdown() {
	// Stop every task at once: each waits for its gossip leave to spread.
	names := slices.Sorted(maps.Keys(d.tasks))
	for _, name := range names {
		d.tasks[name].stop()
	}
	for _, name := range names {
		d.stopTask(name)
	}
	if d.stopClerk != nil {
		d.stopClerk()
		if err := <-d.clerkDone; err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error("clerk stopped with an error", "err", err)
		}
		d.hc.CloseIdleConnections()
	}
}

func (d *demo) liveNames() []string { return slices.Sorted(maps.Keys(d.tasks)) }

// sameTasks reports whether a serves its keys from exactly the named tasks.
func sameTasks(a *assign.Assignment, names []string) bool {
	if a == nil || len(a.Tasks) != len(names) {
		return false
	}
	for i, t := range a.Tasks {
		if t.Name != names[i] {
			return false
		}
	}
	return true
}

func (d *demo) pause(ctx context.Context) error {
	t := time.NewTimer(d.step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.changed:
			d.printNew()
		case <-t.C:
			return nil
		}
	}
}

// waitAssignment prints every new assignment until the Clerk's current one
// satisfies cond.
func (d *demo) waitAssignment(ctx context.Context, what string, cond func(*assign.Assignment) bool) error {
	deadline := time.NewTimer(demoWait)
	defer deadline.Stop()
	for {
		d.printNew()
		if cond(d.clerk.Assignment()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.agentDone:
			return ErrAgentStopped
		case <-deadline.C:
			return fmt.Errorf("%w after %v for %s; rerun with --log-level info to see why", ErrTimeout, demoWait, what)
		case <-d.changed:
		}
	}
}

// printNew prints the assignments the Clerk accepted since the last call,
// each with how many demo keys every task owns and which keys moved.
func (d *demo) printNew() {
	d.mu.Lock()
	pending := d.assignments
	d.assignments = nil
	d.mu.Unlock()
	for _, a := range pending {
		if a.Generation <= d.printed {
			continue
		}
		d.printed = a.Generation
		fmt.Fprintln(d.out)
		PrintAssignment(d.out, a)
		owners := keyOwners(a, d.keys)
		if d.lastOwners != nil {
			d.printMoves(d.lastOwners, owners)
		}
		d.lastOwners = owners
		d.printOwners(a, owners)
	}
}

// keyOwners maps each key to the task a client routes it to: the first
// task of its slice, as the Clerk-routed client picks.
func keyOwners(a *assign.Assignment, keys []string) map[string]string {
	owners := make(map[string]string, len(keys))
	for _, k := range keys {
		owners[k] = a.Slices[a.Find(assign.HashString(k))].Tasks[0]
	}
	return owners
}

func (d *demo) printOwners(a *assign.Assignment, owners map[string]string) {
	count := make(map[string]int)
	for _, t := range owners {
		count[t]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  demo keys by owner:")
	for _, t := range a.Tasks {
		fmt.Fprintf(&b, "  %s %d", t.Name, count[t.Name])
	}
	fmt.Fprintln(d.out, b.String())
}

func (d *demo) printMoves(before, after map[string]string) {
	moves := make(map[string]int) // "from → to" → keys
	n := 0
	for k, to := range after {
		if from := before[k]; from != to {
			moves[from+" → "+to]++
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(d.out, "  no demo key moved")
		return
	}
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(moves)) {
		parts = append(parts, fmt.Sprintf("%s %d", m, moves[m]))
	}
	fmt.Fprintf(d.out, "  %d of %d demo keys moved: %s\n", n, len(d.keys), strings.Join(parts, ", "))
}

// writeKeys puts every demo key through the Clerk-routed client.
func (d *demo) writeKeys(ctx context.Context) error {
	for _, k := range d.keys {
		if err := d.client.Put(ctx, k, []byte("value of "+k)); err != nil {
			return d.keyError(ctx, err)
		}
	}
	fmt.Fprintf(d.out, "  wrote %d keys through the Clerk-routed client\n", len(d.keys))
	return nil
}

// readKeys reads every demo key back. A key whose slice moved is a miss
// (the new owner's cache is cold) and is written again, as an application
// would refill a cache from its database.
func (d *demo) readKeys(ctx context.Context) error {
	misses := 0
	for _, k := range d.keys {
		_, ok, err := d.client.Get(ctx, k)
		if err != nil {
			return d.keyError(ctx, err)
		}
		if !ok {
			misses++
			if err := d.client.Put(ctx, k, []byte("value of "+k)); err != nil {
				return d.keyError(ctx, err)
			}
		}
	}
	fmt.Fprintf(d.out, "  read %d keys from their new owners: %d hits, %d misses refilled (moved keys start cold)\n",
		len(d.keys), len(d.keys)-misses, misses)
	var b strings.Builder
	fmt.Fprintf(&b, "  entries held by each task's cache:")
	for _, name := range d.liveNames() {
		fmt.Fprintf(&b, "  %s %s", name, d.tasks[name].entries(ctx, d.hc))
	}
	fmt.Fprintln(d.out, b.String())
	return nil
}

// readRate is how many keys a second the client reads once the script is
// done.
const readRate = 100

// readSteadily reads readRate keys a second until ctx ends: 80% of the
// reads go to the first 2% of the keys, so some tasks run hotter than
// others and the load balancer moves keys. A failed read is retried at the
// next tick; a miss is refilled.
func (d *demo) readSteadily(ctx context.Context) {
	tick := time.NewTicker(time.Second / readRate)
	defer tick.Stop()
	hot := max(1, len(d.keys)/50)
	rng := rand.New(rand.NewPCG(1, 2))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k := d.keys[rng.IntN(len(d.keys))]
		if rng.IntN(10) < 8 {
			k = d.keys[rng.IntN(hot)]
		}
		if _, ok, err := d.client.Get(ctx, k); err == nil && !ok {
			_ = d.client.Put(ctx, k, []byte("value of "+k))
		}
	}
}

func (d *demo) keyError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("cache request failed: %w", err)
}

// minLevel drops records below a level before its handler sees them.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
