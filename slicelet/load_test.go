package slicelet

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

func TestReportLoadValidation(t *testing.T) {
	s := newOffline(t, "a")
	for _, tc := range []struct {
		cost float64
		ok   bool
	}{
		{0, true},
		{1, true},
		{0.25, true},
		{assign.MaxLoad, true},
		{math.NaN(), false},
		{math.Inf(1), false},
		{math.Inf(-1), false},
		{-1, false},
		{-math.SmallestNonzeroFloat64, false},
		{math.Nextafter(assign.MaxLoad, math.Inf(1)), false},
	} {
		before := s.RejectedLoadReports()
		err1 := s.ReportLoad([]byte("k"), tc.cost)
		err2 := s.ReportLoadString("k", tc.cost)
		for _, err := range []error{err1, err2} {
			if tc.ok && err != nil {
				t.Errorf("ReportLoad(%g) = %v, want nil", tc.cost, err)
			}
			if !tc.ok && !errors.Is(err, assign.ErrInvalidLoad) {
				t.Errorf("ReportLoad(%g) = %v, want ErrInvalidLoad", tc.cost, err)
			}
		}
		want := before
		if !tc.ok {
			want += 2
		}
		if got := s.RejectedLoadReports(); got != want {
			t.Errorf("ReportLoad(%g): rejected counter %d, want %d", tc.cost, got, want)
		}
	}
}

// expectedLoad sums costs per owned slice of a and for unowned keys.
func expectedLoad(a *assign.Assignment, task string, keys []string, costs []float64) (owned map[int]float64, unowned float64) {
	owned = make(map[int]float64)
	for i, k := range keys {
		idx := a.Find(assign.HashString(k))
		if hasTask(a.Slices[idx].Tasks, task) {
			owned[idx] += costs[i]
		} else {
			unowned += costs[i]
		}
	}
	return owned, unowned
}

func near(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }

func TestLoadAccumulatesPerSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newOffline(t, "a")
	// Before any assignment every key is unowned.
	if err := s.ReportLoadString("early", 3); err != nil {
		t.Fatal(err)
	}
	a := gridAssignment(rng, 7, 40, []string{"a", "b", "c"})
	s.install(nil, a)

	keys := make([]string, 5000)
	costs := make([]float64, len(keys))
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(rng.IntN(800))
		costs[i] = float64(rng.IntN(10))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 4 {
				if err := s.ReportLoadString(keys[i], costs[i]); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()

	owned, unowned := expectedLoad(a, "a", keys, costs)
	r := s.collect(time.Now())
	if r.generation != 7 {
		t.Errorf("generation %d, want 7", r.generation)
	}
	if err := r.load.Validate(); err != nil {
		t.Fatal(err)
	}
	if !near(r.unowned, unowned+3) {
		t.Errorf("unowned %g, want %g", r.unowned, unowned+3)
	}
	var n int
	for idx, want := range owned {
		if want == 0 {
			continue
		}
		n++
		sl := a.Slices[idx]
		if got := r.load.In(sl.Start, sl.End); !near(got, want) {
			t.Errorf("slice %d [%#x, %#x): load %g, want %g", idx, sl.Start, sl.End, got, want)
		}
	}
	// At most three entries per slice: its candidate key and either side.
	if len(r.load) < n || len(r.load) > 3*n {
		t.Errorf("report has %d entries, want one to three per owned slice with load (%d)", len(r.load), n)
	}
	for _, e := range r.load {
		sl := a.Slices[a.Find(e.Start)]
		if !hasTask(sl.Tasks, "a") || e.End > sl.End {
			t.Errorf("entry [%#x, %#x) is not within an owned slice", e.Start, e.End)
		}
	}
	// The window was reset.
	if r2 := s.collect(time.Now()); len(r2.load) != 0 || r2.unowned != 0 {
		t.Errorf("second window carries %v and unowned %g, want nothing", r2.load, r2.unowned)
	}
}

// TestLoadPinpointsHotKey checks that a slice's dominant key is reported
// as its own one-key entry with its exact load, the rest spread around it,
// and that it stays the candidate while it dominates.
func TestLoadPinpointsHotKey(t *testing.T) {
	s := newOffline(t, "a")
	a := &assign.Assignment{Job: "j", Generation: 1, Tasks: []assign.Task{{Name: "a"}},
		Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{"a"}}}}
	s.install(nil, a)
	h := assign.HashString("hot")
	// A cold key comes first: the candidate must move on to the hot one.
	for _, k := range []string{"cold-1", "hot", "hot", "cold-2"} {
		s.ReportLoadString(k, 1)
	}
	s.collect(time.Now()) // cold-1 had a quarter: dropped as candidate
	for round := range 3 {
		cold := 2.0
		if round > 0 {
			// Another key first: the candidate from the last window stays.
			s.ReportLoadString("cold-2", 1)
			cold++
		}
		s.ReportLoadString("hot", 1)
		s.ReportLoadString("cold-1", 2)
		for range 10 {
			s.ReportLoadString("hot", 1)
		}
		r := s.collect(time.Now())
		if err := r.load.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := r.load.In(h, h+1); !near(got, 11) {
			t.Errorf("round %d: hot key's load %g, want 11; report %v", round, got, r.load)
		}
		left := cold * float64(h) / float64(assign.KeySpaceEnd-1)
		if !near(r.load.Total(), 11+cold) || !near(r.load.In(0, h), left) {
			t.Errorf("round %d: total %g, left of the key %g; want %g and %g; report %v", round, r.load.Total(), r.load.In(0, h), 11+cold, left, r.load)
		}
	}
}

func TestLoadSurvivesAssignmentChangeAndFailedReport(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	s := newOffline(t, "a")
	g1 := gridAssignment(rng, 1, 20, []string{"a", "b"})
	g2 := gridAssignment(rng, 2, 20, []string{"a", "b"})
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	ones := make([]float64, len(keys))
	for i := range ones {
		ones[i] = 1
	}
	s.install(nil, g1)
	for _, k := range keys {
		s.ReportLoadString(k, 1)
	}
	s.install(g1, g2)
	for _, k := range keys {
		s.ReportLoadString(k, 1)
	}
	o1, u1 := expectedLoad(g1, "a", keys, ones)
	o2, u2 := expectedLoad(g2, "a", keys, ones)
	var want float64
	for _, x := range o1 {
		want += x
	}
	for _, x := range o2 {
		want += x
	}
	r := s.collect(time.Now())
	if err := r.load.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.generation != 2 || !near(r.load.Total(), want) || !near(r.unowned, u1+u2) {
		t.Fatalf("report gen %d total %g unowned %g, want gen 2 total %g unowned %g", r.generation, r.load.Total(), r.unowned, want, u1+u2)
	}
	// Every owned report cost 1: the events are the owned load, across
	// the assignment change.
	if float64(r.events) != want {
		t.Fatalf("report counts %d events, want %g", r.events, want)
	}
	s.ReportLoadString("x", math.NaN())
	r.rejected = s.load.rejected.Swap(0)
	s.keep(r)
	r2 := s.collect(time.Now())
	if r2.events != uint64(want*pendingDecay) {
		t.Errorf("after a failed report: %d events, want %d", r2.events, uint64(want*pendingDecay))
	}
	if !near(r2.load.Total(), want*pendingDecay) || !near(r2.unowned, (u1+u2)*pendingDecay) || r2.rejected != 1 {
		t.Errorf("after a failed report: total %g unowned %g rejected %d, want %g, %g, 1",
			r2.load.Total(), r2.unowned, r2.rejected, want*pendingDecay, (u1+u2)*pendingDecay)
	}
}

func TestMergeLoads(t *testing.T) {
	e := func(s, e assign.SliceKey, l float64) assign.LoadEntry {
		return assign.LoadEntry{Start: s, End: e, Load: l}
	}
	got := assign.MergeLoads(
		assign.Load{e(0, 10, 10), e(10, 20, 4)},
		assign.Load{e(5, 15, 2), e(30, 40, 0)},
		assign.Load{e(0, 10, 1)},
	)
	want := assign.Load{e(0, 5, 5.5), e(5, 10, 6.5), e(10, 15, 3), e(15, 20, 2)}
	if len(got) != len(want) {
		t.Fatalf("merge = %v, want %v", got, want)
	}
	for i := range got {
		if got[i].Start != want[i].Start || got[i].End != want[i].End || !near(got[i].Load, want[i].Load) {
			t.Fatalf("merge = %v, want %v", got, want)
		}
	}
}

func TestReportLoadDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := newOffline(t, "a")
	s.install(nil, gridAssignment(rng, 1, 64, []string{"a", "b"}))
	key := []byte("user:42")
	if n := testing.AllocsPerRun(1000, func() {
		s.ReportLoad(key, 1)
		s.ReportLoadString("user:43", 2)
	}); n != 0 {
		t.Errorf("ReportLoad allocates %v times per call", n)
	}
}

func benchSlicelet(b *testing.B) (*Slicelet, [][]byte) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := newOffline(b, "a")
	s.install(nil, gridAssignment(rng, 1, 256, []string{"a", "b", "c"}))
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("user:" + strconv.Itoa(i))
	}
	return s, keys
}

func BenchmarkReportLoad(b *testing.B) { benchReportLoad(b, false) }

// BenchmarkReportLoadMetrics is BenchmarkReportLoad with metrics on, which
// counts every request, and the misrouted ones (two thirds here) apart.
func BenchmarkReportLoadMetrics(b *testing.B) { benchReportLoad(b, true) }

func BenchmarkReportLoadParallel(b *testing.B) { benchReportLoadParallel(b, false) }

func BenchmarkReportLoadParallelMetrics(b *testing.B) { benchReportLoadParallel(b, true) }

func benchReportLoad(b *testing.B, metrics bool) {
	s, keys := benchSlicelet(b)
	if metrics {
		s.metrics = newSliceletMetrics(s)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.ReportLoad(keys[i&1023], 1)
		i++
	}
}

func benchReportLoadParallel(b *testing.B, metrics bool) {
	s, keys := benchSlicelet(b)
	if metrics {
		s.metrics = newSliceletMetrics(s)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(1024)
		for pb.Next() {
			s.ReportLoad(keys[i&1023], 1)
			i++
		}
	})
}

func TestHTTPMiddlewareCountsRequests(t *testing.T) {
	s := newOffline(t, "a")
	served := 0
	h := HTTPMiddleware(s, func(r *http.Request) string { return r.URL.Query().Get("k") },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	for range 5 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/?k=x", nil))
	}
	if r := s.collect(time.Now()); served != 5 || r.unowned != 5 {
		t.Errorf("served %d, counted %g; want 5 and 5", served, r.unowned)
	}
}

type testDistributor struct {
	slicerv1connect.UnimplementedDistributorServiceHandler
}

func (testDistributor) GetAssignment(context.Context, *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	return connect.NewResponse(&slicerv1.GetAssignmentResponse{}), nil
}

func (testDistributor) WatchAssignment(_ context.Context, _ *connect.Request[slicerv1.WatchAssignmentRequest], st *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	return st.Send(&slicerv1.WatchAssignmentResponse{})
}

func TestInterceptorCountsRequests(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	s := newOffline(t, "a")
	a := gridAssignment(rng, 1, 16, []string{"a", "b"})
	s.install(nil, a)
	var keys []string
	key := func(r connect.AnyRequest) string {
		k := r.Header().Get("Slice-Key")
		if m, ok := r.Any().(*slicerv1.GetAssignmentRequest); ok {
			k = m.GetJob()
		}
		keys = append(keys, k)
		return k
	}
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewDistributorServiceHandler(testDistributor{}, connect.WithInterceptors(Interceptor(s, key))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := slicerv1connect.NewDistributorServiceClient(srv.Client(), srv.URL)
	ctx := context.Background()
	for range 3 {
		if _, err := client.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "unary"})); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		req := connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "j"})
		req.Header().Set("Slice-Key", "stream")
		st, err := client.WatchAssignment(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for st.Receive() {
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	srv.Client().CloseIdleConnections()
	if len(keys) != 5 || keys[0] != "unary" || keys[4] != "stream" {
		t.Fatalf("key function saw %q, want 3 unary and 2 stream keys", keys)
	}
	r := s.collect(time.Now())
	var want float64
	for _, k := range keys {
		if !hasTask(a.Slices[a.Find(assign.HashString(k))].Tasks, "a") {
			want++
		}
	}
	if r.load.Total()+r.unowned != 5 || r.unowned != want {
		t.Errorf("counted %g owned and %g unowned, want 5 in all and %g unowned", r.load.Total(), r.unowned, want)
	}
}

// TestInterceptorCountsStreamMessages checks that a client stream of n
// messages counts n units on the key of its headers, and a stream that
// sends nothing counts none.
func TestInterceptorCountsStreamMessages(t *testing.T) {
	s := newOffline(t, "a")
	calls := 0
	key := func(r connect.AnyRequest) string {
		calls++
		return r.Header().Get("Slice-Key")
	}
	const procedure = "/slicelet.test.v1.Test/Upload"
	received := 0
	handler := connect.NewClientStreamHandler(procedure,
		func(_ context.Context, st *connect.ClientStream[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
			for st.Receive() {
				received++
			}
			return connect.NewResponse(&slicerv1.GetAssignmentResponse{}), st.Err()
		}, connect.WithInterceptors(Interceptor(s, key)))
	mux := http.NewServeMux()
	mux.Handle(procedure, handler)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := connect.NewClient[slicerv1.GetAssignmentRequest, slicerv1.GetAssignmentResponse](srv.Client(), srv.URL+procedure)
	ctx := context.Background()
	for _, n := range []int{7, 0, 3} {
		st := client.CallClientStream(ctx)
		st.RequestHeader().Set("Slice-Key", "hot")
		for range n {
			if err := st.Send(&slicerv1.GetAssignmentRequest{Job: "j"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := st.CloseAndReceive(); err != nil {
			t.Fatal(err)
		}
	}
	srv.Client().CloseIdleConnections()
	r := s.collect(time.Now())
	if received != 10 || r.unowned != 10 {
		t.Errorf("handler received %d messages, load counted %g; want 10 and 10", received, r.unowned)
	}
	if calls != 2 {
		t.Errorf("key function called %d times, want once per stream that carried messages (2)", calls)
	}
}

// TestStateBytesReported: with Config.StateBytes the report carries, for
// each owned slice, the bytes the application says it holds for the
// slice's keys; keys the task does not own, non-positive sizes and calls
// after StateBytes returned are left out; a report that could not be sent
// keeps its load but not its bytes, which the next window reads afresh.
func TestStateBytesReported(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	sizes := map[string]int64{}
	for i := range 400 {
		sizes["key-"+strconv.Itoa(i)] = int64(1 + rng.IntN(4096))
	}
	sizes["empty"] = 0
	sizes["negative"] = -10
	var late func(assign.SliceKey, int64)
	s, err := New(Config{Job: "j", Task: "a", Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"},
		MemoryLimit: 1 << 20,
		StateBytes: func(add func(assign.SliceKey, int64)) {
			for k, b := range sizes {
				add(assign.HashString(k), b)
			}
			late = add
		}})
	if err != nil {
		t.Fatal(err)
	}
	a := gridAssignment(rng, 3, 30, []string{"a", "b", "c"})
	s.install(nil, a)
	want := make(map[int]float64)
	for k, b := range sizes {
		if idx := a.Find(assign.HashString(k)); hasTask(a.Slices[idx].Tasks, "a") && b > 0 {
			want[idx] += float64(b)
		}
	}
	r := s.collect(time.Now())
	late(assign.HashString("key-1"), 1<<40) // ignored: StateBytes returned
	if err := r.load.Validate(); err != nil {
		t.Fatal(err)
	}
	var total float64
	for idx, b := range want {
		sl := a.Slices[idx]
		if got := r.load.BytesIn(sl.Start, sl.End); !near(got, b) {
			t.Errorf("slice %d: %g bytes, want %g", idx, got, b)
		}
		total += b
	}
	if got := r.load.BytesIn(0, assign.KeySpaceEnd); !near(got, total) || total == 0 {
		t.Errorf("report has %g bytes in all, want %g (> 0)", got, total)
	}
	if p := r.proto("j", "a"); len(p.GetSlices()) == 0 || p.GetSlices()[0].GetBytes() <= 0 {
		t.Errorf("the request carries no bytes: %v", p.GetSlices())
	}
	// A report that failed: its bytes do not come back with the next.
	for k := range sizes {
		if hasTask(a.Slices[a.Find(assign.HashString(k))].Tasks, "a") {
			s.ReportLoadString(k, 5)
			break
		}
	}
	r = s.collect(time.Now())
	s.keep(r)
	sizes = map[string]int64{}
	if r2 := s.collect(time.Now()); r2.load.BytesIn(0, assign.KeySpaceEnd) != 0 || r2.load.Total() == 0 {
		t.Errorf("after a failed report: %g bytes (want 0), load %g (want the kept load)", r2.load.BytesIn(0, assign.KeySpaceEnd), r2.load.Total())
	}
}

// TestMemoryLimitNeedsStateBytes: a memory limit without StateBytes, or
// out of bounds, is a configuration error that says what to do.
func TestMemoryLimitNeedsStateBytes(t *testing.T) {
	base := Config{Job: "j", Task: "a", Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"}}
	noState := base
	noState.MemoryLimit = 1 << 30
	if _, err := New(noState); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "set StateBytes") {
		t.Errorf("limit without StateBytes: %v", err)
	}
	bad := base
	bad.MemoryLimit, bad.StateBytes = -1, func(func(assign.SliceKey, int64)) {}
	if _, err := New(bad); !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, assign.ErrInvalidMemoryLimit) {
		t.Errorf("negative limit: %v", err)
	}
}

// A load report reads the membership once for each of its versions: the
// view is kept while the node's version stays and read again once a
// member's event moves it, so that an Assigner that joins is reported to.
func TestReportAssignersReadMembershipOncePerVersion(t *testing.T) {
	s := newOffline(t, "a")
	start := func(name string, roles ...gossip.Role) *gossip.Node {
		cfg := gossip.TestConfig(name)
		cfg.Self = gossip.Peer{Roles: roles, RPCAddr: "127.0.0.1:1"}
		if slices.Contains(roles, gossip.RoleTask) {
			cfg.Self.RPCAddr, cfg.Self.Job, cfg.Self.Task = "", "j", name
		}
		n, err := gossip.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Shutdown() })
		return n
	}
	self := start("a", gossip.RoleTask)
	s.node.Store(self)
	a1 := start("assigner-1", gossip.RoleAssigner)
	names := func() []string {
		var out []string
		for _, p := range s.reportAssigners() {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(); len(got) != 0 {
		t.Fatalf("before any Assigner joined: reports to %v", got)
	}
	if _, err := self.Join([]string{a1.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(names(), []string{"assigner-1"}) {
		if time.Now().After(deadline) {
			t.Fatalf("the Assigner that joined is not reported to: %v", names())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		version := self.Version()
		v := s.load.view.of(self)
		s.reportAssigners()
		if self.Version() == version && s.load.view.of(self) != v {
			t.Fatal("the membership was read again at the same version")
		}
	}
}
