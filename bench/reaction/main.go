// Command reaction measures how fast a running slicerd cluster rebalances
// after the hot keys shift: the live version of the Slicer paper's §5.2.3
// experiment (Slicer's median is 480 s).
//
// It starts real processes on loopback: one slicerd with every role and
// -tasks kvserver tasks that count one unit of load per request and report
// it through their Slicelets. It sets the job's redundancy, then offers
// power-law load (100 keys, exponent 1.5) from this process: a Clerk
// streams the assignment from slicerd and each request goes over HTTP to
// one of the tasks serving its key. Every -period the ranks are dealt to
// the keys afresh, so the hot keys move, and the harness times, from the
// driver's side, how long until max/mean load over the tasks in a trailing
// -window falls below -threshold.
//
//	go run ./bench/reaction -shifts 5 -period 60s
//	go run ./bench/reaction -shifts 5 -period 60s -python-tasks 5   # half the tasks in Python, under sidecars
//
// It prints one line per shift and the median, or with -json one JSON
// object. The children are stopped (SIGTERM, then SIGKILL) on exit and on
// Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/bench/loadshift"
	"github.com/slicerd/slicerd/slicelet"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the harness's flags.
type options struct {
	slicerd, kvserver string
	pythonTasks       int
	python            string
	tasks             int
	load              loadshift.Config
	measure           loadshift.Measure
	shifts            int
	warmup            time.Duration
	loadWindow        time.Duration
	maxRedundancy     int
	rebalanceInterval string
	slicerdFlags      benchproc.Flags
	freeze            bool
	kill              bool
	jsonOut           bool
	trace             bool
	logDir            string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{load: loadshift.DefaultConfig(), measure: loadshift.DefaultMeasure()}
	fs := flag.NewFlagSet("reaction", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./bench/reaction [flags]\n\n"+
			"Starts slicerd and kvserver processes on loopback, offers power-law load, shifts the hot keys\n"+
			"every -period and prints, per shift, the time until max/mean task load falls below -threshold.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary to run (default: build it from this module)")
	fs.StringVar(&o.kvserver, "kvserver", "", "kvserver binary to run (default: build it from this module)")
	fs.IntVar(&o.tasks, "tasks", 10, "kvserver tasks to start")
	fs.IntVar(&o.pythonTasks, "python-tasks", 0, "of the -tasks, how many run as the Python kvserver (examples/kvcache/python) under a slicerd sidecar, reporting load over its local API")
	fs.StringVar(&o.python, "python", "", "the Python interpreter for -python-tasks, with python3-xxhash (default: $SLICERD_PYTHON, else python3)")
	fs.IntVar(&o.load.Keys, "keys", o.load.Keys, "distinct keys")
	fs.Float64Var(&o.load.Exponent, "exponent", o.load.Exponent, "power-law exponent of key popularity")
	fs.Float64Var(&o.load.Rate, "rate", o.load.Rate, "requests per second offered")
	fs.IntVar(&o.load.Workers, "workers", o.load.Workers, "most requests in flight")
	fs.Uint64Var(&o.load.Seed, "seed", o.load.Seed, "random seed of key draws and shifts")
	fs.IntVar(&o.shifts, "shifts", 5, "hot-key shifts to measure")
	fs.DurationVar(&o.measure.Period, "period", o.measure.Period, "time between shifts")
	fs.IntVar(&o.measure.Window, "window", o.measure.Window, "trailing window of the imbalance, in seconds")
	fs.Float64Var(&o.measure.Threshold, "threshold", o.measure.Threshold, "imbalance (max/mean) under which the tasks count as balanced")
	fs.DurationVar(&o.warmup, "warmup", 30*time.Second, "load before the first shift")
	fs.DurationVar(&o.loadWindow, "load-window", slicelet.DefaultLoadWindow, "kvserver -load-window: how often tasks report their load")
	fs.IntVar(&o.maxRedundancy, "max-redundancy", 0, "job's max redundancy (default: -tasks)")
	fs.StringVar(&o.rebalanceInterval, "rebalance-interval", "", "slicerd --rebalance-interval (default: slicerd's own)")
	fs.Var(&o.slicerdFlags, "slicerd-flag", "extra flag for slicerd, e.g. -slicerd-flag=--log-level=debug (repeatable)")
	fs.BoolVar(&o.freeze, "freeze", false, "freeze the job (slicerd job freeze) after the warmup: the shifts should then move nothing")
	fs.BoolVar(&o.kill, "kill", false, "after the shifts, SIGKILL task kv-1 and time until the assignment no longer names it")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of text")
	fs.BoolVar(&o.trace, "trace", false, "print every second's imbalance to stderr")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs in this directory (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; reaction takes flags only", fs.Arg(0))
	}
	if o.maxRedundancy == 0 {
		o.maxRedundancy = o.tasks
	}
	switch {
	case o.tasks < 1 || o.tasks > 200:
		return nil, fmt.Errorf("-tasks %d: use 1 to 200", o.tasks)
	case o.pythonTasks < 0 || o.pythonTasks > o.tasks:
		return nil, fmt.Errorf("-python-tasks %d: use 0 to -tasks (%d)", o.pythonTasks, o.tasks)
	case o.shifts < 1:
		return nil, fmt.Errorf("-shifts %d: measure at least 1", o.shifts)
	case o.measure.Period < time.Duration(o.measure.Window+1)*time.Second:
		return nil, fmt.Errorf("-period %v is not longer than the %d s window; make it longer", o.measure.Period, o.measure.Window)
	case o.measure.Window < 1 || !(o.measure.Threshold >= 1):
		return nil, fmt.Errorf("-window %d, -threshold %g: use a window of at least 1 s and a threshold of at least 1", o.measure.Window, o.measure.Threshold)
	case o.warmup < 0 || o.loadWindow <= 0:
		return nil, fmt.Errorf("-warmup %v, -load-window %v: use a warmup of at least 0 and a positive load window", o.warmup, o.loadWindow)
	case o.maxRedundancy < 1 || o.maxRedundancy > o.tasks:
		return nil, fmt.Errorf("-max-redundancy %d: use 1 to -tasks (%d)", o.maxRedundancy, o.tasks)
	}
	if err := o.load.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	return benchproc.Main("reaction", args, stdout, stderr, parse, experiment,
		func(o *options) bool { return o.jsonOut }, (*report).print)
}

// report is the outcome of one experiment.
type report struct {
	Command  string                  `json:"command"`
	Tasks    int                     `json:"tasks"`
	Python   int                     `json:"python_tasks,omitempty"`
	Keys     int                     `json:"keys"`
	Exponent float64                 `json:"exponent"`
	Rate     float64                 `json:"rate"`
	Period   float64                 `json:"period_s"`
	Window   int                     `json:"window_s"`
	Thresh   float64                 `json:"threshold"`
	Shifts   []loadshift.ShiftResult `json:"shifts"`
	// MedianSeconds counts a shift never balanced within its period as
	// infinitely slow; it is null when that is the median.
	MedianSeconds *float64 `json:"median_s"`
	Balanced      int      `json:"balanced"`
	// Frozen: the job was frozen after the warmup; FrozenGeneration is its
	// generation then, and LastShiftGeneration the generation after the
	// last shift's period.
	Frozen              bool   `json:"frozen,omitempty"`
	FrozenGeneration    uint64 `json:"frozen_generation,omitempty"`
	LastShiftGeneration uint64 `json:"last_shift_generation,omitempty"`
	// KillSeconds is the time from SIGKILL of kv-1 until the Clerk held
	// an assignment without it (-kill); KillGeneration is that assignment's.
	KillSeconds    float64 `json:"kill_s,omitempty"`
	KillGeneration uint64  `json:"kill_generation,omitempty"`
	Answered       uint64  `json:"answered"`
	Failed         uint64  `json:"failed"`
	Dropped        uint64  `json:"dropped"`
}

func (r *report) median() {
	xs := make([]float64, len(r.Shifts))
	r.Balanced = 0
	for i, s := range r.Shifts {
		xs[i] = math.Inf(1)
		if s.Balanced {
			xs[i] = s.ReactionSeconds
			r.Balanced++
		}
	}
	slices.Sort(xs)
	n := len(xs)
	if n == 0 {
		return
	}
	m := xs[n/2]
	if n%2 == 0 {
		m = (xs[n/2-1] + xs[n/2]) / 2
	}
	if !math.IsInf(m, 0) {
		r.MedianSeconds = &m
	}
}

func (r *report) print(w io.Writer) {
	for _, s := range r.Shifts {
		took := fmt.Sprintf("not balanced within %gs", r.Period)
		if s.Balanced {
			took = fmt.Sprintf("balanced after %3.0f s", s.ReactionSeconds)
		}
		fmt.Fprintf(w, "shift %d  hot %s  %s  (imbalance first %.2f, peak %.2f, final %.2f; generation %d -> %d)\n",
			s.Shift, s.HotKey, took, s.FirstImbalance, s.PeakImbalance, s.FinalImbalance, s.GenerationBefore, s.GenerationAfter)
	}
	med := "none (most shifts never balanced)"
	if r.MedianSeconds != nil {
		med = fmt.Sprintf("%.0f s", *r.MedianSeconds)
	}
	if r.Frozen {
		fmt.Fprintf(w, "frozen at generation %d; generation %d after the last shift\n", r.FrozenGeneration, r.LastShiftGeneration)
	}
	if r.KillGeneration != 0 {
		fmt.Fprintf(w, "kv-1 SIGKILLed: an assignment without it (generation %d) reached the clerk %.2f s later\n", r.KillGeneration, r.KillSeconds)
	}
	fmt.Fprintf(w, "median %s over %d shifts, %d balanced within %gs (imbalance < %g over %d s; %d tasks, %d keys, exponent %g, %g req/s; answered %d, failed %d, dropped %d)\n",
		med, len(r.Shifts), r.Balanced, r.Period, r.Thresh, r.Window, r.Tasks, r.Keys, r.Exponent, r.Rate, r.Answered, r.Failed, r.Dropped)
}

// experiment runs the cluster, the load and the shifts, and always stops
// the processes it started.
func experiment(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	logDir, cleanup, err := benchproc.LogDir("reaction", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."},
		benchproc.Binary{Path: &o.kvserver, Name: "kvserver", Pkg: "./examples/kvcache/cmd/kvserver"}); err != nil {
		return nil, err
	}
	var procs []*benchproc.Proc
	defer func() { benchproc.StopAll(procs, 10*time.Second) }()
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "reaction: "+format+"\n", args...) }

	// slicerd: every role, a fresh store, loopback timers.
	sargs := []string{"--node-name", "slicerd-0", "--data-dir", filepath.Join(logDir, "data"),
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--rebalance-delay", "200ms", "--startup-grace", "500ms"}
	if o.rebalanceInterval != "" {
		sargs = append(sargs, "--rebalance-interval", o.rebalanceInterval)
	}
	sargs = append(sargs, o.slicerdFlags...)
	sd, started, err := benchproc.StartSlicerd("slicerd", filepath.Join(logDir, "slicerd.log"), o.slicerd, sargs, 30*time.Second)
	if err != nil {
		return nil, err
	}
	procs = append(procs, sd)
	say("slicerd rpc %s gossip %s; logs in %s", started.RPC, started.Gossip, logDir)

	// The job's redundancy before any task joins, so the first assignment
	// already allows replicas.
	if err := benchproc.Command(ctx, o.slicerd, "job", "set", "--addr", started.RPC,
		"--min-redundancy", "1", "--max-redundancy", strconv.Itoa(o.maxRedundancy), "kv"); err != nil {
		return nil, err
	}

	// The first -python-tasks tasks are Python ones; tasks holds each
	// task's processes.
	tasks := map[string][]*benchproc.Proc{}
	py := benchproc.PyTaskConfig{Python: o.python, Slicerd: o.slicerd, Dir: logDir, Job: "kv", Join: started.Gossip,
		SidecarArgs: []string{"--load-window", o.loadWindow.String()}}
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
			t, err := benchproc.StartPyTask(c)
			if err != nil {
				return nil, err
			}
			procs = append(procs, t.Procs()...)
			tasks[name] = t.Procs()
			continue
		}
		p, err := benchproc.Start(name, filepath.Join(logDir, name+".log"), "kvserver task="+name, nil, o.kvserver,
			"-job", "kv", "-task", name, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0",
			"-gossip-profile", "local", "-join", started.Gossip, "-load-window", o.loadWindow.String(), "-log-level", "warn")
		if err != nil {
			return nil, err
		}
		if _, err := p.WaitReady(30 * time.Second); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, logDir)
		}
		procs = append(procs, p)
		tasks[name] = []*benchproc.Proc{p}
	}

	ck, stopClerk, err := benchproc.RunClerk(ctx, "kv", started.RPC, o.tasks)
	if err != nil {
		return nil, err
	}
	defer stopClerk()
	say("assignment generation %d over %d tasks; offering %g req/s", ck.Generation(), o.tasks, o.load.Rate)

	d, err := loadshift.NewDriver(o.load, ck, nil)
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithCancel(ctx)
	ddone := make(chan error, 1)
	go func() { ddone <- d.Run(dctx) }()
	defer func() { dcancel(); <-ddone }()

	m := o.measure
	if o.trace {
		m.OnSample = func(s loadshift.Sample) {
			fmt.Fprintf(stderr, "  t=%3ds imbalance %5.2f (assignment gives %5.2f) generation %d tasks %d hot keys on %v tasks\n", s.Seconds, s.Imbalance, s.Expected, s.Generation, s.Tasks, s.HotReplicas)
		}
	}
	if err := benchproc.Sleep(ctx, o.warmup); err != nil {
		return nil, err
	}
	rep := &report{Command: "go run ./bench/reaction " + strings.Join(os.Args[1:], " "),
		Tasks: o.tasks, Python: o.pythonTasks, Keys: o.load.Keys, Exponent: o.load.Exponent, Rate: o.load.Rate,
		Period: o.measure.Period.Seconds(), Window: o.measure.Window, Thresh: o.measure.Threshold}
	if o.freeze {
		if err := benchproc.Command(ctx, o.slicerd, "job", "freeze", "--addr", started.RPC, "kv"); err != nil {
			return nil, err
		}
		rep.Frozen, rep.FrozenGeneration = true, ck.Generation()
		say("job frozen at generation %d", rep.FrozenGeneration)
	}
	for range o.shifts {
		r, err := d.MeasureShift(ctx, m)
		if err != nil {
			return nil, err
		}
		rep.Shifts = append(rep.Shifts, r)
		if r.Balanced {
			say("shift %d (hot %s): balanced after %.0f s, peak imbalance %.2f", r.Shift, r.HotKey, r.ReactionSeconds, r.PeakImbalance)
		} else {
			say("shift %d (hot %s): not balanced within %v, final imbalance %.2f", r.Shift, r.HotKey, o.measure.Period, r.FinalImbalance)
		}
	}
	rep.LastShiftGeneration = ck.Generation()
	if o.kill && o.tasks > 1 {
		killed := time.Now()
		for _, p := range tasks["kv-1"] { // a Python task's sidecar and application both
			if err := p.Cmd.Process.Kill(); err != nil {
				return nil, fmt.Errorf("kill kv-1: %w", err)
			}
		}
		deadline := time.NewTimer(60 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			a := ck.Assignment()
			if _, named := a.TaskIndex("kv-1"); !named {
				rep.KillSeconds, rep.KillGeneration = time.Since(killed).Seconds(), a.Generation
				say("kv-1 killed; generation %d without it after %.2f s", a.Generation, rep.KillSeconds)
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-deadline.C:
				return nil, fmt.Errorf("kv-1 killed 60 s ago and the assignment still names it (generation %d)", a.Generation)
			case <-tick.C:
			}
		}
	}
	rep.Answered, rep.Failed, rep.Dropped = d.Stats()
	rep.median()
	return rep, nil
}
