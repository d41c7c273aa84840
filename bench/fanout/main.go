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
// every stream had it, with slicerd's resident memory, the CPU it spent
// on the update and its write system calls meanwhile.
//
//	go run ./bench/fanout -streams 10000
//	go run ./bench/fanout -streams 10000 -slices 1000
//
// -slices N seeds the store with an N-slice assignment first (slicerd
// keeps its slices; a redundancy switch rewrites every slice's tasks).
// With -change load the tasks report load instead, a uniform part and a
// hot spot that moves every 15 s, and each timed generation is one of the
// Assigner's load-balancing decisions (moving at most the job's
// move_churn, 9% of the key space):
//
//	go run ./bench/fanout -streams 10000 -slices 10000 -change load
//
// With -kill, task t2 (which runs in a process of its own) is SIGKILLed
// after the timed generations, and the report gives the time from the
// kill to the commit of the assignment without it, how long that took to
// reach the streams, and how many other members slicerd suspected or
// declared failed meanwhile (false failures: gossip starved by fan-out):
//
//	go run ./bench/fanout -streams 100000 -conns 100 -kill
//
// With -metrics, slicerd serves its Prometheus metrics (--metrics-addr)
// and the report adds the distribution of commit → send over every
// stream and timed generation from slicerd's own
// slicerd_distributor_commit_to_send_seconds histogram, scraped before
// and after the timed generations, next to the same distribution measured
// at the subscribers (commit → receipt, from the commit time each message
// carries), as a CDF at the histogram's bucket bounds: the Slicer paper's
// Figure 10.
//
//	go run ./bench/fanout -streams 10000 -generations 10 -metrics
//
// Streams ask for deltas, as the Clerk does, unless -deltas=false; the
// report gives the bytes stream 0 received per generation beside the
// size of the full assignment. Streams accept gzip, as the Clerk does,
// unless -gzip=false. slicerd and
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
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
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
	deltas       bool
	change       string
	hotPercent   int
	kill         bool
	tasks        string
	cpuProfile   string
	client       string
	timeout      time.Duration
	logDir       string
	jsonOut      bool
	metrics      bool
	gogc         int
	memLimit     string
	slicerdGOGC  int
	slicerdFlags benchproc.Flags
	relays       int
	killRelay    bool
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
	fs.BoolVar(&o.deltas, "deltas", true, "ask for deltas, as the Clerk does")
	fs.StringVar(&o.client, "client", "connect", "how the bulk streams are read: connect (a connect-go client per connection, as a Clerk) or h2 (one goroutine reading raw HTTP/2 frames per connection: subscribers that cost this shared machine less)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the harness's own CPU profile to this file")
	fs.BoolVar(&o.kill, "kill", false, "after the timed generations, SIGKILL task t2 and time its detection")
	fs.StringVar(&o.tasks, "tasks", strings.Join(taskNames, ","), "mode tasks: the tasks to run (the harness's own)")
	fs.IntVar(&o.hotPercent, "hot-percent", 3, "-change load: the hot spot's share of the key space, in percent")
	fs.StringVar(&o.change, "change", "redundancy", "what makes each generation: redundancy (switch the job's redundancy between 1 and 2, which changes every slice) or load (a moving hot spot in the tasks' load reports; each generation is one load-balancing decision)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long one generation may take to reach every stream")
	fs.StringVar(&o.logDir, "log-dir", "", "keep slicerd's log and data here (default: a temporary directory, removed)")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	fs.BoolVar(&o.metrics, "metrics", false, "serve slicerd's metrics (--metrics-addr) and report its commit → send histogram beside the subscribers' commit → receipt")
	fs.IntVar(&o.slicerdGOGC, "slicerd-gogc", 0, "run slicerd with this GOGC (Go's collection target, percent of the live heap; 0: Go's default of 100), as an operator would to trade collector CPU for memory")
	fs.StringVar(&o.memLimit, "slicerd-gomemlimit", "", "run slicerd with this GOMEMLIMIT (Go's soft memory limit, e.g. 1800MiB), as an operator would for a Distributor of many streams; empty: none")
	fs.IntVar(&o.gogc, "gogc", 400, "the harness's own GOGC (-1: no collection). Its garbage collection takes CPU from the slicerd it measures: at 100,000 connect-go streams Go's default of 100 collected during about one generation in six, adding a second of harness CPU to it")
	fs.IntVar(&o.relays, "relays", 0, "start this many relay Distributors (slicerd --role distributor --distributor-upstream) following slicerd, and spread the streams evenly over slicerd and the relays, so that the report compares a level of the fan-out tree with the one below it")
	fs.BoolVar(&o.killRelay, "kill-relay", false, "with -relays: after the timed generations, SIGKILL the first relay, make one more generation, and time it to every stream, the killed relay's reconnecting to the next address")
	fs.Var(&o.slicerdFlags, "slicerd-flag", "an extra slicerd flag (repeatable), e.g. -slicerd-flag=--stream-send-budget-mib=0")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q; the harness takes flags only", fs.Arg(0))
	case o.mode != "measure" && o.mode != "tasks":
		return nil, fmt.Errorf("invalid -mode %q: use measure (tasks is the harness's own)", o.mode)
	case o.change != "redundancy" && o.change != "load":
		return nil, fmt.Errorf("invalid -change %q: use redundancy or load", o.change)
	case o.client != "connect" && o.client != "h2":
		return nil, fmt.Errorf("invalid -client %q: use connect or h2", o.client)
	case o.hotPercent < 1 || o.hotPercent > 100:
		return nil, fmt.Errorf("invalid -hot-percent %d: use 1 to 100", o.hotPercent)
	case o.mode == "tasks" && o.join == "":
		return nil, errors.New("-mode tasks needs -join")
	case o.streams < 1 || o.conns < 1 || o.conns > o.streams:
		return nil, fmt.Errorf("invalid -streams %d / -conns %d: need 1 ≤ conns ≤ streams", o.streams, o.conns)
	case o.generations < 1:
		return nil, fmt.Errorf("invalid -generations %d: need at least 1", o.generations)
	case o.slices < 0 || o.slices > 100000:
		return nil, fmt.Errorf("invalid -slices %d: use 0 to 100000", o.slices)
	case o.slicerdGOGC < 0:
		return nil, fmt.Errorf("invalid -slicerd-gogc %d: use a positive percentage, or 0 for Go's default", o.slicerdGOGC)
	case o.gogc < -1 || o.gogc == 0:
		return nil, fmt.Errorf("invalid -gogc %d: use -1 (off) or a positive percentage", o.gogc)
	case o.timeout <= 0:
		return nil, fmt.Errorf("invalid -timeout %v: use a positive duration", o.timeout)
	case o.relays < 0 || o.relays > 16:
		return nil, fmt.Errorf("invalid -relays %d: use 0 to 16", o.relays)
	case o.relays > 0 && o.client != "connect":
		return nil, errors.New("-relays needs -client connect")
	case o.killRelay && o.relays < 2:
		return nil, errors.New("-kill-relay needs -relays 2 or more: the killed relay's streams move to the next")
	case o.relays > 0 && o.conns < o.relays+1:
		return nil, fmt.Errorf("-conns %d is fewer than slicerd and its %d relays", o.conns, o.relays)
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
		hot := 0
		if o.change == "load" {
			hot = o.hotPercent
		}
		if err := runTasks(o.join, strings.Split(o.tasks, ","), hot, os.Stdin, stdout); err != nil {
			fmt.Fprintf(stderr, "fanout: tasks: %v\n", err)
			return 1
		}
		return 0
	}
	debug.SetGCPercent(o.gogc)
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "fanout: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "fanout: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
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
	Bytes      int     `json:"bytes"`      // what stream 0 received: a delta or the full assignment
	FullBytes  int     `json:"full_bytes"` // the full assignment's protobuf encoding
	Slices     int     `json:"slices"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	AllMs      float64 `json:"all_ms"` // until every stream had it
	Received   int     `json:"received"`
	RSSMiB     float64 `json:"rss_mib"`
	CPUMs      float64 `json:"cpu_ms"` // slicerd's, from the trigger until every stream had it
	// The harness's own over the same time: the subscribers' share of
	// the machine.
	HarnessCPUMs float64 `json:"harness_cpu_ms"`
	// WriteCalls are slicerd's write system calls over the same time.
	WriteCalls int64 `json:"write_calls"`
}

type report struct {
	Command     string       `json:"command"`
	Streams     int          `json:"streams"`
	Conns       int          `json:"conns"`
	Slices      int          `json:"slices"`
	Gzip        bool         `json:"gzip"`
	Deltas      bool         `json:"deltas"`
	Change      string       `json:"change"`
	Client      string       `json:"client"`
	OpenSeconds float64      `json:"open_seconds"` // until every stream had the first assignment
	Generations []generation `json:"generations"`
	// Medians over the generations.
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	AllMs  float64 `json:"all_ms"`
	CPUMs  float64 `json:"cpu_ms"`
	RSSMiB float64 `json:"rss_mib"` // the largest seen
	Lost   int     `json:"lost"`    // stream-generations never received
	// Redials counts -client h2 connections that slicerd closed or
	// reset and the harness dialled again, its streams reopened.
	Redials int64       `json:"redials"`
	Kill    *killReport `json:"kill,omitempty"`
	// Levels, with -relays: commit → receipt of the streams on slicerd
	// itself and of those on its relays, over every timed generation.
	Levels *levels `json:"levels,omitempty"`
	// KillRelay, with -kill-relay: the generation after the first relay
	// was killed.
	KillRelay *killRelayReport `json:"kill_relay,omitempty"`
	// Distribution is commit → receipt over every stream and timed
	// generation, with slicerd's own commit → send beside it (-metrics).
	Distribution *distribution `json:"distribution"`
	// PerStream, with -metrics: slicerd's memory after the timed
	// generations, divided by the streams it serves.
	PerStream *perStream `json:"per_stream,omitempty"`
}

// perStream is slicerd's memory per stream, from its Go runtime metrics:
// goroutine stacks and the heap in use.
type perStream struct {
	Streams    int     `json:"streams"`
	Goroutines float64 `json:"goroutines"`
	StackBytes float64 `json:"stack_bytes"`
	HeapBytes  float64 `json:"heap_bytes"`
}

func newPerStream(after benchproc.Samples, streams int) *perStream {
	n := float64(streams)
	return &perStream{Streams: streams, Goroutines: after.Sum("go_goroutines") / n,
		StackBytes: after.Sum("go_memstats_stack_inuse_bytes") / n, HeapBytes: after.Sum("go_memstats_heap_inuse_bytes") / n}
}

// distribution is the Slicer paper's Figure 10 for the timed generations:
// how long after its commit each stream had each generation.
type distribution struct {
	// CommitFrom says where the subscribers' commit times come from:
	// "message" (committed_unix_nano, the Assigner's stamp) or "log"
	// (the assignment committed log line, for a slicerd without the
	// field).
	CommitFrom string   `json:"commit_from"`
	Receipts   quantile `json:"receipts"` // at the subscribers
	// Slicerd is from slicerd_distributor_commit_to_send_seconds, with
	// its quantiles estimated from the buckets as histogram_quantile does;
	// nil without -metrics.
	Slicerd *quantile `json:"slicerd,omitempty"`
	CDF     []cdfRow  `json:"cdf"`
}

type quantile struct {
	N           int     `json:"n"`
	P50Ms       float64 `json:"p50_ms"`
	P95Ms       float64 `json:"p95_ms"`
	P99Ms       float64 `json:"p99_ms"`
	Within100ms float64 `json:"within_100ms"`
	Within1s    float64 `json:"within_1s"`
	Within2s    float64 `json:"within_2s"`
	MeanMs      float64 `json:"mean_ms"`
}

// cdfRow is the fraction of deliveries within LeSeconds.
type cdfRow struct {
	LeSeconds float64  `json:"le_s"`
	Receipts  float64  `json:"receipts"`
	Slicerd   *float64 `json:"slicerd,omitempty"`
}

// cdfBounds are slicerd's commit-to-send bucket bounds, where the CDF is
// read.
var cdfBounds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}

// newDistribution summarises receipts (ms after the commit, sorted) and,
// when h has observations, slicerd's histogram of the same deliveries.
func newDistribution(receipts []float64, from string, h *benchproc.Histogram) *distribution {
	d := &distribution{CommitFrom: from}
	within := func(ms float64) float64 {
		if len(receipts) == 0 {
			return 0
		}
		n, _ := slices.BinarySearch(receipts, math.Nextafter(ms, math.Inf(1)))
		return float64(n) / float64(len(receipts))
	}
	if n := len(receipts); n > 0 {
		sum := 0.0
		for _, x := range receipts {
			sum += x
		}
		d.Receipts = quantile{N: n, P50Ms: pct(receipts, 0.5), P95Ms: pct(receipts, 0.95), P99Ms: pct(receipts, 0.99),
			Within100ms: within(100), Within1s: within(1000), Within2s: within(2000), MeanMs: sum / float64(n)}
	}
	if h != nil && h.Count > 0 {
		d.Slicerd = &quantile{N: int(h.Count), P50Ms: 1e3 * h.Quantile(0.5), P95Ms: 1e3 * h.Quantile(0.95), P99Ms: 1e3 * h.Quantile(0.99),
			Within100ms: h.Within(0.1), Within1s: h.Within(1), Within2s: h.Within(2), MeanMs: 1e3 * h.Sum / h.Count}
	}
	for _, le := range cdfBounds {
		row := cdfRow{LeSeconds: le, Receipts: within(le * 1e3)}
		if d.Slicerd != nil {
			v := h.Within(le)
			row.Slicerd = &v
		}
		d.CDF = append(d.CDF, row)
	}
	return d
}

func (d *distribution) print(w io.Writer) {
	line := func(what string, q quantile, est string) {
		fmt.Fprintf(w, "  %-34s %9d  p50 %8.1f ms  p95 %8.1f ms  p99 %8.1f ms%s  within 100 ms %6.2f%%  1 s %6.2f%%  2 s %6.2f%%\n",
			what, q.N, q.P50Ms, q.P95Ms, q.P99Ms, est, 100*q.Within100ms, 100*q.Within1s, 100*q.Within2s)
	}
	fmt.Fprintf(w, "distribution latency over every stream and timed generation (commit time from the %s):\n", d.CommitFrom)
	line("subscribers, commit → receipt", d.Receipts, "")
	if d.Slicerd != nil {
		line("slicerd, commit → send (buckets)", *d.Slicerd, " (est.)")
	}
	fmt.Fprintf(w, "  CDF: %-10s %-12s %s\n", "≤ seconds", "subscribers", "slicerd")
	for _, r := range d.CDF {
		sd := "-"
		if r.Slicerd != nil {
			sd = fmt.Sprintf("%.4f", *r.Slicerd)
		}
		fmt.Fprintf(w, "       %-10g %-12.4f %s\n", r.LeSeconds, r.Receipts, sd)
	}
}

// killReport is what -kill measured.
type killReport struct {
	Generation uint64  `json:"generation"` // the first without the killed task
	CommitMs   float64 `json:"commit_ms"`  // from the kill to its commit
	P99Ms      float64 `json:"p99_ms"`     // from the commit to the streams
	AllMs      float64 `json:"all_ms"`
	Received   int     `json:"received"`
	// From slicerd's log, about members other than the killed task.
	Suspicions    int `json:"suspicions"`
	FalseFailures int `json:"false_failures"`
}

// killTask SIGKILLs the victim's process and times its detection.
func killTask(ctx context.Context, victim *taskProcess, subs *subscribers, commits *commitLog, timeout time.Duration) (*killReport, error) {
	suspected, failed := commits.others(victimName)
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		return nil, fmt.Errorf("kill task %s: %w", victimName, err)
	}
	next, err := subs.waitFor(func(a *assign.Assignment) bool {
		_, ok := a.TaskIndex(victimName)
		return !ok
	}, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("after killing %s: %w", victimName, err)
	}
	werr := subs.waitAll(next.Generation, timeout)
	at, err := commits.wait(next.Generation, 30*time.Second)
	if err != nil {
		return nil, err
	}
	got := subs.receipts(next.Generation)
	lat := make([]float64, 0, len(got))
	for _, t := range got {
		lat = append(lat, float64(t-at.UnixNano())/1e6)
	}
	slices.Sort(lat)
	s2, f2 := commits.others(victimName)
	k := &killReport{Generation: next.Generation, CommitMs: float64(at.Sub(killed).Microseconds()) / 1e3, Received: len(got),
		Suspicions: s2 - suspected, FalseFailures: f2 - failed}
	if len(lat) > 0 {
		k.P99Ms, k.AllMs = pct(lat, 0.99), lat[len(lat)-1]
	}
	return k, werr
}

// levels compares the two levels of a fan-out tree.
type levels struct {
	Relays         int     `json:"relays"`
	DirectStreams  int     `json:"direct_streams"`
	RelayedStreams int     `json:"relayed_streams"`
	DirectP50Ms    float64 `json:"direct_p50_ms"`
	DirectP99Ms    float64 `json:"direct_p99_ms"`
	RelayedP50Ms   float64 `json:"relayed_p50_ms"`
	RelayedP99Ms   float64 `json:"relayed_p99_ms"`
	// AddedP99Ms is what a level adds at the 99th percentile.
	AddedP99Ms float64 `json:"added_p99_ms"`
}

// killRelayReport is the generation made after a relay was killed.
type killRelayReport struct {
	Generation uint64 `json:"generation"`
	// Streams is how many streams the killed relay served; Reconnected
	// how many streams opened again elsewhere (each once, when all is
	// well); Received how many streams of all had the generation. Moved
	// counts the relay's streams (by their first address) that had moved
	// to another address before the kill.
	Streams     int     `json:"streams"`
	Moved       int     `json:"moved"`
	Reconnected int64   `json:"reconnected"`
	Received    int     `json:"received"`
	P99Ms       float64 `json:"p99_ms"`
	AllMs       float64 `json:"all_ms"`
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "%s\n", r.Command)
	fmt.Fprintf(w, "%d streams over %d connections (%s client), gzip accepted %v, deltas %v, changes by %s; every stream had the first assignment after %.1f s\n",
		r.Streams, r.Conns, r.Client, r.Gzip, r.Deltas, r.Change, r.OpenSeconds)
	fmt.Fprintf(w, "%-10s %7s %8s %9s %9s %9s %9s %9s %9s %9s %11s %11s\n", "generation", "slices", "bytes", "full", "p50_ms", "p99_ms", "all_ms", "received", "rss_mib", "cpu_ms", "harness_cpu", "write_calls")
	for _, g := range r.Generations {
		fmt.Fprintf(w, "%-10d %7d %8d %9d %9.1f %9.1f %9.1f %9d %9.0f %9.0f %11.0f %11d\n", g.Generation, g.Slices, g.Bytes, g.FullBytes, g.P50Ms, g.P99Ms, g.AllMs, g.Received, g.RSSMiB, g.CPUMs, g.HarnessCPUMs, g.WriteCalls)
	}
	fmt.Fprintf(w, "median: commit → stream p50 %.1f ms, p99 %.1f ms, until all %.1f ms; slicerd CPU per update %.0f ms; RSS up to %.0f MiB; lost %d\n",
		r.P50Ms, r.P99Ms, r.AllMs, r.CPUMs, r.RSSMiB, r.Lost)
	if r.Redials > 0 {
		fmt.Fprintf(w, "connections dialled again after slicerd closed them: %d\n", r.Redials)
	}
	if r.Distribution != nil {
		r.Distribution.print(w)
	}
	if p := r.PerStream; p != nil {
		fmt.Fprintf(w, "slicerd per stream (of %d): %.2f goroutines, %.0f bytes of goroutine stack, %.0f bytes of heap in use\n",
			p.Streams, p.Goroutines, p.StackBytes, p.HeapBytes)
	}
	if l := r.Levels; l != nil {
		fmt.Fprintf(w, "levels: %d streams on slicerd, commit → receipt p50 %.1f ms p99 %.1f ms; %d streams on %d relays, p50 %.1f ms p99 %.1f ms; a level adds %.1f ms at p99\n",
			l.DirectStreams, l.DirectP50Ms, l.DirectP99Ms, l.RelayedStreams, l.Relays, l.RelayedP50Ms, l.RelayedP99Ms, l.AddedP99Ms)
	}
	if k := r.KillRelay; k != nil {
		fmt.Fprintf(w, "kill relay-1: its %d streams reconnected %d times (%d others had moved away before); generation %d at %d of %d streams, p99 %.1f ms, all %.1f ms after the commit\n",
			k.Streams, k.Reconnected, k.Moved, k.Generation, k.Received, r.Streams, k.P99Ms, k.AllMs)
	}
	if k := r.Kill; k != nil {
		fmt.Fprintf(w, "kill %s: generation %d without it committed %.0f ms after the kill; commit → stream p99 %.1f ms, all %.1f ms (%d streams); slicerd suspected %d and failed %d live members meanwhile\n",
			victimName, k.Generation, k.CommitMs, k.P99Ms, k.AllMs, k.Received, k.Suspicions, k.FalseFailures)
	}
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
	rebalance := "0s"
	if o.change == "load" {
		rebalance = "2s"
	}
	sargs := []string{"--node-name", "slicerd-0", "--data-dir", dataDir,
		"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local",
		"--rebalance-delay", "100ms", "--startup-grace", "500ms", "--rebalance-interval", rebalance,
		"--max-connections", strconv.Itoa(o.conns*4 + 1024)}
	if o.metrics {
		sargs = append(sargs, "--metrics-addr", "127.0.0.1:0")
	}
	sargs = append(sargs, o.slicerdFlags...)
	logPath := filepath.Join(logDir, "slicerd.log")
	var env []string
	if o.slicerdGOGC != 0 {
		env = append(env, "GOGC="+strconv.Itoa(o.slicerdGOGC))
	}
	if o.memLimit != "" {
		env = append(env, "GOMEMLIMIT="+o.memLimit)
	}
	sd, started, err := benchproc.StartSlicerdEnv("slicerd", logPath, o.slicerd, env, sargs, 60*time.Second)
	if err != nil {
		return nil, err
	}
	defer benchproc.StopAll([]*benchproc.Proc{sd}, 10*time.Second)
	pid := sd.Cmd.Process.Pid
	say("slicerd pid %d rpc %s; logs in %s", pid, started.RPC, logDir)
	scrape := func() (benchproc.Samples, error) { return nil, nil }
	if o.metrics {
		addr, err := benchproc.LoggedMetricsAddr(logPath, 10*time.Second)
		if err != nil {
			return nil, err
		}
		say("slicerd metrics at http://%s/metrics", addr)
		scrape = func() (benchproc.Samples, error) {
			sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
			defer scancel()
			return benchproc.Scrape(sctx, "http://"+addr+"/metrics")
		}
	}
	commits, err := followCommits(ctx, logPath)
	if err != nil {
		return nil, err
	}

	// The tasks run in processes of their own, so that the streams'
	// load on this one cannot starve their gossip; t2 alone in one, so
	// that it can be killed.
	tasks, err := startTaskProcess(started.Gossip, o.change, o.hotPercent, taskNames[:2])
	if err != nil {
		return nil, err
	}
	defer tasks.stop()
	victim, err := startTaskProcess(started.Gossip, o.change, o.hotPercent, taskNames[2:])
	if err != nil {
		return nil, err
	}
	defer victim.stop()
	admin := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(started.RPC))
	redundancy := uint32(1)
	setRedundancy := func(r uint32) error {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		defer ccancel()
		cfg := &slicerv1.JobConfig{MinRedundancy: r, MaxRedundancy: r}
		if o.slices > 0 {
			// Keep the seeded slices: no merging, and no splitting
			// beyond their number.
			cfg.MaxSlicesPerTask, cfg.MinSlicesPerTask = assign.MaxSlicesPerTaskLimit, assign.MaxSlicesPerTaskLimit
			cfg.MaxSlices = uint32(o.slices)
		}
		_, err := admin.SetJobConfig(cctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: cfg}))
		return err
	}
	if err := setRedundancy(redundancy); err != nil {
		return nil, fmt.Errorf("set the job's configuration: %w", err)
	}

	addrs := []string{started.RPC}
	var relays []*benchproc.Proc
	for i := 1; i <= o.relays; i++ {
		name := fmt.Sprintf("relay-%d", i)
		rargs := []string{"--node-name", name, "--role", "distributor", "--distributor-upstream", started.RPC,
			"--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--join", started.Gossip, "--gossip-profile", "local",
			"--max-connections", strconv.Itoa(o.conns*4 + 1024)}
		rp, rs, err := benchproc.StartSlicerdEnv(name, filepath.Join(logDir, name+".log"), o.slicerd, env, append(rargs, o.slicerdFlags...), 60*time.Second)
		if err != nil {
			return nil, err
		}
		defer benchproc.StopAll([]*benchproc.Proc{rp}, 10*time.Second)
		relays = append(relays, rp)
		addrs = append(addrs, rs.RPC)
		say("%s pid %d rpc %s, relaying from %s", name, rp.Cmd.Process.Pid, rs.RPC, started.RPC)
	}
	subs := newSubscribers(o.streams, o.conns, addrs, o.gzip, o.deltas)
	if o.client == "h2" {
		subs.rawAddr, subs.conns = started.RPC, o.conns
	}
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
	rep := &report{Streams: o.streams, Conns: o.conns, Slices: len(first.Slices), Gzip: o.gzip, Deltas: o.deltas, Change: o.change, Client: o.client,
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

	before, err := scrape()
	if err != nil {
		return nil, err
	}
	// Every stream's receipt of every timed generation, in ms after its
	// commit: the commit time each message carries, or slicerd's log
	// line when it carries none.
	var receipts, direct, relayed []float64
	commitFrom := "message"
	for range o.generations {
		cpu0, own0, w0 := benchproc.CPUTime(pid), benchproc.CPUTime(os.Getpid()), benchproc.WriteCalls(pid)
		if o.change == "redundancy" {
			redundancy = 3 - redundancy
			if err := setRedundancy(redundancy); err != nil {
				return nil, fmt.Errorf("switch redundancy: %w", err)
			}
		}
		// A load decision comes when the Assigner makes it; the CPU
		// measured then includes the wait, at least the rebalance
		// interval, in which slicerd mostly idles.
		next, err := subs.waitAfter(ctx, gen, 60*time.Second)
		if err != nil {
			return nil, err
		}
		gen = next.Generation
		werr := subs.waitAll(gen, o.timeout)
		cpu, own, writes := benchproc.CPUTime(pid)-cpu0, benchproc.CPUTime(os.Getpid())-own0, benchproc.WriteCalls(pid)-w0
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
		stamp := subs.committed(gen)
		if stamp == 0 {
			stamp, commitFrom = at.UnixNano(), "log"
		}
		for _, t := range got {
			receipts = append(receipts, float64(t-stamp)/1e6)
		}
		if o.relays > 0 {
			for i, t := range subs.receiptsByStream(gen) {
				if t == 0 {
					continue
				}
				if subs.at[i].Load() == 0 {
					direct = append(direct, float64(t-stamp)/1e6)
				} else {
					relayed = append(relayed, float64(t-stamp)/1e6)
				}
			}
		}
		rss, _ := benchproc.Memory(pid)
		g := generation{Generation: gen, Bytes: subs.size(gen), FullBytes: proto.Size(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(next), CommittedUnixNano: subs.committed(gen)}),
			Slices: len(next.Slices), Received: len(got), RSSMiB: float64(rss) / 1024, CPUMs: float64(cpu) / 1e6, HarnessCPUMs: float64(own) / 1e6, WriteCalls: writes}
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
	after, err := scrape()
	if err != nil {
		return nil, err
	}
	var hist *benchproc.Histogram
	if o.metrics {
		const name = "slicerd_distributor_commit_to_send_seconds"
		h := after.Histogram(name).Sub(before.Histogram(name))
		hist = &h
		rep.PerStream = newPerStream(after, o.streams/(o.relays+1))
		// The tasks' Slicelets watch the job too.
		if want := float64(o.generations * (o.streams + len(taskNames))); h.Count != want {
			say("slicerd timed %.0f sends of the timed generations; %d generations × (%d streams + %d tasks) = %.0f",
				h.Count, o.generations, o.streams, len(taskNames), want)
		}
	}
	slices.Sort(receipts)
	rep.Distribution = newDistribution(receipts, commitFrom, hist)
	if o.relays > 0 {
		slices.Sort(direct)
		slices.Sort(relayed)
		l := &levels{Relays: o.relays}
		for i := range o.streams {
			if subs.at[i].Load() == 0 {
				l.DirectStreams++
			} else {
				l.RelayedStreams++
			}
		}
		if len(direct) > 0 && len(relayed) > 0 {
			l.DirectP50Ms, l.DirectP99Ms = pct(direct, 0.5), pct(direct, 0.99)
			l.RelayedP50Ms, l.RelayedP99Ms = pct(relayed, 0.5), pct(relayed, 0.99)
			l.AddedP99Ms = l.RelayedP99Ms - l.DirectP99Ms
		}
		rep.Levels = l
	}
	if o.killRelay {
		k := &killRelayReport{}
		for i := range o.streams {
			switch {
			case subs.at[i].Load() == 1:
				k.Streams++
			case subs.home(i) == 1:
				k.Moved++
			}
		}
		before := subs.reconnects.Load()
		if err := relays[0].Cmd.Process.Kill(); err != nil {
			return nil, err
		}
		say("relay-1 killed")
		redundancy = 3 - redundancy
		if err := setRedundancy(redundancy); err != nil {
			return nil, fmt.Errorf("switch redundancy: %w", err)
		}
		next, err := subs.waitAfter(ctx, gen, 60*time.Second)
		if err != nil {
			return nil, err
		}
		k.Generation = next.Generation
		werr := subs.waitAll(next.Generation, o.timeout)
		got := subs.receipts(next.Generation)
		k.Received, k.Reconnected = len(got), subs.reconnects.Load()-before
		if stamp := subs.committed(next.Generation); stamp != 0 && len(got) > 0 {
			lat := make([]float64, 0, len(got))
			for _, t := range got {
				lat = append(lat, float64(t-stamp)/1e6)
			}
			slices.Sort(lat)
			k.P99Ms, k.AllMs = pct(lat, 0.99), lat[len(lat)-1]
		}
		rep.KillRelay = k
		say("kill relay-1: %d of its %d streams reconnected; generation %d at %d of %d streams", k.Reconnected, k.Streams, k.Generation, k.Received, o.streams)
		if werr != nil {
			say("kill relay-1: %v", werr)
		}
	}
	if o.kill {
		k, err := killTask(ctx, victim, subs, commits, o.timeout)
		if err != nil {
			return nil, err
		}
		rep.Kill = k
		say("kill: detected and reassigned %.0f ms after the kill; at every stream %.0f ms after the commit; %d suspicions, %d failures of live members",
			k.CommitMs, k.AllMs, k.Suspicions, k.FalseFailures)
	}
	var p50, p99, all, cpu []float64
	for _, g := range rep.Generations {
		p50, p99, all, cpu = append(p50, g.P50Ms), append(p99, g.P99Ms), append(all, g.AllMs), append(cpu, g.CPUMs)
		rep.RSSMiB = max(rep.RSSMiB, g.RSSMiB)
	}
	rep.P50Ms, rep.P99Ms, rep.AllMs, rep.CPUMs = median(p50), median(p99), median(all), median(cpu)
	rep.Redials = subs.redials.Load()
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

// taskNames are the job's tasks; -kill kills the last, victimName.
var taskNames = []string{"t0", "t1", "t2"}

const victimName = "t2"

// taskAddr is the address task tN advertises; nothing listens there, as
// no request is routed.
func taskAddr(name string) string { return "127.0.0.1:1900" + name[len(name)-1:] }

// tasksEnv is set in the environment of the tasks process, which tells a
// test binary to act as the harness.
const tasksEnv = "FANOUT_TASKS"

// taskProcess is a process running some of the job's tasks.
type taskProcess struct {
	cmd  *exec.Cmd
	stop func()
}

// startTaskProcess starts this program in mode tasks, running the named
// tasks, and waits until they have joined.
func startTaskProcess(join, change string, hotPercent int, names []string) (*taskProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-mode", "tasks", "-join", join, "-change", change, "-hot-percent", strconv.Itoa(hotPercent), "-tasks", strings.Join(names, ","))
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
	return &taskProcess{cmd: cmd, stop: stop}, nil
}

// runTasks runs the job's Slicelets, joining slicerd at join, until stdin
// closes; it prints "ready" once they all joined. With hotPercent above 0
// they report load (driveLoad).
func runTasks(join string, names []string, hotPercent int, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var lets []*slicelet.Slicelet
	for _, name := range names {
		if !slices.Contains(taskNames, name) {
			return fmt.Errorf("unknown task %q: the job's tasks are %v", name, taskNames)
		}
		g := gossip.DefaultConfig()
		g.Profile = gossip.ProfileLocal
		s, err := slicelet.New(slicelet.Config{Job: "kv", Task: name, Addr: taskAddr(name), Join: []string{join}, Gossip: g, LoadWindow: time.Second})
		if err != nil {
			return err
		}
		lets = append(lets, s)
		wg.Go(func() { _ = s.Run(ctx) })
		select {
		case <-s.Joined():
		case <-time.After(60 * time.Second):
			return fmt.Errorf("task %s did not join gossip within 60s", name)
		}
	}
	if hotPercent > 0 {
		wg.Go(func() { driveLoad(ctx, lets, hotPercent) })
	}
	fmt.Fprintln(stdout, "ready")
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// driveLoad reports load on the tasks until ctx ends: every 100 ms, 300
// requests on keys spread over the key space and 300 on a hot spot of
// hotPercent of it, which moves to another place every 15 s. Each request
// counts on the task that owns its key, as the task serving it would count
// it.
func driveLoad(ctx context.Context, lets []*slicelet.Slicelet, hotPercent int) {
	r := rand.New(rand.NewPCG(1, 2))
	width := assign.KeySpaceEnd / 100 * assign.SliceKey(hotPercent)
	key := func() string { return strconv.FormatUint(r.Uint64(), 36) }
	hotKey := func(start assign.SliceKey) string {
		for {
			k := key()
			if h := assign.HashString(k); h >= start && h-start < width {
				return k
			}
		}
	}
	report := func(k string) {
		for _, s := range lets {
			if s.IsAffinitizedKeyString(k) {
				_ = s.ReportLoadString(k, 1)
				return
			}
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var hot assign.SliceKey
	var moved time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if now.Sub(moved) >= 15*time.Second {
				hot, moved = assign.SliceKey(r.Uint64N(uint64(assign.KeySpaceEnd-width)+1)), now
			}
		}
		for range 300 {
			report(key())
			report(hotKey(hot))
		}
	}
}

// commitLog follows slicerd's JSON log for "assignment committed" lines,
// and for gossip's suspicions and failures of members.
type commitLog struct {
	mu      sync.Mutex
	at      map[uint64]time.Time
	changed chan struct{}
	// suspected and failed count, by member name, memberlist's
	// "Suspect NAME has failed" and serf's "EventMemberFailed: NAME".
	suspected, failed map[string]int
}

// others counts suspicions and failures of members other than task.
func (c *commitLog) others(task string) (suspected, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, n := range c.suspected {
		if name != gossip.TaskMemberName("kv", task) {
			suspected += n
		}
	}
	for name, n := range c.failed {
		if name != gossip.TaskMemberName("kv", task) {
			failed += n
		}
	}
	return suspected, failed
}

func followCommits(ctx context.Context, path string) (*commitLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	c := &commitLog{at: map[uint64]time.Time{}, changed: make(chan struct{}), suspected: map[string]int{}, failed: map[string]int{}}
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
			if json.Unmarshal(partial, &rec) == nil {
				c.mu.Lock()
				switch f := strings.Fields(rec.Msg); {
				case rec.Msg == "assignment committed":
					c.at[rec.Generation] = rec.Time
					close(c.changed)
					c.changed = make(chan struct{})
				case len(f) >= 2 && f[0] == "Suspect":
					c.suspected[f[1]]++
				case len(f) >= 2 && f[0] == "EventMemberFailed:":
					c.failed[f[1]]++
				}
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
	n     int
	first slicerv1connect.DistributorServiceClient // stream 0's
	// clients[a] are the connections to addrs[a]: slicerd, then its
	// relays (-relays). Stream i starts on addrs[home(i)] and moves to
	// the next address when its stream fails.
	clients    [][]slicerv1connect.DistributorServiceClient
	reconnects atomic.Int64 // streams that failed over to the next address
	// at is the index of the address each stream last opened on.
	at      []atomic.Int32
	hcs     []*http.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	streams []streamLog
	// counts[g % len] counts the streams that had generation g; opened
	// those that had any.
	counts [1024]atomic.Int64
	opened atomic.Int64
	// redials counts the -client h2 connections that failed and were
	// dialled again.
	redials atomic.Int64

	deltas bool
	// rawAddr is slicerd's address when streams 1 and up are read by
	// h2Conns rather than connect-go clients (-client h2).
	rawAddr string
	conns   int

	mu      sync.Mutex
	newest  *assign.Assignment // as stream 0 has it
	sizes   map[uint64]int     // bytes of the message that brought stream 0 each generation
	stamps  map[uint64]int64   // committed_unix_nano of the message that brought stream 0 each generation
	changed chan struct{}
}

// streamLog is one stream's receipts.
type streamLog struct {
	mu  sync.Mutex
	got map[uint64]int64 // generation → receipt time, Unix ns
}

func newSubscribers(n, conns int, addrs []string, gzip, deltas bool) *subscribers {
	addr := addrs[0]
	s := &subscribers{n: n, deltas: deltas, streams: make([]streamLog, n), at: make([]atomic.Int32, n), sizes: map[uint64]int{}, stamps: map[uint64]int64{}, changed: make(chan struct{})}
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
	s.clients = make([][]slicerv1connect.DistributorServiceClient, len(addrs))
	for c := range conns {
		a := c % len(addrs)
		hc := api.NewH2CClient()
		s.hcs = append(s.hcs, hc)
		s.clients[a] = append(s.clients[a], slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addrs[a]), opts...))
	}
	return s
}

// home is the index of the address stream i opens first.
func (s *subscribers) home(i int) int { return i % len(s.clients) }

// generationCodec decodes the generation and incarnation of a
// WatchAssignmentResponse's assignment or delta only, skipping the rest.
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
	// The field numbers of the generation and incarnation in an
	// Assignment (field 1) and in an AssignmentDelta (field 2).
	fields := map[protowire.Number][2]protowire.Number{1: {2, 5}, 2: {4, 2}}
	a := &slicerv1.Assignment{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		f, ok := fields[num]
		if !ok || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case num == f[0] && typ == protowire.VarintType:
				g, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return protowire.ParseError(n)
				}
				a.Generation = g
			case num == f[1] && typ == protowire.BytesType:
				a.Incarnation = string(v)
			}
			return nil
		})
	})
	resp.Assignment = a
	return err
}

// generationOf returns the generation and incarnation a message brings.
func generationOf(m *slicerv1.WatchAssignmentResponse) (uint64, string) {
	if d := m.GetDelta(); d != nil {
		return d.GetGeneration(), d.GetIncarnation()
	}
	return m.GetAssignment().GetGeneration(), m.GetAssignment().GetIncarnation()
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
	a := s.home(i)
	clientAt := func(a int) slicerv1connect.DistributorServiceClient {
		cs := s.clients[a]
		return cs[(i/len(s.clients))%len(cs)]
	}
	client := clientAt(a)
	if i == 0 {
		client = s.first
	}
	// failover moves the stream to the next address after a failure.
	failover := func() {
		if i == 0 || len(s.clients) == 1 {
			return
		}
		a = (a + 1) % len(s.clients)
		client = clientAt(a)
		s.reconnects.Add(1)
	}
	var known uint64
	var inc string
	var held *assign.Assignment // stream 0's, which deltas apply to
	var deltas uint32
	if s.deltas {
		deltas = api.DeltaVersion
	}
	for ctx.Err() == nil {
		s.at[i].Store(int32(a))
		stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: known, KnownIncarnation: inc, DeltaVersion: deltas}))
		if err != nil {
			failover()
			_ = benchproc.Sleep(ctx, 100*time.Millisecond)
			continue
		}
		for stream.Receive() {
			now := time.Now().UnixNano()
			known, inc = generationOf(stream.Msg())
			s.record(i, known, now)
			if i == 0 {
				a, err := api.Receive(held, stream.Msg())
				if err != nil {
					fmt.Fprintf(os.Stderr, "fanout: stream 0: %v\n", err)
					known, inc = 0, ""
					break
				}
				held = a
				s.mu.Lock()
				s.newest = a
				s.sizes[a.Generation] = proto.Size(stream.Msg())
				s.stamps[a.Generation] = stream.Msg().GetCommittedUnixNano()
				close(s.changed)
				s.changed = make(chan struct{})
				s.mu.Unlock()
			}
		}
		stream.Close()
		if ctx.Err() == nil {
			failover()
			_ = benchproc.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

// receiptsByStream returns each stream's receipt time of gen, 0 for a
// stream that did not have it.
func (s *subscribers) receiptsByStream(gen uint64) []int64 {
	out := make([]int64, s.n)
	for i := range s.streams {
		l := &s.streams[i]
		l.mu.Lock()
		out[i] = l.got[gen]
		l.mu.Unlock()
	}
	return out
}

// record notes that stream i received gen at now (Unix ns).
func (s *subscribers) record(i int, gen uint64, now int64) {
	log := &s.streams[i]
	log.mu.Lock()
	if log.got == nil {
		log.got = map[uint64]int64{}
		s.opened.Add(1)
	}
	_, seen := log.got[gen]
	if !seen {
		log.got[gen] = now
	}
	log.mu.Unlock()
	if !seen {
		s.counts[gen%uint64(len(s.counts))].Add(1)
	}
}

// committed is the commit time (Unix ns) the message that brought stream
// 0 gen carried; 0 when it carried none.
func (s *subscribers) committed(gen uint64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stamps[gen]
}

// size is the bytes of the message that brought stream 0 gen.
func (s *subscribers) size(gen uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sizes[gen]
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
	if s.rawAddr != "" {
		s.startRaw(ctx)
		return
	}
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
