// Command partition runs slicerd through real network partitions and
// process faults on a test bed of Linux network namespaces
// (internal/netbed), and checks what must hold across them.
//
// The bed has five hosts on one switch: h1–h3 each run a member of a
// three-member etcd cluster (internal/netbed/etcdmember, built from the
// etcd server library) and a slicerd node on that etcd; h1–h4 each run a
// kvserver task of a strong job (kv) and one of an affinity job (cache);
// h5 is the clients' host. The harness's own clients — Clerks and kvcache
// clients in this process — open their sockets on h5, as do the strong
// job's backing store, so they see the network h5 sees.
//
// A nemesis runs the faults of faults.go one after the other, each held
// for -hold, then healed: a symmetric partition, two one-way partitions,
// the strong job's lease holder cut off with a minority, an etcd follower
// and the etcd leader isolated, a host's switch port down, kill -9 of the
// lease holder and of tasks, and SIGSTOP of the lease holder and of the
// etcd leader. Rounds repeat until -duration has passed (one round at
// least). After each heal the harness measures the time to convergence:
// every slicerd node's Distributor and the clients' Clerk serve the
// generation the store holds, the stored assignment names exactly the
// running tasks, and a probe request on every probe key succeeds.
//
// Meanwhile open-loop clients (benchproc.Timetable) send requests to both
// jobs. Each fault has a window from its injection to the convergence
// after its heal. At the end it checks:
//
//   - the strong job's tasks' recorded histories (lease/leasecheck): no
//     double owner, no fencing-token regression;
//   - the affinity job: at least -min-routed (99.9%) of the requests
//     scheduled outside every fault window were answered by an owner;
//   - the store's history, read back from etcd's revisions: generations
//     only go up, each commit was made under the job lease by its holder,
//     epochs never go back, one holder per epoch;
//   - every fault converged within -converge-within (10 s) of its heal.
//
// It exits 1 when a check fails. It needs root and the ip command.
//
//	go run ./bench/partition -duration 10m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/netbed"
	"github.com/slicerd/slicerd/lease/leasecheck"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	slicerd, kvserver, etcdmember  string
	duration, hold, quiet          time.Duration
	only                           string
	affinityClients, strongClients int
	rate                           float64
	keys                           int
	deadline                       time.Duration
	inflight                       int
	leaseTTL                       time.Duration
	convergeWithin                 time.Duration
	convergeTimeout                time.Duration
	minRouted                      float64
	taskLogLevel                   string
	logDir                         string
	jsonOut                        bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("partition", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary (default: build it)")
	fs.StringVar(&o.kvserver, "kvserver", "", "kvserver binary (default: build it)")
	fs.StringVar(&o.etcdmember, "etcdmember", "", "etcdmember binary (default: build it)")
	fs.DurationVar(&o.duration, "duration", 0, "repeat rounds of faults until this much time has passed (0: one round)")
	fs.DurationVar(&o.hold, "hold", 6*time.Second, "how long each fault lasts before it is healed")
	fs.DurationVar(&o.quiet, "quiet", 8*time.Second, "quiet time after each convergence, before the next fault; the requests whose life falls in it, past -deadline, are the ones outside every fault window")
	fs.StringVar(&o.only, "faults", "", "run only the faults whose names contain one of these comma-separated words (default: all)")
	fs.IntVar(&o.affinityClients, "affinity-clients", 4, "clients of the affinity job")
	fs.IntVar(&o.strongClients, "strong-clients", 2, "clients of the strong job")
	fs.Float64Var(&o.rate, "rate", 20, "requests per second per client")
	fs.IntVar(&o.keys, "keys", 200, "keys each job's clients use")
	fs.DurationVar(&o.deadline, "deadline", 2*time.Second, "a request not answered this long after its scheduled time has failed")
	fs.IntVar(&o.inflight, "inflight", 2000, "requests in flight at most per job; one scheduled beyond it has failed")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "the strong tasks' guard and bridge read TTL")
	fs.DurationVar(&o.convergeWithin, "converge-within", 10*time.Second, "a fault must converge this soon after its heal")
	fs.DurationVar(&o.convergeTimeout, "converge-timeout", 60*time.Second, "give up waiting for convergence after this long")
	fs.Float64Var(&o.minRouted, "min-routed", 99.9, "percent of the affinity job's requests outside fault windows that must succeed")
	fs.StringVar(&o.taskLogLevel, "task-log-level", "warn", "the tasks' log level")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs and records here (default: a temporary directory, removed)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected argument %q; the harness takes flags only", fs.Arg(0))
	case o.duration < 0 || o.hold <= 0 || o.deadline <= 0 || o.leaseTTL <= 0 || o.convergeWithin <= 0 || o.convergeTimeout < o.convergeWithin:
		return o, errors.New("-hold, -deadline, -lease-ttl and -converge-within must be positive, -duration not negative, -converge-timeout at least -converge-within")
	case o.quiet <= o.deadline:
		return o, fmt.Errorf("-quiet %v must exceed -deadline %v, or no request falls outside the fault windows", o.quiet, o.deadline)
	case o.affinityClients < 1 || o.strongClients < 1 || !(o.rate > 0) || o.keys < 1 || o.inflight < 1 || !(o.minRouted >= 0 && o.minRouted <= 100):
		return o, errors.New("need at least one client of each job, -rate, -keys and -inflight positive, -min-routed in [0, 100]")
	}
	if len(selectFaults(o.only)) == 0 {
		return o, fmt.Errorf("-faults %q matches none of: %s", o.only, faultNames())
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "partition: %v\n", err)
		return 2
	}
	if err := netbed.Available(); err != nil {
		fmt.Fprintf(stderr, "partition: %v\n", err)
		return 2
	}
	rep, err := measure(ctx, o, func(format string, a ...any) { fmt.Fprintf(stderr, "partition: "+format+"\n", a...) })
	if err != nil {
		fmt.Fprintf(stderr, "partition: %v\n", err)
		return 1
	}
	rep.Command = "go run ./bench/partition " + strings.Join(args, " ")
	if o.jsonOut {
		rep.printJSON(stdout)
	} else {
		rep.print(stdout)
	}
	if len(rep.Failures) > 0 {
		return 1
	}
	return 0
}

func faultNames() string {
	var names []string
	for _, f := range faults {
		names = append(names, strconv.Quote(f.name))
	}
	return strings.Join(names, ", ")
}

func selectFaults(only string) []fault {
	if only == "" {
		return faults
	}
	var out []fault
	for _, f := range faults {
		for _, w := range strings.Split(only, ",") {
			if w = strings.TrimSpace(w); w != "" && strings.Contains(f.name, w) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

// window is one fault: its span since the load started, from the
// injection to the heal and to the convergence after it, and the
// CLOCK_MONOTONIC instant of its injection, the clock the strong tasks'
// records use.
type window struct {
	Name      string        `json:"name"`
	What      string        `json:"what"`
	Start     time.Duration `json:"start_ns"`
	Heal      time.Duration `json:"heal_ns"`
	End       time.Duration `json:"end_ns"`
	Converge  time.Duration `json:"converge_ns"`
	Converged bool          `json:"converged"`
	Error     string        `json:"error,omitempty"`
	// Waited lists what convergence waited for after the heal, each
	// condition with when it was first seen unmet.
	Waited []string `json:"waited,omitempty"`
	mono   time.Duration
}

func monotonic() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

func measure(ctx context.Context, o options, say func(string, ...any)) (rep *report, err error) {
	logDir, cleanup, err := benchproc.LogDir("partition", o.logDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && o.logDir == "" {
			say("logs kept in %s", logDir)
			return
		}
		cleanup()
	}()
	say("building slicerd, kvserver and etcdmember")
	if err := benchproc.Build(ctx, logDir,
		benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."},
		benchproc.Binary{Path: &o.kvserver, Name: "kvserver", Pkg: "./examples/kvcache/cmd/kvserver"},
		benchproc.Binary{Path: &o.etcdmember, Name: "etcdmember", Pkg: "./internal/netbed/etcdmember"}); err != nil {
		return nil, err
	}
	// An earlier run's data and records in the same directory would
	// confuse this one.
	if err := os.RemoveAll(filepath.Join(logDir, "data")); err != nil {
		return nil, err
	}
	if old, _ := filepath.Glob(filepath.Join(logDir, "*.rec")); len(old) > 0 {
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				return nil, err
			}
		}
	}
	c, err := startCluster(ctx, o, logDir, say)
	defer func() {
		if cerr := c.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err != nil {
		return nil, err
	}
	up := time.Now()
	if d, _, err := c.awaitConvergence(ctx, up, o.convergeTimeout); err != nil {
		return nil, fmt.Errorf("the cluster did not converge after it started: %w (logs: %s)", err, logDir)
	} else {
		say("converged %.1f s after the tasks started: job %s generation %d, job %s generation %d",
			d.Seconds(), strongJob, c.clerks[strongJob].Generation(), affinityJob, c.clerks[affinityJob].Generation())
	}

	// The load: open-loop, from h5, on both jobs, until the nemesis ends.
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	start := time.Now()
	var wg sync.WaitGroup
	var strongLoad, affinityLoad *benchproc.LoadResult
	for _, job := range []string{strongJob, affinityJob} {
		clients := o.affinityClients
		if job == strongJob {
			clients = o.strongClients
		}
		client := kvcache.NewClient(c.clerks[job], c.hc)
		rngs := make([]*rand.Rand, clients)
		for i := range rngs {
			rngs[i] = rand.New(rand.NewPCG(uint64(i), uint64(len(job))))
		}
		next := func(i int) benchproc.Request {
			rng := rngs[i]
			key := "key-" + strconv.Itoa(rng.IntN(o.keys))
			if rng.IntN(2) == 0 {
				val := []byte(strconv.Itoa(i))
				return func(ctx context.Context) error { return client.Put(ctx, key, val) }
			}
			return func(ctx context.Context) error { _, _, err := client.Get(ctx, key); return err }
		}
		tt := benchproc.Timetable{Clients: clients, Rate: o.rate, Duration: 24 * time.Hour, Deadline: o.deadline, Inflight: o.inflight}
		res := &affinityLoad
		if job == strongJob {
			res = &strongLoad
		}
		wg.Go(func() { *res = tt.Run(lctx, start, next) })
	}

	// The nemesis.
	var windows []window
	var skipped []string
	nemesisErr := func() error {
		for round := 0; ; round++ {
			for _, f := range selectFaults(o.only) {
				if err := benchproc.Sleep(ctx, o.quiet); err != nil {
					return err
				}
				w := window{Name: f.name, Start: time.Since(start), mono: monotonic()}
				what, heal, err := f.inject(ctx, c)
				w.What = what
				if errors.Is(err, errSkip) {
					say("%6.1f s  %s: %v", w.Start.Seconds(), f.name, err)
					skipped = append(skipped, fmt.Sprintf("%s: %v", f.name, err))
					continue
				}
				if err != nil {
					if heal != nil {
						heal(context.WithoutCancel(ctx))
					}
					return fmt.Errorf("fault %q: %w", f.name, err)
				}
				say("%6.1f s  %s: %s", w.Start.Seconds(), f.name, what)
				if err := benchproc.Sleep(ctx, o.hold); err != nil {
					heal(context.WithoutCancel(ctx))
					return err
				}
				healed := time.Now()
				w.Heal = healed.Sub(start)
				if err := heal(ctx); err != nil {
					return fmt.Errorf("heal %q: %w", f.name, err)
				}
				d, waited, err := c.awaitConvergence(ctx, healed, o.convergeTimeout)
				w.Converge, w.End, w.Converged, w.Waited = d, time.Since(start), err == nil, waited
				if err != nil {
					w.Error = err.Error()
					say("%6.1f s  healed; %v", w.Heal.Seconds(), err)
				} else {
					say("%6.1f s  healed; converged in %.2f s", w.Heal.Seconds(), d.Seconds())
				}
				windows = append(windows, w)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			if time.Since(start) >= o.duration {
				return nil
			}
		}
	}()
	lcancel()
	wg.Wait()
	if nemesisErr != nil {
		return nil, fmt.Errorf("%w (logs: %s)", nemesisErr, logDir)
	}
	rep = &report{Seconds: time.Since(start).Seconds(), DeadlineS: o.deadline.Seconds(), ConvergeWithinS: o.convergeWithin.Seconds(), Skipped: skipped}

	// The store's history, read back while etcd still runs.
	for _, job := range []string{strongJob, affinityJob} {
		hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		cs, err := readCommits(hctx, c.etcdc, job)
		cancel()
		if err != nil {
			return nil, err
		}
		rep.Store = append(rep.Store, checkCommits(job, cs))
	}
	rep.StaleWrites = c.backing.Refused()
	c.stopProcs() // the records are complete once the tasks have exited
	ops, err := leasecheck.ReadRecords(filepath.Join(logDir, "*.rec"))
	if err != nil {
		return nil, err
	}
	rep.judge(o, windows, ops, strongLoad, affinityLoad)
	if len(rep.Failures) > 0 && o.logDir == "" {
		// Keep the logs of a failed run.
		cleanup = func() {}
		say("logs kept in %s", logDir)
	}
	return rep, nil
}

// outside reports whether a request scheduled at at, given up at
// at+deadline, overlaps no fault window.
func outside(ws []window, at, deadline time.Duration) bool {
	return !slices.ContainsFunc(ws, func(w window) bool { return at <= w.End && at+deadline >= w.Start })
}
