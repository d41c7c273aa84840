// Command consistency runs Slicer's consistency benchmark (§5.2.5) on
// slicerd's strong mode, with faults: a strongly consistent job of -tasks
// kvserver tasks (-consistency strong, writing through to a backing store
// that refuses stale fencing tokens) on two Assigners sharing an etcd
// server, and -clients clients offering a steady request rate over a
// dynamically skewed key set: a few hot keys take most requests, and every
// -shift they move, so the Assigner keeps reassigning.
//
// During the run it stops one task (SIGSTOP) for longer than its lease and
// continues it, kills another (SIGKILL), kills the Assigner holding the
// job's lease, and restarts etcd. At the end it checks every task's
// recorded history of satisfied requests (lease/leasecheck): no instant at
// which two tasks owned a key, no fencing token going back.
//
// The load is open-loop (benchproc.Timetable): every request has its time on a fixed
// timetable and its own goroutine, so a stalled request delays no other.
// A request is satisfied when the key's owner answers it within -deadline
// of its scheduled time; one not sent (the -inflight bound) or not
// answered in time is unsatisfied, and is listed against the fault window
// its life overlaps (the fault's span plus -settle), or counted outside
// any. It reports satisfied-of-scheduled, the unsatisfied requests by
// fault window and cause (every one in unsatisfied.txt of the log
// directory), and the guard's recall periods from the Assigners' logs.
// It exits 1 on a double owner, a token regression or an unsatisfied
// request outside every fault window.
//
//	go run ./bench/consistency -duration 5m
//	go run ./bench/consistency -duration 5m -bridge=false
//
// etcd runs inside the harness (benchproc.StartEtcd); the
// slicerd and kvserver binaries are built from this module unless given.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/lease/leasecheck"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	slicerd, kvserver string
	tasks, clients    int
	pythonTasks       int
	python            string
	keys, hot         int
	hotShare          float64
	rate              float64
	duration, shift   time.Duration
	leaseTTL, await   time.Duration
	deadline, settle  time.Duration
	inflight          int
	taskLogLevel      string
	bridge, faults    bool
	targeted          bool
	restart           time.Duration
	logDir            string
	jsonOut           bool
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("consistency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary (default: build it)")
	fs.StringVar(&o.kvserver, "kvserver", "", "kvserver binary (default: build it)")
	fs.IntVar(&o.tasks, "tasks", 10, "kvserver tasks of the strong job")
	fs.IntVar(&o.pythonTasks, "python-tasks", 0, "of the -tasks, how many run as the Python kvserver under a slicerd sidecar (handles over its local API); the faults hit kv-1 and kv-2, so 3 puts both on Python tasks")
	fs.StringVar(&o.python, "python", "", "the Python interpreter for -python-tasks, with python3-xxhash (default: $SLICERD_PYTHON, else python3)")
	fs.IntVar(&o.clients, "clients", 25, "clients offering requests")
	fs.IntVar(&o.keys, "keys", 1000, "keys in the key set")
	fs.IntVar(&o.hot, "hot", 10, "hot keys")
	fs.Float64Var(&o.hotShare, "hot-share", 0.5, "share of the requests that go to the hot keys")
	fs.Float64Var(&o.rate, "rate", 20, "requests per second per client")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "how long the clients run")
	fs.DurationVar(&o.deadline, "deadline", 5*time.Second, "a request not answered this long after its scheduled time is unsatisfied")
	fs.DurationVar(&o.settle, "settle", 10*time.Second, "a fault's window lasts this long past the fault's end")
	fs.IntVar(&o.inflight, "inflight", 4000, "requests in flight at most; one scheduled beyond it is unsatisfied")
	fs.DurationVar(&o.shift, "shift", 10*time.Second, "how often the hot keys move")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "the tasks' guard and bridge read TTL")
	fs.DurationVar(&o.await, "await", kvcache.DefaultAwait, "how long a task holds a request for a key on its way to it (kvserver -await; 0: answer 421 at once)")
	fs.StringVar(&o.taskLogLevel, "task-log-level", "warn", "the tasks' log level (kvserver -log-level)")
	fs.BoolVar(&o.bridge, "bridge", true, "move the guard through a bridge lease (false: slicerd --disable-bridge)")
	fs.BoolVar(&o.faults, "faults", true, "inject the faults")
	fs.BoolVar(&o.targeted, "targeted", true, "with -faults, also the faults aimed by failpoints at a guard move's steps (needs a slicerd built with -tags failpoints, as the harness builds it)")
	fs.DurationVar(&o.restart, "restart", 2*time.Second, "how long a killed or crashed Assigner stays down")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs and records here (default: a temporary directory, removed)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "consistency: unexpected argument %q; the harness takes flags only\n", fs.Arg(0))
		return 2
	case o.tasks < 3 || o.clients < 1 || o.keys < 1 || o.hot < 0 || o.hot > o.keys || o.pythonTasks < 0 || o.pythonTasks > o.tasks:
		fmt.Fprintln(stderr, "consistency: need -tasks ≥ 3, -clients ≥ 1, 0 ≤ -hot ≤ -keys and 0 ≤ -python-tasks ≤ -tasks")
		return 2
	case !(o.hotShare >= 0 && o.hotShare <= 1) || !(o.rate > 0) || o.duration <= 0 || o.shift <= 0 || o.leaseTTL <= 0 ||
		o.deadline <= 0 || o.settle < 0 || o.inflight < 1:
		fmt.Fprintln(stderr, "consistency: -hot-share must be in [0, 1]; -rate, -duration, -shift, -lease-ttl, -deadline and -inflight positive; -settle not negative")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "consistency: %v\n", err)
		return 1
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.print(stdout)
	}
	if rep.DoubleOwners != 0 || rep.TokenRegressions != 0 || rep.OutsideCount != 0 {
		return 1
	}
	return 0
}

func measure(ctx context.Context, o options, stderr io.Writer) (*report, error) {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "consistency: "+format+"\n", args...) }
	logDir, cleanup, err := benchproc.LogDir("consistency", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: ".", Tags: "failpoints"},
		benchproc.Binary{Path: &o.kvserver, Name: "kvserver", Pkg: "./examples/kvcache/cmd/kvserver"}); err != nil {
		return nil, err
	}
	// Records of an earlier run in the same directory would join this
	// run's history.
	if old, _ := filepath.Glob(filepath.Join(logDir, "*.rec")); len(old) > 0 {
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return nil, err
			}
		}
	}
	etcd, err := benchproc.StartEtcd(filepath.Join(logDir, "etcd"))
	if err != nil {
		return nil, err
	}
	defer func() { etcd.Stop() }()
	store := "etcd://" + etcd.Addr + "/consistency/"

	var procs []*benchproc.Proc // the tasks
	var assigners []*assigner
	running := func() []*benchproc.Proc {
		ps := slices.Clone(procs)
		for _, a := range assigners {
			ps = append(ps, a.p)
		}
		return ps
	}
	defer func() { benchproc.StopAll(running(), 10*time.Second) }()
	for i := range 2 {
		name := fmt.Sprintf("assigner-%d", i)
		a := &assigner{name: name, bin: o.slicerd, dir: logDir,
			args: []string{"--node-name", name, "--store", store, "--data-dir", filepath.Join(logDir, name),
				"--gossip-profile", "local", "--rebalance-delay", "200ms", "--startup-grace", "500ms"}}
		if !o.bridge {
			a.args = append(a.args, "--disable-bridge")
		}
		// Fixed addresses, so that a restarted Assigner is found where
		// it was.
		for _, addr := range []*string{&a.rpc, &a.gossip, &a.failpoint} {
			if *addr, err = benchproc.FreeAddr(); err != nil {
				return nil, err
			}
		}
		join := ""
		if i > 0 {
			join = assigners[0].gossip
		}
		if err := a.start(join); err != nil {
			return nil, err
		}
		assigners = append(assigners, a)
	}
	out, err := exec.CommandContext(ctx, o.slicerd, "job", "set", "--addr", assigners[0].rpc, "--consistency", "strong", "kv").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("slicerd job set: %w: %s", err, out)
	}

	backing := kvcache.NewMemBacking()
	dbln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	db := &http.Server{Handler: kvcache.BackingHandler(backing)}
	go db.Serve(dbln)
	defer db.Close()

	// Each task's processes: a kvserver, or a Python task's sidecar and
	// application (the first -python-tasks tasks); a fault hits all of
	// a task's processes, as it would a host's.
	tasks := map[string][]*benchproc.Proc{}
	py := benchproc.PyTaskConfig{Python: o.python, Slicerd: o.slicerd, Dir: logDir, Job: "kv", Join: assigners[0].gossip}
	if o.pythonTasks > 0 {
		if err := py.Prepare(ctx); err != nil {
			return nil, err
		}
	}
	for i := range o.tasks {
		name := fmt.Sprintf("kv-%d", i)
		if i < o.pythonTasks {
			c := py
			c.Task = name
			c.SidecarArgs = []string{"--consistency", "strong", "--lease-ttl", o.leaseTTL.String(), "--load-window", "1s"}
			c.AppArgs = []string{"--consistency", "strong", "--backing", "http://" + dbln.Addr().String(), "--await", o.await.String(),
				"--record", filepath.Join(logDir, name+".rec"), "--task", name}
			t, err := benchproc.StartPyTask(c)
			if err != nil {
				return nil, err
			}
			procs = append(procs, t.Procs()...)
			tasks[name] = t.Procs()
			continue
		}
		p, err := benchproc.Start(name, filepath.Join(logDir, name+".log"), "kvserver task="+name, nil, o.kvserver,
			"-job", "kv", "-task", name, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local",
			"-join", assigners[0].gossip, "-load-window", "1s", "-log-level", o.taskLogLevel, "-await", o.await.String(),
			"-consistency", "strong", "-lease-ttl", o.leaseTTL.String(),
			"-backing", "http://"+dbln.Addr().String(), "-record", filepath.Join(logDir, name+".rec"))
		if err != nil {
			return nil, err
		}
		if _, err := p.WaitReady(30 * time.Second); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, logDir)
		}
		procs = append(procs, p)
		tasks[name] = []*benchproc.Proc{p}
	}
	ck, err := clerk.New(clerk.Config{Job: "kv", Addrs: []string{assigners[0].rpc, assigners[1].rpc}})
	if err != nil {
		return nil, err
	}
	cctx, ccancel := context.WithCancel(ctx)
	cdone := make(chan error, 1)
	go func() { cdone <- ck.Run(cctx) }()
	defer func() { ccancel(); <-cdone }()
	if err := benchproc.WaitTasks(ctx, ck, o.tasks, 60*time.Second); err != nil {
		return nil, err
	}
	say("job kv strong over %d tasks (generation %d); %d clients at %g req/s each for %v; logs in %s",
		o.tasks, ck.Generation(), o.clients, o.rate, o.duration, logDir)

	client := kvcache.NewClient(ck, &http.Client{Timeout: o.deadline, Transport: &http.Transport{MaxIdleConnsPerHost: 64}})
	var hotSeed atomic.Uint64
	rctx, rcancel := context.WithTimeout(ctx, o.duration)
	defer rcancel()
	var wg sync.WaitGroup
	rngs := make([]*rand.Rand, o.clients)
	for c := range rngs {
		rngs[c] = rand.New(rand.NewPCG(uint64(c), 11))
	}
	// next is called by client c's scheduler only, so its rng needs no
	// lock; the request it returns runs in its own goroutine.
	next := func(c int) benchproc.Request {
		rng := rngs[c]
		var k int
		if o.hot > 0 && rng.Float64() < o.hotShare {
			// The hot keys are a window of the key set that moves
			// every shift.
			k = (int(hotSeed.Load())*7919 + rng.IntN(o.hot)) % o.keys
		} else {
			k = rng.IntN(o.keys)
		}
		key := "key-" + strconv.Itoa(k)
		if rng.IntN(2) == 0 {
			val := []byte(strconv.Itoa(c))
			return func(ctx context.Context) error { return client.Put(ctx, key, val) }
		}
		return func(ctx context.Context) error { _, _, err := client.Get(ctx, key); return err }
	}
	tt := benchproc.Timetable{Clients: o.clients, Rate: o.rate, Duration: o.duration, Deadline: o.deadline, Inflight: o.inflight}
	start := time.Now()
	var load *benchproc.LoadResult
	wg.Go(func() { load = tt.Run(rctx, start, next) })
	wg.Go(func() {
		t := time.NewTicker(o.shift)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				hotSeed.Add(1)
			}
		}
	})

	rep := &report{Command: "go run ./bench/consistency " + strings.Join(args(), " "), Bridge: o.bridge,
		DeadlineS: o.deadline.Seconds(), SettleS: o.settle.Seconds()}
	n := &nemesis{ctx: rctx, start: start, say: say, assigners: assigners, fireWait: o.shift * 3}
	if o.faults {
		if err := n.run(o, tasks, etcd); err != nil {
			return nil, err
		}
	}
	<-rctx.Done()
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	for name, ps := range tasks {
		if name != "kv-2" {
			ps[0].Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	benchproc.StopAll(running(), 10*time.Second)
	procs = nil

	rep.Scheduled, rep.Sent, rep.Satisfied = load.Scheduled, load.Sent, load.Satisfied
	if rep.Scheduled > 0 {
		rep.SatisfiedPct = 100 * float64(rep.Satisfied) / float64(rep.Scheduled)
	}
	if rep.Sent > 0 {
		rep.SentSatisfiedPct = 100 * float64(rep.Satisfied) / float64(rep.Sent)
	}
	all := load.Latency
	rep.LatencyP50Ms, rep.LatencyP99Ms, rep.LatencyP999Ms = pct(all, 0.5), pct(all, 0.99), pct(all, 0.999)
	if len(all) > 0 {
		rep.LatencyMaxMs = slices.Max(all)
	}
	rep.attribute(n.windows, load.Unsatisfied, o.deadline, o.settle)
	if err := rep.writeUnsatisfied(filepath.Join(logDir, "unsatisfied.txt")); err != nil {
		return nil, err
	}
	rep.Attempts, rep.AttemptsSatisfied = client.Attempts()
	if rep.Attempts > 0 {
		rep.AttemptsPct = 100 * float64(rep.AttemptsSatisfied) / float64(rep.Attempts)
	}
	rep.StaleWrites = backing.Refused()
	ops, err := leasecheck.ReadRecords(filepath.Join(logDir, "*.rec"))
	if err != nil {
		return nil, err
	}
	check := leasecheck.Check(ops)
	rep.Recorded, rep.DoubleOwners, rep.TokenRegressions = check.Ops, check.DoubleOwners, check.TokenRegression
	for _, v := range check.Examples {
		rep.Examples = append(rep.Examples, v.String())
	}
	var recalls, moves []float64
	for _, a := range assigners {
		for _, l := range a.logs {
			r, m := guardMoves(l)
			recalls, moves = append(recalls, r...), append(moves, m...)
		}
	}
	rep.GuardMoves = len(recalls)
	rep.RecallP50Ms, rep.RecallP99Ms = pct(recalls, 0.5), pct(recalls, 0.99)
	rep.MoveP50Ms, rep.MoveP99Ms = pct(moves, 0.5), pct(moves, 0.99)
	return rep, nil
}

func args() []string { return os.Args[1:] }

// guardMoves reads the Assigner's "guard moved" lines: the recall period
// (from recalling the guard to writing its next value, when no task may
// use the keys whose owner changes) and the whole move, in milliseconds.
func guardMoves(logPath string) (recalls, moves []float64) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"msg":"guard moved"`) {
			continue
		}
		var rec struct {
			From   uint64  `json:"from"`
			Recall float64 `json:"recall_period"`
			Took   float64 `json:"took"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.From == 0 {
			continue // the first value of the guard recalls nothing
		}
		recalls = append(recalls, rec.Recall/1e6)
		moves = append(moves, rec.Took/1e6)
	}
	return recalls, moves
}

// leaseHolder returns the log of the Assigner that last took the job over.
func leaseHolder(logs ...string) string {
	var holder string
	var latest time.Time
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `"msg":"took over job as its preferred assigner"`) {
				continue
			}
			var rec struct {
				Time time.Time `json:"time"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Time.After(latest) {
				holder, latest = path, rec.Time
			}
		}
		f.Close()
	}
	return holder
}

func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}
