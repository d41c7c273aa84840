// Command rolling measures a rolling restart of the kvcache example under
// traffic: the planned change issue of the Slicer descendants' users. It
// starts real processes on loopback (one slicerd with every role and
// -tasks kvserver tasks), warms the cache with Zipf-distributed reads
// that refill every miss (package cachetraffic), then restarts the tasks
// one at a time: SIGTERM (the task drains: slicerd moves its keys while it
// serves, and with -handoff their entries go with them), wait for it to
// exit, start it again under the same name, wait until the assignment
// gives it keys again, pause. It reports the requests that failed and the
// hit rate of every one-second window of the restarts.
//
//	go run ./bench/rolling                  # entries move with their keys
//	go run ./bench/rolling -handoff=false   # the same run, keys move cold
//	go run ./bench/rolling -python-tasks 5  # half the tasks in Python, under sidecars
//
// The children are stopped (SIGTERM, then SIGKILL) on exit and on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/slicerd/slicerd/bench/cachetraffic"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/examples/kvcache"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	slicerd, kvserver string
	tasks             int
	pythonTasks       int
	python            string
	traffic           cachetraffic.Config
	handoff           bool
	handoffDeadline   time.Duration
	warmup, pause     time.Duration
	jsonOut, trace    bool
	logDir            string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{traffic: cachetraffic.DefaultConfig()}
	fs := flag.NewFlagSet("rolling", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./bench/rolling [flags]\n\n"+
			"Starts slicerd and kvserver processes on loopback, offers Zipf reads that refill their misses,\n"+
			"restarts the tasks one at a time (SIGTERM, then start again) and prints the failed requests\n"+
			"and the hit rate of every second.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary to run (default: build it from this module)")
	fs.StringVar(&o.kvserver, "kvserver", "", "kvserver binary to run (default: build it from this module)")
	fs.IntVar(&o.tasks, "tasks", 10, "kvserver tasks")
	fs.IntVar(&o.pythonTasks, "python-tasks", 0, "of the -tasks, how many run as the Python kvserver (examples/kvcache/python) under a slicerd sidecar")
	fs.StringVar(&o.python, "python", "", "the Python interpreter for -python-tasks, with python3-xxhash (default: $SLICERD_PYTHON, else python3)")
	fs.IntVar(&o.traffic.Keys, "keys", o.traffic.Keys, "distinct keys")
	fs.Float64Var(&o.traffic.Exponent, "exponent", o.traffic.Exponent, "Zipf exponent of key popularity (above 1)")
	fs.Float64Var(&o.traffic.Rate, "rate", o.traffic.Rate, "reads per second offered")
	fs.IntVar(&o.traffic.Workers, "workers", o.traffic.Workers, "most reads in flight")
	fs.Uint64Var(&o.traffic.Seed, "seed", o.traffic.Seed, "random seed of the key draws")
	fs.BoolVar(&o.handoff, "handoff", true, "kvserver -handoff: entries move with their keys")
	fs.DurationVar(&o.handoffDeadline, "handoff-deadline", 0, "slicerd job set --handoff-deadline: make-before-break moves (0: off)")
	fs.DurationVar(&o.warmup, "warmup", 20*time.Second, "traffic before the first restart")
	fs.DurationVar(&o.pause, "pause", 3*time.Second, "wait after a restarted task has keys again, before the next")
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of text")
	fs.BoolVar(&o.trace, "trace", false, "print every second to stderr")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs in this directory (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; rolling takes flags only", fs.Arg(0))
	}
	switch {
	case o.tasks < 2 || o.tasks > 100:
		return nil, fmt.Errorf("-tasks %d: use 2 to 100", o.tasks)
	case o.pythonTasks < 0 || o.pythonTasks > o.tasks:
		return nil, fmt.Errorf("-python-tasks %d: use 0 to -tasks (%d)", o.pythonTasks, o.tasks)
	case o.warmup < 0 || o.pause < 0 || o.handoffDeadline < 0:
		return nil, fmt.Errorf("-warmup %v, -pause %v, -handoff-deadline %v: use durations of at least 0", o.warmup, o.pause, o.handoffDeadline)
	}
	if err := o.traffic.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	return benchproc.Main("rolling", args, stdout, stderr, parse, experiment,
		func(o *options) bool { return o.jsonOut }, (*report).print)
}

// restart is one task's turn.
type restart struct {
	Task string `json:"task"`
	// ExitSeconds: SIGTERM to exit (the drain, then the leave);
	// BackSeconds: start to the assignment giving the task keys again.
	ExitSeconds float64 `json:"exit_s"`
	ExitCode    int     `json:"exit_code"`
	BackSeconds float64 `json:"back_s"`
}

type report struct {
	Command  string                `json:"command"`
	Tasks    int                   `json:"tasks"`
	Python   int                   `json:"python_tasks,omitempty"`
	Handoff  bool                  `json:"handoff"`
	Deadline float64               `json:"handoff_deadline_s,omitempty"`
	Traffic  cachetraffic.Config   `json:"traffic"`
	Warm     cachetraffic.Summary  `json:"warm"`
	Restarts []restart             `json:"restarts"`
	During   cachetraffic.Summary  `json:"during"`
	Seconds  []cachetraffic.Second `json:"seconds"`
	Errors   string                `json:"errors,omitempty"`
}

func (r *report) print(w io.Writer) {
	for _, x := range r.Restarts {
		fmt.Fprintf(w, "%-6s exited %d %5.2f s after SIGTERM; had keys again %5.2f s after its start\n", x.Task, x.ExitCode, x.ExitSeconds, x.BackSeconds)
	}
	fmt.Fprintf(w, "warm-up: hit rate %.4f over the last %d s\n", r.Warm.HitRate, r.Warm.Seconds)
	fmt.Fprintf(w, "rolling restart of %d tasks, %d in Python (handoff %v), over %d s: %d reads, %d failed, %d dropped; hit rate %.4f, lowest one-second window %.4f (second %d)\n",
		r.Tasks, r.Python, r.Handoff, r.During.Seconds, r.During.Reads, r.During.Failed, r.During.Dropped, r.During.HitRate, r.During.MinHitRate, r.During.MinHitAtSec)
	if r.Errors != "" {
		fmt.Fprintf(w, "first failures: %s\n", r.Errors)
	}
}

func experiment(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	logDir, cleanup, err := benchproc.LogDir("rolling", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."},
		benchproc.Binary{Path: &o.kvserver, Name: "kvserver", Pkg: "./examples/kvcache/cmd/kvserver"}); err != nil {
		return nil, err
	}
	// Each task's processes; the first drains on SIGTERM (a kvserver, or
	// a Python task's sidecar), the others stop after it.
	procs := map[string][]*benchproc.Proc{}
	defer func() {
		var all []*benchproc.Proc
		for _, ps := range procs {
			all = append(all, ps...)
		}
		benchproc.StopAll(all, 40*time.Second)
	}()
	py := benchproc.PyTaskConfig{Python: o.python, Slicerd: o.slicerd, Dir: logDir, Job: "kv", Handoff: o.handoff}
	if o.pythonTasks > 0 {
		if err := py.Prepare(ctx); err != nil {
			return nil, err
		}
	}
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "rolling: "+format+"\n", args...) }

	sd, started, err := benchproc.StartSlicerd("slicerd", filepath.Join(logDir, "slicerd.log"), o.slicerd,
		[]string{"--node-name", "slicerd-0", "--data-dir", filepath.Join(logDir, "data"),
			"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
			"--rebalance-delay", "100ms", "--startup-grace", "500ms"}, 30*time.Second)
	if err != nil {
		return nil, err
	}
	procs["slicerd"] = []*benchproc.Proc{sd}
	py.Join = started.Gossip
	say("slicerd rpc %s; logs in %s", started.RPC, logDir)
	if o.handoffDeadline > 0 {
		if err := benchproc.Command(ctx, o.slicerd, "job", "set", "--addr", started.RPC, "--handoff-deadline", o.handoffDeadline.String(), "kv"); err != nil {
			return nil, err
		}
	}
	// The first -python-tasks tasks are Python ones.
	startTask := func(i, n int) ([]*benchproc.Proc, error) {
		name := fmt.Sprintf("kv-%d", i)
		if i < o.pythonTasks {
			c := py
			c.Task, c.Run = name, n
			t, err := benchproc.StartPyTask(c)
			if err != nil {
				return nil, err
			}
			return t.Procs(), nil
		}
		p, err := benchproc.Start(name, filepath.Join(logDir, fmt.Sprintf("%s.%d.log", name, n)), "kvserver task="+name, nil, o.kvserver,
			"-job", "kv", "-task", name, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0",
			"-gossip-profile", "local", "-join", started.Gossip, "-log-level", "warn", fmt.Sprintf("-handoff=%v", o.handoff))
		if err != nil {
			return nil, err
		}
		if _, err := p.WaitReady(30 * time.Second); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, logDir)
		}
		return []*benchproc.Proc{p}, nil
	}
	for i := range o.tasks {
		ps, err := startTask(i, 0)
		if err != nil {
			return nil, err
		}
		procs[fmt.Sprintf("kv-%d", i)] = ps
	}

	ck, stopClerk, err := benchproc.RunClerk(ctx, "kv", started.RPC, o.tasks)
	if err != nil {
		return nil, err
	}
	defer stopClerk()
	d, err := cachetraffic.New(o.traffic, kvcache.NewClient(ck, nil))
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithCancel(ctx)
	ddone := make(chan struct{})
	go func() { defer close(ddone); d.Run(dctx) }()
	defer func() { dcancel(); <-ddone }()
	say("assignment generation %d over %d tasks; offering %g reads/s for %v", ck.Generation(), o.tasks, o.traffic.Rate, o.warmup)
	if err := benchproc.Sleep(ctx, o.warmup); err != nil {
		return nil, err
	}
	rep := &report{Command: "go run ./bench/rolling " + strings.Join(os.Args[1:], " "), Tasks: o.tasks, Python: o.pythonTasks, Handoff: o.handoff,
		Deadline: o.handoffDeadline.Seconds(), Traffic: o.traffic}
	warm := d.Seconds(time.Now().Add(-5 * time.Second))
	rep.Warm = cachetraffic.Summarize(warm)

	from := time.Now()
	for i := range o.tasks {
		name := fmt.Sprintf("kv-%d", i)
		ps := procs[name]
		sent := time.Now()
		_ = ps[0].Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-ps[0].Exited():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		code := ps[0].ExitCode()
		r := restart{Task: name, ExitSeconds: time.Since(sent).Seconds(), ExitCode: code}
		benchproc.StopAll(ps[1:], 10*time.Second) // a Python task's application, once its sidecar has drained
		back := time.Now()
		nps, err := startTask(i, 1)
		if err != nil {
			return nil, err
		}
		procs[name] = nps
		for {
			if a := ck.Assignment(); a != nil {
				if _, ok := a.TaskIndex(name); ok && len(a.Tasks) == o.tasks {
					break
				}
			}
			if time.Since(back) > 60*time.Second {
				return nil, fmt.Errorf("%s had no keys 60 s after its restart (%s)", name, logDir)
			}
			if err := benchproc.Sleep(ctx, 20*time.Millisecond); err != nil {
				return nil, err
			}
		}
		r.BackSeconds = time.Since(back).Seconds()
		rep.Restarts = append(rep.Restarts, r)
		say("%s: exited %d %.2f s after SIGTERM, had keys %.2f s after its start", name, code, r.ExitSeconds, r.BackSeconds)
		if err := benchproc.Sleep(ctx, o.pause); err != nil {
			return nil, err
		}
	}
	dcancel()
	<-ddone
	rep.Seconds = d.Seconds(from)
	rep.During = cachetraffic.Summarize(rep.Seconds)
	if err := d.Errors(); err != nil {
		rep.Errors = err.Error()
	}
	if o.trace {
		for i, s := range rep.Seconds {
			fmt.Fprintf(stderr, "  t=%3ds reads %5d hits %.4f failed %d dropped %d\n", i, s.Reads, s.HitRate(), s.Failed, s.Dropped)
		}
	}
	return rep, nil
}
