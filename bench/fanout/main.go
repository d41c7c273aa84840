//go:build linux

// Command fanout measures how fast one slicerd process fans a new
// assignment out to many subscribers: it starts the real slicerd binary
// (every role, its bbolt store in a temporary directory), runs a job of
// three tasks (Slicelets in this process), opens -streams
// DistributorService.WatchAssignment streams from this process over
// -conns HTTP/2 connections, and makes -generations new generations by
// switching the job's redundancy between 1 and 2. For each generation it
// reports, from the commit (the time in slicerd's "assignment committed"
// log line) to each stream's receipt, the p50, p99 and the time until
// every stream had it, with slicerd's resident memory and the CPU it spent
// on the update.
//
//	go run ./bench/fanout -streams 10000
//	go run ./bench/fanout -streams 10000 -slices 1000
//
// -slices N seeds the store with an N-slice assignment first (slicerd
// keeps its slices; a redundancy switch rewrites every slice's tasks).
// Streams accept gzip, as the Clerk does, unless -gzip=false. slicerd and
// the harness share the machine, as they would share a 2-core CI runner.
// Linux only (/proc).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/slicelet"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	mode, join   string
	slicerd      string
	streams      int
	conns        int
	generations  int
	slices       int
	gzip         bool
	timeout      time.Duration
	logDir       string
	jsonOut      bool
	slicerdFlags benchproc.Flags
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("fanout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", "measure", "measure, or tasks: run the job's tasks joining -join until stdin closes (the harness starts itself so)")
	fs.StringVar(&o.join, "join", "", "mode tasks: slicerd's gossip address")
	fs.StringVar(&o.slicerd, "slicerd", "", "slicerd binary (default: build it)")
	fs.IntVar(&o.streams, "streams", 10000, "WatchAssignment streams to open")
	fs.IntVar(&o.conns, "conns", 100, "HTTP/2 connections to spread them over")
	fs.IntVar(&o.generations, "generations", 10, "new generations to make and time")
	fs.IntVar(&o.slices, "slices", 0, "seed an assignment of this many slices (0: the job's own, a few slices)")
	fs.BoolVar(&o.gzip, "gzip", true, "accept gzip-compressed responses, as the Clerk does")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long one generation may take to reach every stream")
	fs.StringVar(&o.logDir, "log-dir", "", "keep slicerd's log and data here (default: a temporary directory, removed)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	fs.Var(&o.slicerdFlags, "slicerd-flag", "an extra slicerd flag (repeatable), e.g. -slicerd-flag=--stream-send-budget-mib=0")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q; the harness takes flags only", fs.Arg(0))
	case o.mode != "measure" && o.mode != "tasks":
		return nil, fmt.Errorf("invalid -mode %q: use measure (tasks is the harness's own)", o.mode)
	case o.mode == "tasks" && o.join == "":
		return nil, errors.New("-mode tasks needs -join")
	case o.streams < 1 || o.conns < 1 || o.conns > o.streams:
		return nil, fmt.Errorf("invalid -streams %d / -conns %d: need 1 ≤ conns ≤ streams", o.streams, o.conns)
	case o.generations < 1:
		return nil, fmt.Errorf("invalid -generations %d: need at least 1", o.generations)
	case o.slices < 0 || o.slices > 100000:
		return nil, fmt.Errorf("invalid -slices %d: use 0 to 100000", o.slices)
	case o.timeout <= 0:
		return nil, fmt.Errorf("invalid -timeout %v: use a positive duration", o.timeout)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "fanout: %v\n", err)
		}
		return 2
	}
	if o.mode == "tasks" {
		if err := runTasks(o.join, os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "fanout: tasks: %v\n", err)
			return 1
		}
		return 0
	}
	rep, err := measure(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "fanout: %v\n", err)
		return 1
	}
	rep.Command = "go run ./bench/fanout " + strings.Join(args, " ")
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.print(stdout)
	}
	if rep.Lost > 0 {
		return 1
	}
	return 0
}

// generation is one timed update.
type generation struct {
	Generation uint64  `json:"generation"`
	Bytes      int     `json:"bytes"` // the update's protobuf encoding
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	AllMs      float64 `json:"all_ms"` // until every stream had it
	Received   int     `json:"received"`
	RSSMiB     float64 `json:"rss_mib"`
	CPUMs      float64 `json:"cpu_ms"` // slicerd's, from the trigger until every stream had it
}

type report struct {
	Command     string       `json:"command"`
	Streams     int          `json:"streams"`
	Conns       int          `json:"conns"`
	Slices      int          `json:"slices"`
	Gzip        bool         `json:"gzip"`
	OpenSeconds float64      `json:"open_seconds"` // until every stream had the first assignment
	Generations []generation `json:"generations"`
	// Medians over the generations.
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	AllMs  float64 `json:"all_ms"`
	CPUMs  float64 `json:"cpu_ms"`
	RSSMiB float64 `json:"rss_mib"` // the largest seen
	Lost   int     `json:"lost"`    // stream-generations never received
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.Command)
	fmt.Fprintf(w, "%d streams over %d connections, gzip accepted %v; every stream had the first assignment after %.1f s\n",
		r.Streams, r.Conns, r.Gzip, r.OpenSeconds)
	fmt.Fprintf(w, "%-10s %8s %9s %9s %9s %9s %9s %9s\n", "generation", "bytes", "p50_ms", "p99_ms", "all_ms", "received", "rss_mib", "cpu_ms")
	for _, g := range r.Generations {
		fmt.Fprintf(w, "%-10d %8d %9.1f %9.1f %9.1f %9d %9.0f %9.0f\n", g.Generation, g.Bytes, g.P50Ms, g.P99Ms, g.AllMs, g.Received, g.RSSMiB, g.CPUMs)
	}
	fmt.Fprintf(w, "median: commit → stream p50 %.1f ms, p99 %.1f ms, until all %.1f ms; slicerd CPU per update %.0f ms; RSS up to %.0f MiB; lost %d\n",
		r.P50Ms, r.P99Ms, r.AllMs, r.CPUMs, r.RSSMiB, r.Lost)
}

func measure(o *options, stderr io.Writer) (*report, error) {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "fanout: "+format+"\n", args...) }
	logDir, cleanup, err := benchproc.LogDir("fanout", o.logDir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := benchproc.Build(ctx, logDir, benchproc.Binary{Path: &o.slicerd, Name: "slicerd", Pkg: "."}); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(logDir, "data")
	os.RemoveAll(dataDir)
	if o.slices > 0 {
		var tasks []assign.Task
		for _, name := range taskNames {
			tasks = append(tasks, assign.Task{Name: name, Addr: taskAddr(name)})
		}
		if err := benchproc.Seed(ctx, dataDir, "kv", tasks, o.slices); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
	}
	sargs := []string{"--node-name", "slicerd-0", "--data-dir", dataDir,
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--rebalance-delay", "100ms", "--startup-grace", "500ms", "--rebalance-interval", "0s",
		"--max-connections", strconv.Itoa(o.conns*4 + 1024)}
	sargs = append(sargs, o.slicerdFlags...)
	logPath := filepath.Join(logDir, "slicerd.log")
	sd, started, err := benchproc.StartSlicerd("slicerd", logPath, o.slicerd, sargs, 60*time.Second)
	if err != nil {
		return nil, err
	}
	defer benchproc.StopAll([]*benchproc.Proc{sd}, 10*time.Second)
	pid := sd.Cmd.Process.Pid
	say("slicerd pid %d rpc %s; logs in %s", pid, started.RPC, logDir)
	commits, err := followCommits(ctx, logPath)
	if err != nil {
		return nil, err
	}

	// The tasks run in a process of their own, so that the streams'
	// load on this one cannot starve their gossip.
	tasks, err := startTaskProcess(started.Gossip)
	if err != nil {
		return nil, err
	}
	defer tasks()
	admin := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(started.RPC))
	redundancy := uint32(1)
	setRedundancy := func(r uint32) error {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		defer ccancel()
		cfg := &slicerv1.JobConfig{MinRedundancy: r, MaxRedundancy: r}
		if o.slices > 0 {
			cfg.MaxSlicesPerTask, cfg.MinSlicesPerTask = assign.MaxSlicesPerTaskLimit, assign.MaxSlicesPerTaskLimit
		}
		_, err := admin.SetJobConfig(cctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: cfg}))
		return err
	}
	if err := setRedundancy(redundancy); err != nil {
		return nil, fmt.Errorf("set the job's configuration: %w", err)
	}

	subs := newSubscribers(o.streams, o.conns, started.RPC, o.gzip)
	defer subs.stop()
	// The first assignment naming the three tasks, at every stream.
	first, err := subs.waitTasks(ctx, 3, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	say("job kv generation %d: %d slices over %d tasks", first.Generation, len(first.Slices), len(first.Tasks))
	opened := time.Now()
	subs.start(ctx)
	if err := subs.waitOpen(5 * time.Minute); err != nil {
		return nil, fmt.Errorf("opening the streams: %w", err)
	}
	rep := &report{Streams: o.streams, Conns: o.conns, Slices: len(first.Slices), Gzip: o.gzip,
		OpenSeconds: time.Since(opened).Seconds()}
	say("%d streams open in %.1f s", o.streams, rep.OpenSeconds)
	// Start from a generation every stream holds, after the open's
	// garbage settled.
	var gen uint64
	for {
		_ = benchproc.Sleep(ctx, 2*time.Second)
		a, err := subs.waitAfter(ctx, 0, time.Minute)
		if err != nil {
			return nil, err
		}
		if err := subs.waitAll(a.Generation, time.Minute); err != nil {
			return nil, fmt.Errorf("settling: %w", err)
		}
		if b, _ := subs.waitAfter(ctx, 0, time.Minute); b.Generation == a.Generation {
			gen = a.Generation
			break
		}
	}

	for range o.generations {
		redundancy = 3 - redundancy
		cpu0 := benchproc.CPUTime(pid)
		if err := setRedundancy(redundancy); err != nil {
			return nil, fmt.Errorf("switch redundancy: %w", err)
		}
		next, err := subs.waitAfter(ctx, gen, 60*time.Second)
		if err != nil {
			return nil, err
		}
		gen = next.Generation
		werr := subs.waitAll(gen, o.timeout)
		cpu := benchproc.CPUTime(pid) - cpu0
		at, err := commits.wait(gen, 30*time.Second)
		if err != nil {
			return nil, err
		}
		got := subs.receipts(gen)
		lat := make([]float64, 0, len(got))
		for _, t := range got {
			lat = append(lat, float64(t-at.UnixNano())/1e6)
		}
		slices.Sort(lat)
		rss, _ := benchproc.Memory(pid)
		g := generation{Generation: gen, Bytes: proto.Size(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(next)}),
			Received: len(got), RSSMiB: float64(rss) / 1024, CPUMs: float64(cpu) / 1e6}
		if len(lat) > 0 {
			g.P50Ms, g.P99Ms, g.AllMs = pct(lat, 0.5), pct(lat, 0.99), lat[len(lat)-1]
		}
		rep.Lost += o.streams - len(got)
		rep.Generations = append(rep.Generations, g)
		say("generation %d: p50 %.1f ms p99 %.1f ms all %.1f ms, %d of %d streams", gen, g.P50Ms, g.P99Ms, g.AllMs, len(got), o.streams)
		if werr != nil {
			say("generation %d: %v", gen, werr)
		}
		_ = benchproc.Sleep(ctx, time.Second)
	}
	var p50, p99, all, cpu []float64
	for _, g := range rep.Generations {
		p50, p99, all, cpu = append(p50, g.P50Ms), append(p99, g.P99Ms), append(all, g.AllMs), append(cpu, g.CPUMs)
		rep.RSSMiB = max(rep.RSSMiB, g.RSSMiB)
	}
	rep.P50Ms, rep.P99Ms, rep.AllMs, rep.CPUMs = median(p50), median(p99), median(all), median(cpu)
	return rep, nil
}

func pct(sorted []float64, q float64) float64 {
	return sorted[int(q*float64(len(sorted)-1))]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// taskNames are the job's tasks.
var taskNames = []string{"t0", "t1", "t2"}

// taskAddr is the address task tN advertises; nothing listens there, as
// no request is routed.
func taskAddr(name string) string { return "127.0.0.1:1900" + name[len(name)-1:] }

// tasksEnv is set in the environment of the tasks process, which tells a
// test binary to act as the harness.
const tasksEnv = "FANOUT_TASKS"

// startTaskProcess starts this program in mode tasks and waits until the
// tasks have joined; the returned function stops them.
func startTaskProcess(join string) (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-mode", "tasks", "-join", join)
	benchproc.SetProcAttr(cmd)
	cmd.Env = append(os.Environ(), tasksEnv+"=1")
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
		return nil, fmt.Errorf("start the tasks: %w", err)
	}
	stop := func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		stop()
		return nil, fmt.Errorf("the tasks did not start (%q, %v)", line, err)
	}
	return stop, nil
}

// runTasks runs the job's Slicelets, joining slicerd at join, until stdin
// closes; it prints "ready" once they all joined.
func runTasks(join string, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, name := range taskNames {
		g := gossip.DefaultConfig()
		g.Profile = gossip.ProfileLocal
		s, err := slicelet.New(slicelet.Config{Job: "kv", Task: name, Addr: taskAddr(name), Join: []string{join}, Gossip: g})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = s.Run(ctx) })
		select {
		case <-s.Joined():
		case <-time.After(60 * time.Second):
			return fmt.Errorf("task %s did not join gossip within 60s", name)
		}
	}
	fmt.Fprintln(stdout, "ready")
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// commitLog follows slicerd's JSON log for "assignment committed" lines.
type commitLog struct {
	mu      sync.Mutex
	at      map[uint64]time.Time
	changed chan struct{}
}

func followCommits(ctx context.Context, path string) (*commitLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	c := &commitLog{at: map[uint64]time.Time{}, changed: make(chan struct{})}
	go func() {
		defer f.Close()
		r := bufio.NewReaderSize(f, 1<<20)
		var partial []byte
		for ctx.Err() == nil {
			line, err := r.ReadBytes('\n')
			partial = append(partial, line...)
			if err != nil { // at the end for now: wait for more
				_ = benchproc.Sleep(ctx, 2*time.Millisecond)
				continue
			}
			var rec struct {
				Time       time.Time `json:"time"`
				Msg        string    `json:"msg"`
				Generation uint64    `json:"generation"`
			}
			if json.Unmarshal(partial, &rec) == nil && rec.Msg == "assignment committed" {
				c.mu.Lock()
				c.at[rec.Generation] = rec.Time
				close(c.changed)
				c.changed = make(chan struct{})
				c.mu.Unlock()
			}
			partial = partial[:0]
		}
	}()
	return c, nil
}

func (c *commitLog) wait(gen uint64, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		c.mu.Lock()
		at, ok := c.at[gen]
		changed := c.changed
		c.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-changed:
		case <-t.C:
			return time.Time{}, fmt.Errorf("slicerd logged no commit of generation %d within %v", gen, timeout)
		}
	}
}

// subscribers are the streams. Each records when it received each
// generation in its own slot, so receipts do not wait on one another.
type subscribers struct {
	n       int
	first   slicerv1connect.DistributorServiceClient // stream 0's
	clients []slicerv1connect.DistributorServiceClient
	hcs     []*http.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	streams []streamLog
	// counts[g % len] counts the streams that had generation g; opened
	// those that had any.
	counts [1024]atomic.Int64
	opened atomic.Int64

	mu      sync.Mutex
	newest  *assign.Assignment // as stream 0 has it
	changed chan struct{}
}

// streamLog is one stream's receipts.
type streamLog struct {
	mu  sync.Mutex
	got map[uint64]int64 // generation → receipt time, Unix ns
}

func newSubscribers(n, conns int, addr string, gzip bool) *subscribers {
	s := &subscribers{n: n, streams: make([]streamLog, n), changed: make(chan struct{})}
	var opts []connect.ClientOption
	if !gzip {
		opts = append(opts, connect.WithAcceptCompression("gzip", nil, nil))
	}
	// Stream 0 decodes whole assignments, on a connection of its own; the
	// others read only the generation, so that this process spends its
	// CPU on receiving rather than on decoding copies of one message.
	hc := api.NewH2CClient()
	s.hcs = append(s.hcs, hc)
	s.first = slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr), opts...)
	opts = append(opts, connect.WithCodec(generationCodec{}))
	for range conns {
		hc := api.NewH2CClient()
		s.hcs = append(s.hcs, hc)
		s.clients = append(s.clients, slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr), opts...))
	}
	return s
}

// generationCodec decodes a WatchAssignmentResponse's generation and
// incarnation only, skipping the slices.
type generationCodec struct{}

func (generationCodec) Name() string { return "proto" }

func (generationCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(pm)
}

func (generationCodec) Unmarshal(b []byte, m any) error {
	resp, ok := m.(*slicerv1.WatchAssignmentResponse)
	if !ok {
		pm, ok := m.(proto.Message)
		if !ok {
			return fmt.Errorf("%T is not a protobuf message", m)
		}
		return proto.Unmarshal(b, pm)
	}
	a := &slicerv1.Assignment{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case num == 2 && typ == protowire.VarintType:
				g, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return protowire.ParseError(n)
				}
				a.Generation = g
			case num == 5 && typ == protowire.BytesType:
				a.Incarnation = string(v)
			}
			return nil
		})
	})
	resp.Assignment = a
	return err
}

// eachField calls f with each field of the protobuf message b: for a
// length-delimited field its contents, otherwise its encoded value.
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}

// watchOne is stream i, reopened from the generation it holds when it
// ends; stream 0 also keeps the newest assignment.
func (s *subscribers) watchOne(ctx context.Context, i int) {
	client := s.clients[i%len(s.clients)]
	if i == 0 {
		client = s.first
	}
	log := &s.streams[i]
	var known uint64
	var inc string
	for ctx.Err() == nil {
		stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: known, KnownIncarnation: inc}))
		if err != nil {
			_ = benchproc.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		for stream.Receive() {
			now := time.Now().UnixNano()
			p := stream.Msg().GetAssignment()
			known, inc = p.GetGeneration(), p.GetIncarnation()
			log.mu.Lock()
			if log.got == nil {
				log.got = map[uint64]int64{}
				s.opened.Add(1)
			}
			_, seen := log.got[known]
			if !seen {
				log.got[known] = now
			}
			log.mu.Unlock()
			if !seen {
				s.counts[known%uint64(len(s.counts))].Add(1)
			}
			if i == 0 {
				if a, err := api.FromProto(p); err == nil {
					s.mu.Lock()
					s.newest = a
					close(s.changed)
					s.changed = make(chan struct{})
					s.mu.Unlock()
				}
			}
		}
		stream.Close()
		if ctx.Err() == nil {
			_ = benchproc.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

// waitTasks opens stream 0 alone and waits for an assignment naming n
// tasks.
func (s *subscribers) waitTasks(ctx context.Context, n int, timeout time.Duration) (*assign.Assignment, error) {
	ctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.wg.Go(func() { s.watchOne(ctx, 0) })
	return s.waitFor(func(a *assign.Assignment) bool { return len(a.Tasks) == n }, timeout)
}

// start opens the other streams.
func (s *subscribers) start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	prev := s.cancel
	s.cancel = func() { cancel(); prev() }
	for i := 1; i < s.n; i++ {
		s.wg.Go(func() { s.watchOne(ctx, i) })
	}
}

func (s *subscribers) waitAfter(ctx context.Context, gen uint64, timeout time.Duration) (*assign.Assignment, error) {
	return s.waitFor(func(a *assign.Assignment) bool { return a.Generation > gen }, timeout)
}

func (s *subscribers) waitFor(cond func(*assign.Assignment) bool, timeout time.Duration) (*assign.Assignment, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		a, changed := s.newest, s.changed
		s.mu.Unlock()
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

// waitAll waits until every stream had gen. It polls a counter: the
// receipt times are taken by the streams, so the poll's period does not
// show in them.
func (s *subscribers) waitAll(gen uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := s.counts[gen%uint64(len(s.counts))].Load()
		if n >= int64(s.n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d streams had generation %d after %v", n, s.n, gen, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitOpen waits until every stream had an assignment.
func (s *subscribers) waitOpen(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := s.opened.Load()
		if n >= int64(s.n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d streams had an assignment after %v", n, s.n, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// receipts returns the receipt times of gen, one per stream that had it.
func (s *subscribers) receipts(gen uint64) []int64 {
	out := make([]int64, 0, s.n)
	for i := range s.streams {
		l := &s.streams[i]
		l.mu.Lock()
		if t, ok := l.got[gen]; ok {
			out = append(out, t)
		}
		l.mu.Unlock()
	}
	return out
}

func (s *subscribers) stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	for _, hc := range s.hcs {
		hc.CloseIdleConnections()
	}
}
