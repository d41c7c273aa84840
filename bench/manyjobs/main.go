// Command manyjobs measures Assigners holding many jobs on a shared etcd
// store: the etcd requests per second the Assigners make at rest, the
// resident memory each job costs them, and how long after one Assigner is
// SIGKILLed every job it held has a new holder.
//
// It starts an etcd server inside its own process and -assigners slicerd
// processes (--role assigner, --store etcd://...) on loopback, creates
// -jobs jobs with `job set` calls (no tasks: each job is a configuration,
// a job lease and the Assigner's bookkeeping), waits until every job's
// lease has a holder, counts the gRPC messages etcd receives over -rest, then
// kills the Assigner holding the most jobs and polls the job lease keys
// until each names a live Assigner.
//
//	go run ./bench/manyjobs -jobs 10000
//
// The children are stopped (SIGTERM, then SIGKILL) on exit and on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	jobs, assigners int
	rest            time.Duration
	slicerd, logDir string
	timeout         time.Duration
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("manyjobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.jobs, "jobs", 10000, "jobs to create")
	fs.IntVar(&o.assigners, "assigners", 2, "slicerd assigners sharing the etcd store")
	fs.DurationVar(&o.rest, "rest", 30*time.Second, "how long to count etcd requests once every job has a holder")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long the jobs may take to get holders, before and after the kill")
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary (default: build it from this module)")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the processes' logs and etcd's data here (default: a temporary directory, removed)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q; the harness takes flags only", fs.Arg(0))
	case o.jobs < 1 || o.jobs > 100000:
		return nil, fmt.Errorf("invalid -jobs %d: use 1 to 100000", o.jobs)
	case o.assigners < 2 || o.assigners > 8:
		return nil, fmt.Errorf("invalid -assigners %d: use 2 to 8 (one is killed)", o.assigners)
	case o.rest <= 0 || o.timeout <= 0:
		return nil, errors.New("-rest and -timeout must be positive")
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "manyjobs: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := measure(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "manyjobs: %v\n", err)
		return 1
	}
	return 0
}

func measure(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	say := func(format string, a ...any) { fmt.Fprintf(stderr, "manyjobs: "+format+"\n", a...) }
	logDir, cleanup, err := benchproc.LogDir("manyjobs", o.logDir)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."}); err != nil {
		return err
	}
	etcd, err := benchproc.StartEtcd(filepath.Join(logDir, "etcd"))
	if err != nil {
		return err
	}
	defer etcd.Stop()
	const prefix = "/manyjobs/"
	store := "etcd://" + etcd.Addr + prefix
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()

	type node struct {
		name string
		proc *benchproc.Proc
		rpc  string
		// settled receives the line that says the node's network
		// coordinate settled: the Assigners' preferences change then,
		// and jobs move to the nearer one.
		settled <-chan string
	}
	var nodes []*node
	var procs []*benchproc.Proc
	defer func() { benchproc.StopAll(procs, 10*time.Second) }()
	join := ""
	for i := 1; i <= o.assigners; i++ {
		name := "a" + strconv.Itoa(i)
		sargs := []string{"--node-name", name, "--role", "assigner", "--store", store, "--data-dir", filepath.Join(logDir, name),
			"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
			"--max-jobs", strconv.Itoa(o.jobs + 100)}
		if join != "" {
			sargs = append(sargs, "--join", join)
		}
		p, addrs, err := benchproc.StartSlicerd(name, filepath.Join(logDir, name+".log"), o.slicerd, sargs, 60*time.Second)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		nodes = append(nodes, &node{name: name, proc: p, rpc: addrs.RPC, settled: p.Await("network coordinate settled")})
		if join == "" {
			join = addrs.Gossip
		}
		say("%s pid %d rpc %s", name, p.Cmd.Process.Pid, addrs.RPC)
	}
	rss := func() []int64 {
		out := make([]int64, len(nodes))
		for i, n := range nodes {
			out[i], _ = benchproc.Memory(n.proc.Cmd.Process.Pid)
		}
		return out
	}
	// Settle (the network coordinates too, so that no preference changes
	// once the jobs exist), then the memory of Assigners holding no job.
	for _, n := range nodes {
		select {
		case <-n.settled:
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("%s: its network coordinate did not settle within 2 minutes; see its log", n.name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	say("network coordinates settled")
	if err := benchproc.Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	empty := rss()

	// The jobs, created through every Assigner in turn (each forwards to
	// the job's preferred one), 16 at a time.
	created := time.Now()
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	clients := make([]slicerv1connect.JobServiceClient, len(nodes))
	for i, n := range nodes {
		clients[i] = slicerv1connect.NewJobServiceClient(hc, api.RPCURL(n.rpc))
	}
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.jobs || ctx.Err() != nil {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := clients[(i+w)%len(clients)].SetJobConfig(cctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
					Job: jobName(i), Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1}}))
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d job set calls failed; the first: %v", n, o.jobs, firstErr.Load())
	}
	creation := time.Since(created)
	say("%d jobs created in %.1f s", o.jobs, creation.Seconds())

	holders := func() (map[string]int, error) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := cli.Get(rctx, prefix+"leases/", clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		by := map[string]int{}
		for _, kv := range resp.Kvs {
			if strings.HasSuffix(string(kv.Key), "/job") {
				by[string(kv.Value)]++
			}
		}
		return by, nil
	}
	waitHeld := func(alive map[string]bool) (time.Duration, map[string]int, error) {
		start := time.Now()
		for {
			by, err := holders()
			if err != nil {
				return 0, nil, err
			}
			n := 0
			for h, c := range by {
				if alive[h] {
					n += c
				}
			}
			if n >= o.jobs {
				return time.Since(start), by, nil
			}
			if time.Since(start) > o.timeout {
				return 0, by, fmt.Errorf("%d of %d jobs held by a live assigner after %v: %v", n, o.jobs, o.timeout, by)
			}
			if err := benchproc.Sleep(ctx, 100*time.Millisecond); err != nil {
				return 0, nil, err
			}
		}
	}
	alive := map[string]bool{}
	for _, n := range nodes {
		alive[n.name] = true
	}
	took, by, err := waitHeld(alive)
	if err != nil {
		return err
	}
	say("every job held %.1f s after the last was created: %v", took.Seconds(), by)

	// At rest: etcd's requests over the window, and the memory. Each
	// Assigner reads every job another created from its watch of the
	// store, one after another, a while after the creations: the window
	// starts once as long again as the creations took has passed.
	if err := benchproc.Sleep(ctx, max(5*time.Second, creation)); err != nil {
		return err
	}
	// Requests are etcd's gRPC messages received, by method: a unary call
	// is one, and a keep-alive or watch stream counts each message sent
	// on it. Calls completed (grpc_server_handled_total) are told beside.
	scrape := func() (benchproc.Samples, error) {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return benchproc.Scrape(sctx, "http://"+etcd.Addr+"/metrics")
	}
	s0, err := scrape()
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := benchproc.Sleep(ctx, o.rest); err != nil {
		return err
	}
	s1, err := scrape()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	const received = "grpc_server_msg_received_total"
	rate := (s1.Sum(received) - s0.Sum(received)) / secs
	handled := (s1.Sum("grpc_server_handled_total") - s0.Sum("grpc_server_handled_total")) / secs
	var methods []string
	seen := map[string]bool{}
	for _, x := range s1 {
		if m := x.Labels["grpc_method"]; x.Name == received && !seen[m] {
			seen[m] = true
			if d := (s1.Sum(received, "grpc_method", m) - s0.Sum(received, "grpc_method", m)) / secs; d > 0 {
				methods = append(methods, fmt.Sprintf("%s %.1f", m, d))
			}
		}
	}
	slices.Sort(methods)
	full := rss()
	fmt.Fprintf(stdout, "%d jobs over %d assigners (held %v)\n", o.jobs, o.assigners, by)
	fmt.Fprintf(stdout, "etcd requests at rest: %.1f per second (%.4f per job per second): %s; calls completed %.1f per second\n",
		rate, rate/float64(o.jobs), strings.Join(methods, ", "), handled)
	for i, n := range nodes {
		per := float64(full[i]-empty[i]) * 1024 / float64(max(by[n.name], 1))
		fmt.Fprintf(stdout, "%s: RSS %.0f MiB holding %d jobs (%.0f MiB with none): %.1f KiB per job held\n",
			n.name, float64(full[i])/1024, by[n.name], float64(empty[i])/1024, per/1024)
	}

	// Kill the Assigner holding the most jobs.
	victim := nodes[0]
	for _, n := range nodes {
		if by[n.name] > by[victim.name] {
			victim = n
		}
	}
	orphans := by[victim.name]
	if err := victim.proc.Cmd.Process.Kill(); err != nil {
		return err
	}
	delete(alive, victim.name)
	say("%s killed, holding %d jobs", victim.name, by[victim.name])
	took, by, err = waitHeld(alive)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "SIGKILL of %s (%d jobs): every job held by a live assigner %.1f s later (%v)\n",
		victim.name, orphans, took.Seconds(), by)
	return nil
}

func jobName(i int) string { return fmt.Sprintf("job-%05d", i) }
