package clerk_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const job = "cache"

var tasks = []assign.Task{
	{Name: "t0", Addr: "10.0.0.1:7000"},
	{Name: "t1", Addr: "10.0.0.2:7000"},
	{Name: "t2", Addr: "10.0.0.3:7000"},
}

func newServer(t *testing.T) *clerktest.Server {
	t.Helper()
	s, err := clerktest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func testConfig(addrs ...string) clerk.Config {
	cfg := clerk.DefaultConfig()
	cfg.Job = job
	cfg.Addrs = addrs
	cfg.MinBackoff = 5 * time.Millisecond
	cfg.MaxBackoff = 50 * time.Millisecond
	return cfg
}

// recorder collects OnAssignment calls.
type recorder struct {
	mu    sync.Mutex
	calls [][2]*assign.Assignment
}

func (r *recorder) on(prev, next *assign.Assignment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, [2]*assign.Assignment{prev, next})
}

func (r *recorder) generations() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var g []uint64
	for _, c := range r.calls {
		g = append(g, c[1].Generation)
	}
	return g
}

// start runs a Clerk until the test ends and checks that Run returns nil.
func start(t *testing.T, cfg clerk.Config) *clerk.Clerk {
	t.Helper()
	c, err := clerk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return c
}

func waitGen(t *testing.T, c *clerk.Clerk, gen uint64) {
	t.Helper()
	testwait.For(t, "generation "+strconv.FormatUint(gen, 10), func() bool { return c.Generation() == gen })
}

// checkRouting compares the Clerk's answers with the assignment's.
func checkRouting(t *testing.T, c *clerk.Clerk, a *assign.Assignment) {
	t.Helper()
	for i := range 200 {
		key := "key-" + strconv.Itoa(i)
		s := a.Slices[a.Find(assign.HashString(key))]
		var want []string
		for _, name := range s.Tasks {
			k, _ := a.TaskIndex(name)
			want = append(want, a.Tasks[k].Addr)
		}
		if got := c.AssignedTasksString(key); !slices.Equal(got, want) {
			t.Fatalf("AssignedTasksString(%q) = %v, want %v", key, got, want)
		}
		if got := c.AssignedTasks([]byte(key)); !slices.Equal(got, want) {
			t.Fatalf("AssignedTasks(%q) = %v, want %v", key, got, want)
		}
		if got := c.AssignedTaskNames([]byte(key)); !slices.Equal(got, s.Tasks) {
			t.Fatalf("AssignedTaskNames(%q) = %v, want %v", key, got, s.Tasks)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]clerk.Config{
		"bad job":          {Job: "Bad Job", Addrs: []string{"127.0.0.1:1"}},
		"no address":       {Job: job},
		"negative backoff": {Job: job, Addrs: []string{"127.0.0.1:1"}, MinBackoff: -1},
		"max below min":    {Job: job, Addrs: []string{"127.0.0.1:1"}, MinBackoff: time.Second, MaxBackoff: time.Millisecond},
	} {
		if _, err := clerk.New(cfg); !errors.Is(err, clerk.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := clerk.New(clerk.Config{Job: job, Addrs: []string{"127.0.0.1:1"}}); err != nil {
		t.Errorf("zero timers should mean defaults: %v", err)
	}
}

func TestFirstAssignmentAndUpdates(t *testing.T) {
	srv := newServer(t)
	a1 := clerktest.Uniform(job, 1, tasks, 16)

	var rec recorder
	cfg := testConfig(srv.Addr())
	cfg.OnAssignment = rec.on
	c := start(t, cfg)
	// Published only now: a Clerk that could already have received it
	// would not be one without an assignment.
	if c.AssignedTasksString("k") != nil || c.Assignment() != nil || c.Generation() != 0 {
		t.Fatal("a Clerk without an assignment should answer nil and generation 0")
	}
	srv.Publish(a1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	checkRouting(t, c, a1)

	a2 := clerktest.Uniform(job, 2, tasks[:2], 7)
	srv.Publish(a2)
	waitGen(t, c, 2)
	checkRouting(t, c, a2)
	if got := c.Assignment(); got.Generation != 2 || len(got.Slices) != 7 {
		t.Fatalf("Assignment() = gen %d with %d slices, want gen 2 with 7", got.Generation, len(got.Slices))
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 2 || rec.calls[0][0] != nil || rec.calls[0][1].Generation != 1 ||
		rec.calls[1][0].Generation != 1 || rec.calls[1][1].Generation != 2 {
		t.Fatalf("OnAssignment calls = %v, want (nil,1), (1,2)", rec.calls)
	}
}

func TestIgnoresOlderAndEqualGenerations(t *testing.T) {
	srv := newServer(t)
	srv.Publish(clerktest.Uniform(job, 5, tasks, 4))
	var rec recorder
	cfg := testConfig(srv.Addr())
	cfg.OnAssignment = rec.on
	c := start(t, cfg)
	waitGen(t, c, 5)

	srv.Publish(clerktest.Uniform(job, 3, tasks[:1], 4))
	srv.Publish(clerktest.Uniform(job, 5, tasks[:1], 4))
	newest := clerktest.Uniform(job, 6, tasks[1:], 4)
	srv.Publish(newest)
	waitGen(t, c, 6)
	checkRouting(t, c, newest)
	if g := rec.generations(); !slices.Equal(g, []uint64{5, 6}) {
		t.Fatalf("accepted generations %v, want [5 6]", g)
	}
}

func TestRejectsInvalidAssignments(t *testing.T) {
	srv := newServer(t)
	good := clerktest.Uniform(job, 1, tasks, 4)
	srv.Publish(good)
	var rec recorder
	cfg := testConfig(srv.Addr())
	cfg.OnAssignment = rec.on
	c := start(t, cfg)
	waitGen(t, c, 1)

	gap := api.ToProto(clerktest.Uniform(job, 2, tasks, 4))
	gap.Slices = gap.Slices[1:] // the key space no longer starts at 0
	otherJob := api.ToProto(clerktest.Uniform("other", 3, tasks, 4))
	unknownTask := api.ToProto(clerktest.Uniform(job, 4, tasks, 4))
	unknownTask.Slices[0].Tasks = []string{"ghost"}
	for _, bad := range []*slicerv1.Assignment{gap, otherJob, unknownTask} {
		reqs := len(srv.Requests())
		srv.Send(job, bad)
		// Rejecting drops the stream, so the Clerk comes back.
		testwait.For(t, "reconnect after rejecting", func() bool { return len(srv.Requests()) > reqs })
		if g := c.Generation(); g != 1 {
			t.Fatalf("generation %d after an invalid message, want 1", g)
		}
		checkRouting(t, c, good)
	}
	srv.Publish(clerktest.Uniform(job, 9, tasks, 3))
	waitGen(t, c, 9)
	if g := rec.generations(); !slices.Equal(g, []uint64{1, 9}) {
		t.Fatalf("accepted generations %v, want [1 9]", g)
	}
}

func TestNotFoundUntilJobExists(t *testing.T) {
	srv := newServer(t)
	c := start(t, testConfig(srv.Addr()))
	testwait.For(t, "a few NOT_FOUND attempts", func() bool { return len(srv.Requests()) >= 3 })
	select {
	case <-c.Ready():
		t.Fatal("ready without an assignment")
	default:
	}
	srv.Publish(clerktest.Uniform(job, 1, tasks, 2))
	<-c.Ready()
	waitGen(t, c, 1)
}

func TestFailsOverToNextAddress(t *testing.T) {
	a, b := newServer(t), newServer(t)
	unavailable := newServer(t)
	unavailable.Fail(connect.NewError(connect.CodeUnavailable, errors.New("draining")))
	for _, s := range []*clerktest.Server{a, b, unavailable} {
		s.Publish(clerktest.Uniform(job, 1, tasks, 4))
	}
	c := start(t, testConfig(testnet.FreeAddr(t), unavailable.Addr(), a.Addr(), b.Addr()))
	waitGen(t, c, 1)
	testwait.For(t, "an open stream", func() bool { return a.OpenStreams()+b.OpenStreams() == 1 })

	// Kill whichever server holds the stream; the other one takes over.
	from, to := a, b
	if b.OpenStreams() == 1 {
		from, to = b, a
	}
	from.Close()
	testwait.For(t, "stream on the other server", func() bool { return to.OpenStreams() == 1 })
	to.Publish(clerktest.Uniform(job, 2, tasks, 5))
	waitGen(t, c, 2)
}

func TestBackupWhenDistributorsDown(t *testing.T) {
	backup := newServer(t)
	backup.Publish(clerktest.Uniform(job, 3, tasks, 4))
	distAddr := testnet.FreeAddr(t)
	cfg := testConfig(distAddr)
	cfg.BackupAddrs = []string{backup.Addr()}
	cfg.BackupRecheck = 100 * time.Millisecond
	c := start(t, cfg)
	waitGen(t, c, 3)
	for _, r := range backup.Requests() {
		if r.GetJob() != job {
			t.Fatalf("backup got a request for job %q", r.GetJob())
		}
	}

	// A Distributor comes up where the Clerk expects it; the periodic
	// recheck moves the stream back to it.
	dist, err := clerktest.NewServerAt(distAddr)
	if err != nil {
		t.Skipf("cannot reuse port %s: %v", distAddr, err)
	}
	t.Cleanup(dist.Close)
	dist.Publish(clerktest.Uniform(job, 4, tasks, 4))
	waitGen(t, c, 4)
	testwait.For(t, "stream back on the distributor", func() bool { return dist.OpenStreams() == 1 && backup.OpenStreams() == 0 })
}

func TestReconnectsAfterServerRestart(t *testing.T) {
	srv := newServer(t)
	addr := srv.Addr()
	srv.Publish(clerktest.Uniform(job, 1, tasks, 4))
	c := start(t, testConfig(addr))
	waitGen(t, c, 1)
	srv.Close()

	srv2, err := clerktest.NewServerAt(addr)
	if err != nil {
		t.Skipf("cannot reuse port %s: %v", addr, err)
	}
	t.Cleanup(srv2.Close)
	srv2.Publish(clerktest.Uniform(job, 2, tasks, 4))
	waitGen(t, c, 2)
	reqs := srv2.Requests()
	if len(reqs) == 0 || reqs[0].GetKnownGeneration() != 1 {
		t.Fatalf("first request after the restart = %v, want known_generation 1", reqs)
	}
}

func TestKeepsLastAssignmentWhenAllServersGone(t *testing.T) {
	srv := newServer(t)
	a := clerktest.Uniform(job, 7, tasks, 8)
	srv.Publish(a)
	var resolves atomic.Int64
	cfg := testConfig()
	cfg.Resolver = func() ([]string, []string) {
		resolves.Add(1)
		return []string{srv.Addr()}, nil
	}
	c := start(t, cfg)
	waitGen(t, c, 7)
	srv.Close()
	n := resolves.Load()
	testwait.For(t, "several failed rounds", func() bool { return resolves.Load() >= n+3 })
	if c.Generation() != 7 {
		t.Fatalf("generation %d with every server gone, want 7", c.Generation())
	}
	checkRouting(t, c, a)
}

func TestDroppedStreamReconnects(t *testing.T) {
	srv := newServer(t)
	srv.Publish(clerktest.Uniform(job, 1, tasks, 4))
	c := start(t, testConfig(srv.Addr()))
	waitGen(t, c, 1)
	testwait.For(t, "open stream", func() bool { return srv.OpenStreams() == 1 })
	srv.DropStreams(connect.NewError(connect.CodeUnavailable, errors.New("shutting down")))
	testwait.For(t, "dropped", func() bool { return len(srv.Requests()) >= 2 })
	srv.Publish(clerktest.Uniform(job, 2, tasks, 4))
	waitGen(t, c, 2)
}

func TestRunCancelAndRunTwice(t *testing.T) {
	srv := newServer(t)
	srv.Publish(clerktest.Uniform(job, 1, tasks, 4))
	c, err := clerk.New(testConfig(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	waitGen(t, c, 1)
	if err := c.Run(ctx); !errors.Is(err, clerk.ErrRunning) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// The assignment outlives Run.
	if c.Generation() != 1 || c.AssignedTasksString("k") == nil {
		t.Fatal("assignment lost when Run returned")
	}
}

func TestWaitReadyTimesOut(t *testing.T) {
	c, err := clerk.New(testConfig(testnet.FreeAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.WaitReady(ctx); !errors.Is(err, clerk.ErrNoAssignment) || !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady = %v, want ErrNoAssignment and context.Canceled", err)
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	srv := newServer(t)
	srv.Publish(bigAssignment())
	c := start(t, testConfig(srv.Addr()))
	waitGen(t, c, 1)
	key, skey := []byte("user:12345"), "user:12345"
	var sink int
	for name, f := range map[string]func(){
		"AssignedTasks":       func() { sink += len(c.AssignedTasks(key)) },
		"AssignedTasksString": func() { sink += len(c.AssignedTasksString(skey)) },
		"AssignedTaskNames":   func() { sink += len(c.AssignedTaskNames(key)) },
		"PickTask":            func() { a, _ := c.PickTask(key); sink += len(a) },
		"PickTaskString":      func() { a, _ := c.PickTaskString(skey); sink += len(a) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s allocates %v times per call, want 0", name, n)
		}
	}
	_ = sink
}

// bigAssignment has 100 tasks and 10,000 slices (100 per task) of random
// widths, two tasks per slice.
func bigAssignment() *assign.Assignment {
	rng := rand.New(rand.NewPCG(7, 7))
	a := &assign.Assignment{Job: job, Generation: 1}
	for i := range 100 {
		a.Tasks = append(a.Tasks, assign.Task{Name: fmt.Sprintf("task-%03d", i), Addr: fmt.Sprintf("10.1.%d.%d:7000", i/250, i%250)})
	}
	cuts := map[assign.SliceKey]bool{}
	for len(cuts) < 100*100-1 {
		cuts[1+rng.Uint64N(assign.KeySpaceEnd-1)] = true
	}
	bounds := []assign.SliceKey{0}
	for k := range cuts {
		bounds = append(bounds, k)
	}
	slices.Sort(bounds)
	bounds = append(bounds, assign.KeySpaceEnd)
	for i := 0; i+1 < len(bounds); i++ {
		x, y := rng.IntN(100), rng.IntN(99)
		if y >= x {
			y++
		}
		names := []string{a.Tasks[x].Name, a.Tasks[y].Name}
		slices.Sort(names)
		a.Slices = append(a.Slices, assign.Slice{Start: bounds[i], End: bounds[i+1], Tasks: names})
	}
	return a
}

func benchClerk(b *testing.B) (*clerk.Clerk, [][]byte) { return benchClerkWith(b, nil) }

// benchClerkWith is benchClerk with the Clerk's metrics registered with
// reg, if not nil.
func benchClerkWith(b *testing.B, reg prometheus.Registerer) (*clerk.Clerk, [][]byte) {
	srv, err := clerktest.NewServer()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	srv.Publish(bigAssignment())
	cfg := testConfig(srv.Addr())
	cfg.Registerer = reg
	c, err := clerk.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := c.WaitReady(wctx); err != nil {
		b.Fatal(err)
	}
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("user:" + strconv.Itoa(i*7919))
	}
	return c, keys
}

// BenchmarkAssignedTasks looks up 16-byte-ish keys in an assignment of 100
// tasks × 100 slices each.
func BenchmarkAssignedTasks(b *testing.B) {
	c, keys := benchClerk(b)
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		sink += len(c.AssignedTasks(keys[i&1023]))
		i++
	}
	_ = sink
}

func BenchmarkAssignedTasksParallel(b *testing.B) { benchAssignedTasksParallel(b, nil) }

// BenchmarkAssignedTasksParallelMetrics is BenchmarkAssignedTasksParallel
// with metrics on, which counts every lookup.
func BenchmarkAssignedTasksParallelMetrics(b *testing.B) {
	benchAssignedTasksParallel(b, prometheus.NewRegistry())
}

// BenchmarkAssignedTasksMetrics is BenchmarkAssignedTasks with metrics on.
func BenchmarkAssignedTasksMetrics(b *testing.B) {
	c, keys := benchClerkWith(b, prometheus.NewRegistry())
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		sink += len(c.AssignedTasks(keys[i&1023]))
		i++
	}
	_ = sink
}

func benchAssignedTasksParallel(b *testing.B, reg prometheus.Registerer) {
	c, keys := benchClerkWith(b, reg)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sink, i int
		for pb.Next() {
			sink += len(c.AssignedTasks(keys[i&1023]))
			i++
		}
		_ = sink
	})
}

// TestPickTaskSpreadsOverReplicas checks that PickTask picks every replica
// of a key's slice about equally often and nothing else, so replication
// shares a hot key's load.
func TestPickTaskSpreadsOverReplicas(t *testing.T) {
	srv := newServer(t)
	c := start(t, testConfig(srv.Addr()))
	if _, ok := c.PickTaskString("k"); ok {
		t.Fatal("PickTask answered before the first assignment")
	}
	a := &assign.Assignment{Job: job, Generation: 1,
		Tasks: []assign.Task{{Name: "a", Addr: "10.0.0.1:1"}, {Name: "b", Addr: "10.0.0.2:1"}, {Name: "c", Addr: "10.0.0.3:1"}, {Name: "d"}},
		Slices: []assign.Slice{
			{Start: 0, End: assign.KeySpaceEnd / 2, Tasks: []string{"a", "b", "c"}},
			{Start: assign.KeySpaceEnd / 2, End: assign.KeySpaceEnd, Tasks: []string{"c", "d"}},
		},
	}
	srv.Publish(a)
	waitGen(t, c, 1)
	const n = 30000
	for _, key := range []string{"user:1", "user:2", "user:3", "user:4"} {
		want := c.AssignedTasksString(key)
		got := map[string]int{}
		for range n {
			addr, ok := c.PickTaskString(key)
			if !ok {
				t.Fatalf("PickTaskString(%q) found no task", key)
			}
			got[addr]++
		}
		if pb, _ := c.PickTask([]byte(key)); !slices.Contains(want, pb) {
			t.Errorf("PickTask(%q) = %q, not one of %v", key, pb, want)
		}
		var live []string
		for _, w := range want {
			if w != "" {
				live = append(live, w)
			}
		}
		if len(got) != len(live) {
			t.Fatalf("key %q: picked %v, want each of %q", key, got, live)
		}
		for _, w := range live {
			// Binomial with n/len(live) expected; a third off is far
			// beyond chance.
			if share := float64(got[w]) * float64(len(live)) / n; share < 0.67 || share > 1.33 {
				t.Errorf("key %q: %s picked %d times of %d, want about %d", key, w, got[w], n, n/len(live))
			}
		}
	}
}

func BenchmarkPickTask(b *testing.B) {
	c, keys := benchClerk(b)
	b.ReportAllocs()
	var sink int
	i := 0
	for b.Loop() {
		a, _ := c.PickTask(keys[i&1023])
		sink += len(a)
		i++
	}
	_ = sink
}

func BenchmarkPickTaskParallel(b *testing.B) {
	c, keys := benchClerk(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sink, i int
		for pb.Next() {
			a, _ := c.PickTask(keys[i&1023])
			sink += len(a)
			i++
		}
		_ = sink
	})
}
