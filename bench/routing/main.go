// Command routing measures the share of requests that reach a task which
// owns their key, the Slicer paper's server-side availability figure
// (§5.1.1: of 272 billion requests, 0.004% arrived misrouted), while the
// assignment changes under load and while the Assigner fails over.
//
// It starts real processes on loopback: two slicerd nodes with every role
// sharing an etcd store (an etcd server embedded in this process), so
// that one can take the job over from the other, and -tasks kvserver
// tasks serving their Slicelets' metrics (-metrics-addr). A Clerk in this
// process routes -rate requests/s over power-law keys (bench/loadshift:
// 100 keys, exponent 1.5) to the tasks. A task answers a request for a key
// its assignment does not give it with 421 and counts it in
// slicerd_slicelet_misrouted_requests_total; every request it receives,
// served or refused, is in slicerd_slicelet_requests_total.
//
// Phases, each bracketed by a scrape of every task's /metrics: steady,
// -steady of load after a -warmup in which the job balanced; shift
// (repeated -shifts times), from a move of the hot keys (the ranks are
// dealt to the keys afresh) until max/mean load over the tasks in a
// trailing 5 s window is below 1.2 again, at most -period; failover, from
// a SIGKILL of the slicerd node holding the job's lease (the one whose
// metrics show the job's gauges) until the other node's first commit for
// the job has reached the Clerk; and after failover, -after more, in which
// the new Assigner, which had no load reports, decides on the load again.
//
//	go run ./bench/routing
//	go run ./bench/routing -shifts 3 -rate 2000
//
// It prints one line per phase, or with -json one JSON object. The
// children are stopped (SIGTERM, then SIGKILL) on exit and on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/bench/loadshift"
	"github.com/slicerd/slicerd/clerk"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	slicerd, kvserver string
	tasks             int
	load              loadshift.Config
	measure           loadshift.Measure
	warmup, steady    time.Duration
	after             time.Duration
	shifts            int
	loadWindow        time.Duration
	slicerdFlags      benchproc.Flags
	jsonOut           bool
	logDir            string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{load: loadshift.DefaultConfig(), measure: loadshift.DefaultMeasure()}
	o.load.Rate = 1000
	o.measure.Period = 90 * time.Second
	fs := flag.NewFlagSet("routing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./bench/routing [flags]\n\n"+
			"Starts two slicerd nodes on an embedded etcd and kvserver tasks on loopback, offers power-law load,\n"+
			"shifts the hot keys and kills the Assigner holding the job, and prints per phase the requests the tasks\n"+
			"received and the share that reached a task owning the key, from the tasks' metrics.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary to run (default: build it from this module)")
	fs.StringVar(&o.kvserver, "kvserver", "", "kvserver binary to run (default: build it from this module)")
	fs.IntVar(&o.tasks, "tasks", 6, "kvserver tasks to start")
	fs.IntVar(&o.load.Keys, "keys", o.load.Keys, "distinct keys")
	fs.Float64Var(&o.load.Exponent, "exponent", o.load.Exponent, "power-law exponent of key popularity")
	fs.Float64Var(&o.load.Rate, "rate", o.load.Rate, "requests per second offered")
	fs.IntVar(&o.load.Workers, "workers", o.load.Workers, "most requests in flight")
	fs.Uint64Var(&o.load.Seed, "seed", o.load.Seed, "random seed of key draws and shifts")
	fs.DurationVar(&o.warmup, "warmup", 45*time.Second, "load before the steady phase, for the job to balance")
	fs.DurationVar(&o.steady, "steady", time.Minute, "length of the steady phase")
	fs.IntVar(&o.shifts, "shifts", 2, "hot-key shifts, each a phase until balanced")
	fs.DurationVar(&o.measure.Period, "period", o.measure.Period, "longest a shift phase waits for balance")
	fs.DurationVar(&o.after, "after", 30*time.Second, "length of the phase after the failover")
	fs.DurationVar(&o.loadWindow, "load-window", 2*time.Second, "kvserver -load-window: how often tasks report their load")
	fs.Var(&o.slicerdFlags, "slicerd-flag", "extra flag for both slicerd nodes, e.g. -slicerd-flag=--rebalance-interval=5s (repeatable)")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of text")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs in this directory (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q; routing takes flags only", fs.Arg(0))
	case o.tasks < 2 || o.tasks > 100:
		return nil, fmt.Errorf("-tasks %d: use 2 to 100", o.tasks)
	case o.shifts < 0:
		return nil, fmt.Errorf("-shifts %d: use 0 or more", o.shifts)
	case o.warmup < 0 || o.steady <= 0 || o.after < 0 || o.loadWindow <= 0:
		return nil, fmt.Errorf("-warmup %v, -steady %v, -after %v, -load-window %v: use positive durations (-warmup and -after may be 0)",
			o.warmup, o.steady, o.after, o.loadWindow)
	case o.measure.Period < time.Duration(o.measure.Window+1)*time.Second:
		return nil, fmt.Errorf("-period %v is not longer than the %d s balance window; make it longer", o.measure.Period, o.measure.Window)
	}
	if err := o.load.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	return benchproc.Main("routing", args, stdout, stderr, parse, experiment,
		func(o *options) bool { return o.jsonOut }, (*report).print)
}

// phase is what the tasks counted over one phase.
type phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// Requests and Misrouted are the increase of the tasks'
	// slicerd_slicelet_requests_total and
	// slicerd_slicelet_misrouted_requests_total, summed over the tasks.
	Requests  float64 `json:"requests"`
	Misrouted float64 `json:"misrouted"`
	// Correct is the share of Requests that reached a task owning the key.
	Correct float64 `json:"correctly_routed"`
	// Refused is the client's count of 421 answers over the phase, which
	// should match Misrouted: the task counts and refuses by the same
	// assignment, microseconds apart.
	Refused uint64 `json:"refused_421"`
	// Failed counts requests with no answer (no task for the key, or the
	// connection failed); Dropped those the driver had no worker for.
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
	// GenerationBefore and GenerationAfter are the Clerk's.
	GenerationBefore uint64 `json:"generation_before"`
	GenerationAfter  uint64 `json:"generation_after"`
	// Installs counts the generations the Clerk installed with a commit
	// time, and InstallP99Ms estimates the 99th percentile of their
	// delay from the commit (slicerd_clerk_assignment_delay_seconds).
	Installs     float64 `json:"installs"`
	InstallP99Ms float64 `json:"install_p99_ms"`
	// Note says what ended the phase.
	Note string `json:"note,omitempty"`
}

type report struct {
	Command  string  `json:"command"`
	Tasks    int     `json:"tasks"`
	Rate     float64 `json:"rate"`
	Keys     int     `json:"keys"`
	Exponent float64 `json:"exponent"`
	Phases   []phase `json:"phases"`
	Total    phase   `json:"total"`
	// Killed is the slicerd node SIGKILLed in the failover phase, and
	// TakeoverSeconds the time from the kill until the survivor's first
	// generation reached the Clerk.
	Killed          string  `json:"killed"`
	TakeoverSeconds float64 `json:"takeover_s"`
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n%d tasks, %g req/s over %d keys (exponent %g)\n", r.Command, r.Tasks, r.Rate, r.Keys, r.Exponent)
	fmt.Fprintf(w, "%-16s %8s %10s %10s %13s %8s %7s %8s %11s %13s  %s\n", "phase", "seconds", "requests", "misrouted", "correct", "421s", "failed", "dropped", "generations", "install_p99", "note")
	for _, p := range append(r.Phases, r.Total) {
		install := "-"
		if p.Installs > 0 {
			install = fmt.Sprintf("%.0f ms (%.0f)", p.InstallP99Ms, p.Installs)
		}
		fmt.Fprintf(w, "%-16s %8.1f %10.0f %10.0f %12.4f%% %8d %7d %8d %5d→%-5d %13s  %s\n", p.Name, p.Seconds, p.Requests, p.Misrouted, 100*p.Correct,
			p.Refused, p.Failed, p.Dropped, p.GenerationBefore, p.GenerationAfter, install, p.Note)
	}
	if r.Killed != "" {
		fmt.Fprintf(w, "killed %s; the survivor's first generation reached the client %.2f s later\n", r.Killed, r.TakeoverSeconds)
	}
}

// counters is a reading of every task's counters and of the client's.
type counters struct {
	at                  time.Time
	requests, misrouted float64
	refused             uint64
	answered            uint64
	failed, dropped     uint64
	generation          uint64
	delay               benchproc.Histogram // the Clerk's commit → installed
}

// node is one slicerd process.
type node struct {
	name        string
	p           *benchproc.Proc
	rpc, gossip string
	metrics     string // host:port
}

func experiment(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "routing: "+format+"\n", args...) }
	logDir, cleanup, err := benchproc.LogDir("routing", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."},
		benchproc.Binary{Path: &o.kvserver, Name: "kvserver", Pkg: "./examples/kvcache/cmd/kvserver"}); err != nil {
		return nil, err
	}
	etcdDir := filepath.Join(logDir, "etcd")
	if err := os.RemoveAll(etcdDir); err != nil {
		return nil, err
	}
	etcd, err := benchproc.StartEtcd(etcdDir)
	if err != nil {
		return nil, err
	}
	defer etcd.Stop()
	store := "etcd://" + etcd.Addr + "/routing/"

	var procs []*benchproc.Proc
	defer func() { benchproc.StopAll(procs, 10*time.Second) }()
	var nodes []*node
	for i := range 2 {
		n := &node{name: fmt.Sprintf("slicerd-%d", i)}
		args := []string{"--node-name", n.name, "--store", store, "--data-dir", filepath.Join(logDir, n.name),
			"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
			"--rebalance-delay", "200ms", "--startup-grace", "500ms", "--metrics-addr", "127.0.0.1:0"}
		if i > 0 {
			args = append(args, "--join", nodes[0].gossip)
		}
		args = append(args, o.slicerdFlags...)
		logf := filepath.Join(logDir, n.name+".log")
		p, st, err := benchproc.StartSlicerd(n.name, logf, o.slicerd, args, 30*time.Second)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		n.p, n.rpc, n.gossip = p, st.RPC, st.Gossip
		if n.metrics, err = benchproc.LoggedMetricsAddr(logf, 10*time.Second); err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	say("slicerd nodes %s (rpc %s) and %s (rpc %s) on etcd %s; logs in %s", nodes[0].name, nodes[0].rpc, nodes[1].name, nodes[1].rpc, etcd.Addr, logDir)
	if err := benchproc.Command(ctx, o.slicerd, "job", "set", "--addr", nodes[0].rpc,
		"--min-redundancy", "1", "--max-redundancy", strconv.Itoa(o.tasks), "kv"); err != nil {
		return nil, err
	}

	var taskMetrics []string
	for i := range o.tasks {
		name := fmt.Sprintf("kv-%d", i)
		maddr, err := benchproc.FreeAddr()
		if err != nil {
			return nil, err
		}
		p, err := benchproc.Start(name, filepath.Join(logDir, name+".log"), "kvserver task="+name, nil, o.kvserver,
			"-job", "kv", "-task", name, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0",
			"-gossip-profile", "local", "-join", nodes[0].gossip, "-load-window", o.loadWindow.String(),
			"-metrics-addr", maddr, "-log-level", "warn")
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		taskMetrics = append(taskMetrics, maddr)
	}
	for _, p := range procs[2:] {
		if _, err := p.WaitReady(30 * time.Second); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, logDir)
		}
	}

	// The client streams from both nodes' Distributors, as a client of a
	// two-node cluster is configured.
	reg := prometheus.NewRegistry()
	ck, err := clerk.New(clerk.Config{Job: "kv", Addrs: []string{nodes[0].rpc, nodes[1].rpc}, Registerer: reg})
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
	d, err := loadshift.NewDriver(o.load, ck, nil)
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithCancel(ctx)
	ddone := make(chan error, 1)
	go func() { ddone <- d.Run(dctx) }()
	defer func() { dcancel(); <-ddone }()
	say("generation %d over %d tasks; offering %g req/s; warming up for %v", ck.Generation(), o.tasks, o.load.Rate, o.warmup)
	if err := benchproc.Sleep(ctx, o.warmup); err != nil {
		return nil, err
	}

	read := func() (counters, error) {
		c := counters{at: time.Now(), generation: ck.Generation(), refused: d.Misdirected()}
		c.answered, c.failed, c.dropped = d.Stats()
		own, err := gather(reg)
		if err != nil {
			return c, err
		}
		c.delay = own.Histogram("slicerd_clerk_assignment_delay_seconds", "job", "kv")
		for _, addr := range taskMetrics {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ss, err := benchproc.Scrape(sctx, "http://"+addr+"/metrics")
			cancel()
			if err != nil {
				return c, err
			}
			c.requests += ss.Sum("slicerd_slicelet_requests_total", "job", "kv")
			c.misrouted += ss.Sum("slicerd_slicelet_misrouted_requests_total", "job", "kv")
		}
		return c, nil
	}
	rep := &report{Command: "go run ./bench/routing " + strings.Join(os.Args[1:], " "),
		Tasks: o.tasks, Rate: o.load.Rate, Keys: o.load.Keys, Exponent: o.load.Exponent}
	var first counters
	measured := func(name string, from counters, note string) (counters, error) {
		to, err := read()
		if err != nil {
			return to, err
		}
		p := between(name, from, to)
		p.Note = note
		rep.Phases = append(rep.Phases, p)
		say("%s: %.0f requests in %.1f s, %.0f misrouted (%.4f%% correct); %d answered 421", name, p.Requests, p.Seconds, p.Misrouted, 100*p.Correct, p.Refused)
		return to, nil
	}

	start, err := read()
	if err != nil {
		return nil, err
	}
	first = start
	if err := benchproc.Sleep(ctx, o.steady); err != nil {
		return nil, err
	}
	if start, err = measured("steady", start, ""); err != nil {
		return nil, err
	}

	m := o.measure
	m.StopWhenBalanced = true
	for i := range o.shifts {
		r, err := d.MeasureShift(ctx, m)
		if err != nil {
			return nil, err
		}
		note := fmt.Sprintf("balanced after %.0f s", r.ReactionSeconds)
		if !r.Balanced {
			note = fmt.Sprintf("not balanced within %v (imbalance %.2f)", m.Period, r.FinalImbalance)
		}
		if start, err = measured(fmt.Sprintf("shift %d", i+1), start, note); err != nil {
			return nil, err
		}
	}

	// The node holding the job's lease exposes the job's gauges.
	holder := -1
	for i, n := range nodes {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ss, err := benchproc.Scrape(sctx, "http://"+n.metrics+"/metrics")
		cancel()
		if err != nil {
			return nil, err
		}
		for _, s := range ss {
			if s.Name == "slicerd_job_generation" && s.Labels["job"] == "kv" {
				holder = i
			}
		}
	}
	if holder < 0 {
		return nil, fmt.Errorf("neither slicerd node exposes the job's gauges: no lease holder found (%s)", logDir)
	}
	victim := nodes[holder]
	before := ck.Generation()
	killed := time.Now()
	if err := victim.p.Cmd.Process.Kill(); err != nil {
		return nil, fmt.Errorf("kill %s: %w", victim.name, err)
	}
	say("%s, holding the job's lease, killed at generation %d", victim.name, before)
	if err := waitGeneration(ctx, ck, before, time.Minute); err != nil {
		return nil, err
	}
	rep.Killed, rep.TakeoverSeconds = victim.name, time.Since(killed).Seconds()
	if start, err = measured("failover", start, fmt.Sprintf("%s killed; takeover reached the client after %.2f s", victim.name, rep.TakeoverSeconds)); err != nil {
		return nil, err
	}
	if o.after > 0 {
		if err := benchproc.Sleep(ctx, o.after); err != nil {
			return nil, err
		}
		if start, err = measured("after failover", start, ""); err != nil {
			return nil, err
		}
	}
	rep.Total = between("total", first, start)
	return rep, nil
}

// between is the phase from one reading to the next.
func between(name string, from, to counters) phase {
	p := phase{Name: name, Seconds: to.at.Sub(from.at).Seconds(),
		Requests: to.requests - from.requests, Misrouted: to.misrouted - from.misrouted,
		Refused: to.refused - from.refused, Failed: to.failed - from.failed, Dropped: to.dropped - from.dropped,
		GenerationBefore: from.generation, GenerationAfter: to.generation}
	if p.Requests > 0 {
		p.Correct = 1 - p.Misrouted/p.Requests
	}
	if d := to.delay.Sub(from.delay); d.Count > 0 {
		p.Installs, p.InstallP99Ms = d.Count, 1e3*d.Quantile(0.99)
	}
	return p
}

// gather reads the series of an in-process registry as a scrape would.
func gather(g prometheus.Gatherer) (benchproc.Samples, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out benchproc.Samples
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(name string, v float64, extra ...string) {
				l := maps.Clone(labels)
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				out = append(out, benchproc.Sample{Name: name, Labels: l, Value: v})
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				inf := false
				for _, b := range h.GetBucket() {
					inf = inf || math.IsInf(b.GetUpperBound(), 1)
					add(f.GetName()+"_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				if !inf {
					add(f.GetName()+"_bucket", float64(h.GetSampleCount()), "le", "+Inf")
				}
				add(f.GetName()+"_count", float64(h.GetSampleCount()))
				add(f.GetName()+"_sum", h.GetSampleSum())
			case m.GetCounter() != nil:
				add(f.GetName(), m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				add(f.GetName(), m.GetGauge().GetValue())
			}
		}
	}
	return out, nil
}

// waitGeneration waits until the Clerk holds a generation newer than gen.
func waitGeneration(ctx context.Context, ck *clerk.Clerk, gen uint64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ck.Generation() <= gen {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("no generation after %d reached the client within %v", gen, timeout)
		case <-tick.C:
		}
	}
	return nil
}
