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
// which two tasks owned a key, no fencing token going back. It reports
// requests satisfied (of the attempts the clients sent to a task) and the
// guard's recall periods from the Assigners' logs.
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
	keys, hot         int
	hotShare          float64
	rate              float64
	duration, shift   time.Duration
	leaseTTL, await   time.Duration
	taskLogLevel      string
	bridge, faults    bool
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
	fs.IntVar(&o.clients, "clients", 25, "clients offering requests")
	fs.IntVar(&o.keys, "keys", 1000, "keys in the key set")
	fs.IntVar(&o.hot, "hot", 10, "hot keys")
	fs.Float64Var(&o.hotShare, "hot-share", 0.5, "share of the requests that go to the hot keys")
	fs.Float64Var(&o.rate, "rate", 20, "requests per second per client")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "how long the clients run")
	fs.DurationVar(&o.shift, "shift", 10*time.Second, "how often the hot keys move")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "the tasks' guard and bridge read TTL")
	fs.DurationVar(&o.await, "await", kvcache.DefaultAwait, "how long a task holds a request for a key on its way to it (kvserver -await; 0: answer 421 at once)")
	fs.StringVar(&o.taskLogLevel, "task-log-level", "warn", "the tasks' log level (kvserver -log-level)")
	fs.BoolVar(&o.bridge, "bridge", true, "move the guard through a bridge lease (false: slicerd --disable-bridge)")
	fs.BoolVar(&o.faults, "faults", true, "inject the faults")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs and records here (default: a temporary directory, removed)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "consistency: unexpected argument %q; the harness takes flags only\n", fs.Arg(0))
		return 2
	case o.tasks < 3 || o.clients < 1 || o.keys < 1 || o.hot < 0 || o.hot > o.keys:
		fmt.Fprintln(stderr, "consistency: need -tasks ≥ 3, -clients ≥ 1, and 0 ≤ -hot ≤ -keys")
		return 2
	case !(o.hotShare >= 0 && o.hotShare <= 1) || !(o.rate > 0) || o.duration <= 0 || o.shift <= 0 || o.leaseTTL <= 0:
		fmt.Fprintln(stderr, "consistency: -hot-share must be in [0, 1]; -rate, -duration, -shift and -lease-ttl positive")
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
	if rep.DoubleOwners != 0 || rep.TokenRegressions != 0 {
		return 1
	}
	return 0
}

type report struct {
	Command          string   `json:"command"`
	Bridge           bool     `json:"bridge"`
	Seconds          float64  `json:"seconds"`
	Requests         uint64   `json:"requests"`
	Failed           uint64   `json:"failed"`
	Attempts         uint64   `json:"attempts"`
	Satisfied        uint64   `json:"satisfied"`
	SatisfiedPct     float64  `json:"satisfied_pct"`
	RequestsPct      float64  `json:"requests_pct"`
	Recorded         int      `json:"recorded"`
	DoubleOwners     int      `json:"double_owners"`
	TokenRegressions int      `json:"token_regressions"`
	StaleWrites      uint64   `json:"stale_writes_refused"`
	GuardMoves       int      `json:"guard_moves"`
	RecallP50Ms      float64  `json:"recall_p50_ms"`
	RecallP99Ms      float64  `json:"recall_p99_ms"`
	MoveP50Ms        float64  `json:"move_p50_ms"`
	MoveP99Ms        float64  `json:"move_p99_ms"`
	LatencyP50Ms     float64  `json:"latency_p50_ms"`
	LatencyP99Ms     float64  `json:"latency_p99_ms"`
	LatencyP999Ms    float64  `json:"latency_p999_ms"`
	LatencyMaxMs     float64  `json:"latency_max_ms"`
	Faults           []string `json:"faults"`
	// FailedAfterFault counts the failed requests in the faultWindow after
	// each fault (the newest one before the failure); FailedElsewhere the
	// others.
	FailedAfterFault []uint64 `json:"failed_after_fault"`
	FailedElsewhere  uint64   `json:"failed_elsewhere"`
	Examples         []string `json:"examples,omitempty"`
}

func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.Command)
	fmt.Fprintf(w, "bridge %v, %.0f s: %d requests, %d failed after the client's retries (%.3f%% succeeded); %d of %d attempts satisfied (%.3f%%)\n",
		r.Bridge, r.Seconds, r.Requests+r.Failed, r.Failed, r.RequestsPct, r.Satisfied, r.Attempts, r.SatisfiedPct)
	fmt.Fprintf(w, "history: %d satisfied requests recorded, %d double owners, %d token regressions; backing store refused %d stale writes\n",
		r.Recorded, r.DoubleOwners, r.TokenRegressions, r.StaleWrites)
	fmt.Fprintf(w, "guard moved %d times: recall p50 %.0f ms p99 %.0f ms; whole move p50 %.0f ms p99 %.0f ms\n",
		r.GuardMoves, r.RecallP50Ms, r.RecallP99Ms, r.MoveP50Ms, r.MoveP99Ms)
	fmt.Fprintf(w, "satisfied requests took p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms, max %.0f ms (retries and waits for keys on their way included)\n",
		r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyP999Ms, r.LatencyMaxMs)
	for i, f := range r.Faults {
		var n uint64
		if i < len(r.FailedAfterFault) {
			n = r.FailedAfterFault[i]
		}
		fmt.Fprintf(w, "  fault: %s (failed requests in the %v after it: %d)\n", f, faultWindow, n)
	}
	fmt.Fprintf(w, "failed requests away from any fault: %d\n", r.FailedElsewhere)
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  violation: %s\n", e)
	}
}

func measure(ctx context.Context, o options, stderr io.Writer) (*report, error) {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "consistency: "+format+"\n", args...) }
	logDir, cleanup, err := benchproc.LogDir("consistency", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."},
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

	var procs []*benchproc.Proc
	defer func() { benchproc.StopAll(procs, 10*time.Second) }()
	type node struct {
		p            *benchproc.Proc
		name         string
		rpc, gossip  string
		killed, logf string
	}
	var assigners []*node
	for i := range 2 {
		name := fmt.Sprintf("assigner-%d", i)
		args := []string{"--node-name", name, "--store", store, "--data-dir", filepath.Join(logDir, name),
			"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
			"--rebalance-delay", "200ms", "--startup-grace", "500ms"}
		if !o.bridge {
			args = append(args, "--disable-bridge")
		}
		if i > 0 {
			args = append(args, "--join", assigners[0].gossip)
		}
		logf := filepath.Join(logDir, name+".log")
		p, st, err := benchproc.StartSlicerd(name, logf, o.slicerd, args, 30*time.Second)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		assigners = append(assigners, &node{p: p, name: name, rpc: st.RPC, gossip: st.Gossip, logf: logf})
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

	tasks := map[string]*benchproc.Proc{}
	for i := range o.tasks {
		name := fmt.Sprintf("kv-%d", i)
		p, err := benchproc.Start(name, filepath.Join(logDir, name+".log"), "kvserver task="+name, nil, o.kvserver,
			"-job", "kv", "-task", name, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local",
			"-join", assigners[0].gossip, "-load-window", "1s", "-log-level", o.taskLogLevel, "-await", o.await.String(),
			"-consistency", "strong", "-lease-ttl", o.leaseTTL.String(),
			"-backing", "http://"+dbln.Addr().String(), "-record", filepath.Join(logDir, name+".rec"))
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		tasks[name] = p
	}
	for _, p := range tasks {
		if _, err := p.WaitReady(30 * time.Second); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, logDir)
		}
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

	client := kvcache.NewClient(ck, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}})
	var hotSeed atomic.Uint64
	rctx, rcancel := context.WithTimeout(ctx, o.duration)
	defer rcancel()
	var wg sync.WaitGroup
	var ok, failed atomic.Uint64
	latencies := make([][]float64, o.clients) // ms of each satisfied request, per client
	var failMu sync.Mutex
	var failedAt []time.Duration // since start
	start := time.Now()
	for c := range o.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
			defer tick.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-tick.C:
				}
				var k int
				if o.hot > 0 && rng.Float64() < o.hotShare {
					// The hot keys are a window of the key set that moves
					// every shift.
					k = (int(hotSeed.Load())*7919 + rng.IntN(o.hot)) % o.keys
				} else {
					k = rng.IntN(o.keys)
				}
				key := "key-" + strconv.Itoa(k)
				qctx, cancel := context.WithTimeout(rctx, 10*time.Second)
				began := time.Now()
				var err error
				if rng.IntN(2) == 0 {
					err = client.Put(qctx, key, []byte(strconv.Itoa(c)))
				} else {
					_, _, err = client.Get(qctx, key)
				}
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
					latencies[c] = append(latencies[c], float64(time.Since(began).Microseconds())/1e3)
				case rctx.Err() == nil:
					failed.Add(1)
					failMu.Lock()
					failedAt = append(failedAt, time.Since(start))
					failMu.Unlock()
				}
			}
		})
	}
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

	rep := &report{Command: "go run ./bench/consistency " + strings.Join(args(), " "), Bridge: o.bridge}
	var faultAt []time.Duration
	if o.faults {
		// The faults at fixed fractions of the run, each after a quiet
		// stretch so its effect can be told apart in the logs.
		at := func(frac float64) error {
			return benchproc.SleepUntil(rctx, start.Add(time.Duration(frac*float64(o.duration))))
		}
		note := func(f string) {
			faultAt = append(faultAt, time.Since(start))
			rep.Faults = append(rep.Faults, fmt.Sprintf("%5.1f s %s", time.Since(start).Seconds(), f))
			say("%s", f)
		}
		if at(0.15) == nil {
			p := tasks["kv-1"]
			p.Cmd.Process.Signal(syscall.SIGSTOP)
			note("SIGSTOP kv-1 for " + (2 * o.leaseTTL).String())
			if benchproc.SleepUntil(rctx, time.Now().Add(2*o.leaseTTL)) == nil {
				p.Cmd.Process.Signal(syscall.SIGCONT)
				note("SIGCONT kv-1")
			}
		}
		if at(0.35) == nil {
			tasks["kv-2"].Cmd.Process.Signal(syscall.SIGKILL)
			note("SIGKILL kv-2")
		}
		if at(0.55) == nil {
			holder := leaseHolder(assigners[0].logf, assigners[1].logf)
			for _, a := range assigners {
				if a.logf == holder {
					a.p.Cmd.Process.Signal(syscall.SIGKILL)
					note("SIGKILL " + a.name + ", the job lease's holder")
				}
			}
		}
		if at(0.75) == nil {
			etcd.Stop()
			note("etcd stopped")
			if benchproc.SleepUntil(rctx, time.Now().Add(time.Second)) == nil {
				if err := etcd.Restart(); err != nil {
					return nil, err
				}
				note("etcd restarted")
			}
		}
	}
	<-rctx.Done()
	wg.Wait()
	rep.Seconds = time.Since(start).Seconds()
	for name, p := range tasks {
		if name != "kv-2" {
			p.Cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	benchproc.StopAll(procs, 10*time.Second)
	procs = nil

	rep.Requests, rep.Failed = ok.Load(), failed.Load()
	all := slices.Concat(latencies...)
	rep.LatencyP50Ms, rep.LatencyP99Ms, rep.LatencyP999Ms = pct(all, 0.5), pct(all, 0.99), pct(all, 0.999)
	if len(all) > 0 {
		rep.LatencyMaxMs = slices.Max(all)
	}
	rep.FailedAfterFault = make([]uint64, len(faultAt))
	for _, t := range failedAt {
		i := faultBefore(faultAt, t)
		if i < 0 {
			rep.FailedElsewhere++
		} else {
			rep.FailedAfterFault[i]++
		}
	}
	rep.Attempts, rep.Satisfied = client.Attempts()
	if n := rep.Requests + rep.Failed; n > 0 {
		rep.RequestsPct = 100 * float64(rep.Requests) / float64(n)
	}
	if rep.Attempts > 0 {
		rep.SatisfiedPct = 100 * float64(rep.Satisfied) / float64(rep.Attempts)
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
		r, m := guardMoves(a.logf)
		recalls, moves = append(recalls, r...), append(moves, m...)
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

// faultWindow is how long after a fault a failed request is counted as
// the fault's.
const faultWindow = 20 * time.Second

// faultBefore returns the index of the newest fault at most faultWindow
// before t, or -1.
func faultBefore(faultAt []time.Duration, t time.Duration) int {
	for i := len(faultAt) - 1; i >= 0; i-- {
		if faultAt[i] <= t {
			if t-faultAt[i] <= faultWindow {
				return i
			}
			return -1
		}
	}
	return -1
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
