// Command bigjob measures a job of a million slices on an etcd store: how
// long a commit of it takes and what it writes, how long a Backup
// Distributor (the real slicerd binary, --role backup) takes to load each
// generation from etcd and send it to a subscriber, and what the Backup
// holds in memory; and the work an Assigner taking the job over does.
//
// It starts an etcd server inside its own process and plays the Assigners
// itself, with slicerd's own store, lease manager and weighted-move, each
// with its own etcd client:
//
//  1. create: Assigner A takes the job lease and commits generation 1,
//     -tasks tasks holding -slices-per-task slices each, dealt at random
//     (the shape many load decisions leave);
//  2. rebalance: A decides on a power-law load over the slices
//     (weighted-move, the job's default configuration) and commits,
//     -rebalances times;
//  3. fail over: A stops renewing without releasing (its etcd client
//     closes, as if its process died); Assigner B waits for the job lease,
//     loads the job, decides without one task (assign.Membership, as the
//     Assigner does for a task that died) and commits.
//
// A subscriber follows the job through the Backup's WatchAssignment from
// before the first commit; for each generation the report gives the time
// from the commit's return to the subscriber's receipt.
//
//	go run ./bench/bigjob
//	go run ./bench/bigjob -tasks 10000 -slices-per-task 100 -json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	return benchproc.Main("bigjob", args, stdout, stderr, parse, measure,
		func(o *options) bool { return o.json }, (*report).print)
}

type options struct {
	tasks, perTask  int
	rebalances      int
	ttl             time.Duration
	slicerd, logDir string
	timeout         time.Duration
	json            bool
	args            []string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("bigjob", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.tasks, "tasks", 10000, "tasks of the job")
	fs.IntVar(&o.perTask, "slices-per-task", 100, "slices per task (the job has tasks × this many)")
	fs.IntVar(&o.rebalances, "rebalances", 1, "load decisions committed before the failover, each on a new power-law load")
	fs.DurationVar(&o.ttl, "ttl", 5*time.Second, "the job lease's TTL, which A's death costs before B may take over")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long each step may take")
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary (default: build it from this module)")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the Backup's log and etcd's data here (default: a temporary directory, removed)")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q; the harness takes flags only", fs.Arg(0))
	case o.tasks < 2 || o.tasks > 100000:
		return nil, fmt.Errorf("invalid -tasks %d: use 2 to 100000", o.tasks)
	case o.perTask < 1 || o.perTask > assign.MaxSlicesPerTaskLimit:
		return nil, fmt.Errorf("invalid -slices-per-task %d: use 1 to %d", o.perTask, assign.MaxSlicesPerTaskLimit)
	case o.rebalances < 1 || o.rebalances > 100:
		return nil, fmt.Errorf("invalid -rebalances %d: use 1 to 100", o.rebalances)
	case o.ttl < time.Second || o.timeout <= 0:
		return nil, errors.New("-ttl must be at least 1s and -timeout positive")
	}
	return o, nil
}

// step is one commit of the job.
type step struct {
	Name       string  `json:"name"`
	Generation uint64  `json:"generation"`
	Slices     int     `json:"slices"`
	Bytes      int     `json:"bytes"`      // the encoded assignment the commit wrote
	LoadMS     float64 `json:"load_ms"`    // the taking-over Assigner's Load
	DecideMS   float64 `json:"decide_ms"`  // the decision
	CommitMS   float64 `json:"commit_ms"`  // CommitFenced
	Churn      float64 `json:"churn"`      // key space whose tasks changed
	WaitMS     float64 `json:"wait_ms"`    // from A's death to B's lease
	BackupMS   float64 `json:"backup_ms"`  // commit → subscriber's receipt through the Backup
	BackupRSS  int64   `json:"backup_rss"` // MiB, after the receipt
	Subscriber string  `json:"subscriber"` // full or delta
}

type report struct {
	Command string `json:"command"`
	Tasks   int    `json:"tasks"`
	Steps   []step `json:"steps"`
	// FirstLoadMS is the Backup's first WatchAssignment of the job
	// after a restart: store Load, conversion and send of generation 1.
	FirstLoadMS float64 `json:"first_load_ms"`
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n%d tasks\n", r.Command, r.Tasks)
	fmt.Fprintf(w, "%-10s %4s %9s %10s %8s %9s %9s %7s %8s %10s %10s %5s\n",
		"step", "gen", "slices", "bytes", "load_ms", "decide_ms", "commit_ms", "churn", "wait_ms", "backup_ms", "backup_mib", "sub")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%-10s %4d %9d %10d %8.0f %9.0f %9.0f %6.2f%% %8.0f %10.0f %10d %5s\n",
			s.Name, s.Generation, s.Slices, s.Bytes, s.LoadMS, s.DecideMS, s.CommitMS, 100*s.Churn, s.WaitMS, s.BackupMS, s.BackupRSS, s.Subscriber)
	}
	fmt.Fprintf(w, "a restarted Backup's first load of the job, to the subscriber: %.0f ms\n", r.FirstLoadMS)
}

const (
	job    = "big"
	prefix = "/bigjob/"
)

func measure(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	say := func(format string, a ...any) { fmt.Fprintf(stderr, "bigjob: "+format+"\n", a...) }
	logDir, cleanup, err := benchproc.LogDir("bigjob", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."}); err != nil {
		return nil, err
	}
	etcd, err := benchproc.StartEtcd(filepath.Join(logDir, "etcd"))
	if err != nil {
		return nil, err
	}
	defer etcd.Stop()
	rep := &report{Command: strings.TrimSpace("go run ./bench/bigjob " + strings.Join(o.args, " ")), Tasks: o.tasks}

	a, err := openAssigner(ctx, etcd.Addr, "assigner-a")
	if err != nil {
		return nil, err
	}
	defer a.close()
	// The job's configuration first, so that the Backup has a job to
	// watch before its first commit.
	cfg := assign.DefaultConfig()
	if err := a.store.SetConfig(ctx, job, cfg); err != nil {
		return nil, err
	}

	storeURL := "etcd://" + etcd.Addr + prefix
	startBackup := func(name string) (*benchproc.Proc, *subscriber, error) {
		p, addrs, err := benchproc.StartSlicerd(name, filepath.Join(logDir, name+".log"), o.slicerd,
			[]string{"--node-name", name, "--role", "backup", "--store", storeURL, "--data-dir", filepath.Join(logDir, name),
				"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local"}, 60*time.Second)
		if err != nil {
			return nil, nil, err
		}
		return p, subscribe(ctx, addrs.RPC), nil
	}
	backup, sub, err := startBackup("backup-1")
	if err != nil {
		return nil, err
	}
	procs := []*benchproc.Proc{backup}
	defer func() { benchproc.StopAll(procs, 10*time.Second) }()
	defer func() { sub.stop() }()

	l, err := a.leases.Acquire(ctx, job, a.name, o.ttl)
	if err != nil {
		return nil, err
	}
	a.renew(l)
	rng := rand.New(rand.NewPCG(1, uint64(o.tasks)))
	tasks := makeTasks(o.tasks)

	// measureStep commits next under l, and waits for the subscriber.
	measureStep := func(s step, st *assigner, l lease.Job, next *assign.Assignment, prev *assign.Assignment) (step, error) {
		enc, err := storage.EncodeAssignment(next)
		if err != nil {
			return s, err
		}
		s.Bytes, s.Slices = len(enc), len(next.Slices)
		if prev != nil {
			s.Churn = assign.Churn(prev, next)
		}
		start := time.Now()
		if err := st.store.(storage.Fencer).CommitFenced(ctx, job, l.Epoch, next.Generation-1, next); err != nil {
			return s, fmt.Errorf("%s: commit: %w", s.Name, err)
		}
		committed := time.Now()
		s.CommitMS = ms(committed.Sub(start))
		s.Generation = next.Generation
		got, kind, err := sub.await(next.Generation, o.timeout)
		if err != nil {
			return s, fmt.Errorf("%s: %w (Backup log: %s)", s.Name, err, filepath.Join(logDir, "backup-1.log"))
		}
		s.BackupMS, s.Subscriber = ms(got.Sub(committed)), kind
		rss, _ := benchproc.Memory(backup.Cmd.Process.Pid)
		s.BackupRSS = rss >> 10
		say("%s: generation %d, %d slices, %d bytes, commit %.0f ms, at the subscriber %.0f ms later",
			s.Name, s.Generation, s.Slices, s.Bytes, s.CommitMS, s.BackupMS)
		return s, nil
	}

	// 1. Create.
	gen1 := dealt(rng, tasks, o.tasks*o.perTask)
	s, err := measureStep(step{Name: "create"}, a, l, gen1, nil)
	if err != nil {
		return nil, err
	}
	rep.Steps = append(rep.Steps, s)

	// 2. Rebalance on power-law loads.
	cur := gen1
	for range o.rebalances {
		load := powerLoad(rng, cur, 1.5)
		start := time.Now()
		next, _, err := assign.NewWeightedMove().Decide(job, cur, tasks, load, cfg)
		if err != nil {
			return nil, err
		}
		s, err = measureStep(step{Name: "rebalance", DecideMS: ms(time.Since(start))}, a, l, next, cur)
		if err != nil {
			return nil, err
		}
		rep.Steps = append(rep.Steps, s)
		cur = next
	}

	// 3. A dies; B takes the job over without the last task.
	b, err := openAssigner(ctx, etcd.Addr, "assigner-b")
	if err != nil {
		return nil, err
	}
	defer b.close()
	a.close()
	died := time.Now()
	var lb lease.Job
	for {
		if lb, err = b.leases.Acquire(ctx, job, b.name, o.ttl); err == nil {
			break
		}
		// Held until A's lease lapses; unavailable once, if B's own
		// idle etcd lease lapsed meanwhile (the Leader retries as well).
		if !errors.Is(err, lease.ErrHeld) && !errors.Is(err, lease.ErrUnavailable) || time.Since(died) > o.timeout {
			return nil, fmt.Errorf("fail over: acquire: %w", err)
		}
		if err := benchproc.Sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	b.renew(lb)
	fo := step{Name: "failover", WaitMS: ms(time.Since(died))}
	start := time.Now()
	rec, err := b.store.Load(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("fail over: load: %w", err)
	}
	fo.LoadMS = ms(time.Since(start))
	start = time.Now()
	live := tasks[:len(tasks)-1]
	gen3, _, err := assign.Membership(job, rec.Current, live, nil, rec.Config)
	if err != nil {
		return nil, err
	}
	fo.DecideMS = ms(time.Since(start))
	s, err = measureStep(fo, b, lb, gen3, rec.Current)
	if err != nil {
		return nil, err
	}
	rep.Steps = append(rep.Steps, s)

	// A Backup started now loads the job cold.
	sub.stop()
	benchproc.StopAll(procs, 10*time.Second)
	start = time.Now()
	backup, sub, err = startBackup("backup-2")
	if err != nil {
		return nil, err
	}
	procs = []*benchproc.Proc{backup}
	subscribed := time.Now()
	got, _, err := sub.await(gen3.Generation, o.timeout)
	if err != nil {
		return nil, fmt.Errorf("restarted Backup: %w", err)
	}
	rep.FirstLoadMS = ms(got.Sub(subscribed))
	say("a restarted Backup (ready %.0f ms after its start) sent generation %d %.0f ms after the subscription",
		ms(subscribed.Sub(start)), gen3.Generation, rep.FirstLoadMS)
	return rep, nil
}

// assigner is one Assigner's view of the store: its own etcd client, and
// the renewal of the job lease it holds.
type assigner struct {
	name   string
	store  storage.Store
	leases *etcdlease.Manager
	stop   chan struct{}
	wg     sync.WaitGroup
	closed bool
}

func openAssigner(ctx context.Context, addr, name string) (*assigner, error) {
	st, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{addr}, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	return &assigner{name: name, store: st, leases: etcdlease.New(st, etcdlease.Options{}), stop: make(chan struct{})}, nil
}

// renew renews l every third of its TTL, as an Assigner does, until close.
func (a *assigner) renew(l lease.Job) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		t := time.NewTicker(l.TTL / 3)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), l.TTL/3)
				_, _ = a.leases.Renew(ctx, l)
				cancel()
			}
		}
	}()
}

// close ends the Assigner as its death would: the lease is not released,
// and lapses with its TTL.
func (a *assigner) close() {
	if a.closed {
		return
	}
	a.closed = true
	close(a.stop)
	a.wg.Wait()
	_ = a.store.Close()
}

func makeTasks(n int) []assign.Task {
	tasks := make([]assign.Task, n)
	for i := range tasks {
		tasks[i] = assign.Task{Name: fmt.Sprintf("task-%05d", i), Addr: fmt.Sprintf("10.%d.%d.%d:7070", i>>16, (i>>8)&255, i&255)}
	}
	return tasks
}

// dealt is generation 1 of job: n slices of equal width, each on a task
// drawn at random with every task holding n/len(tasks) of them.
func dealt(rng *rand.Rand, tasks []assign.Task, n int) *assign.Assignment {
	owner := make([]int, n)
	for i := range owner {
		owner[i] = i % len(tasks)
	}
	rng.Shuffle(n, func(i, j int) { owner[i], owner[j] = owner[j], owner[i] })
	a := &assign.Assignment{Job: job, Generation: 1, Tasks: tasks, Slices: make([]assign.Slice, n)}
	width := assign.KeySpaceEnd / assign.SliceKey(n)
	for i := range n {
		a.Slices[i] = assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width, Tasks: []string{tasks[owner[i]].Name}}
	}
	a.Slices[n-1].End = assign.KeySpaceEnd
	return a
}

// powerLoad gives each slice of a a load drawn from a Pareto law of
// exponent alpha: a few hot slices, many cold ones.
func powerLoad(rng *rand.Rand, a *assign.Assignment, alpha float64) assign.Load {
	load := make(assign.Load, len(a.Slices))
	for i, s := range a.Slices {
		load[i] = assign.LoadEntry{Start: s.Start, End: s.End, Load: 1 / math.Pow(1-rng.Float64(), 1/alpha)}
	}
	return load
}

// subscriber follows the job through a Backup's WatchAssignment.
type subscriber struct {
	cancel context.CancelFunc
	gens   chan received
	done   chan struct{}
}

type received struct {
	gen  uint64
	at   time.Time
	kind string
	err  error
}

func subscribe(ctx context.Context, addr string) *subscriber {
	cli := slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(addr))
	sctx, cancel := context.WithCancel(ctx)
	s := &subscriber{cancel: cancel, gens: make(chan received, 16), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		// The call returns with the stream's headers, which a Backup
		// sends with the job's first assignment.
		stream, err := cli.WatchAssignment(sctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job}))
		if err != nil {
			if sctx.Err() == nil {
				s.gens <- received{err: err}
			}
			return
		}
		defer stream.Close()
		for stream.Receive() {
			m := stream.Msg()
			r := received{at: time.Now()}
			switch {
			case m.GetAssignment() != nil:
				r.gen, r.kind = m.GetAssignment().GetGeneration(), "full"
			case m.GetDelta() != nil:
				r.gen, r.kind = m.GetDelta().GetGeneration(), "delta"
			default:
				continue
			}
			select {
			case s.gens <- r:
			case <-sctx.Done():
				return
			}
		}
		if err := stream.Err(); err != nil && sctx.Err() == nil {
			select {
			case s.gens <- received{err: err}:
			case <-sctx.Done():
			}
		}
	}()
	return s
}

// await returns when the subscriber received generation gen.
func (s *subscriber) await(gen uint64, timeout time.Duration) (time.Time, string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case r := <-s.gens:
			if r.err != nil {
				return time.Time{}, "", fmt.Errorf("the Backup's stream ended: %w", r.err)
			}
			if r.gen >= gen {
				return r.at, r.kind, nil
			}
		case <-t.C:
			return time.Time{}, "", fmt.Errorf("generation %d did not reach the subscriber within %v", gen, timeout)
		}
	}
}

func (s *subscriber) stop() {
	s.cancel()
	<-s.done
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
