package kvcache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/slicelet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testJob = "kv"

// cluster is one in-process slicerd agent, cache tasks with their
// Slicelets, and a Clerk-routed client.
type cluster struct {
	tb         testing.TB
	agent      *roles.Agent
	gossipAddr string
	tasks      map[string]*task
	clerk      *clerk.Clerk
	client     *Client
	hc         *http.Client
	stops      []func()
	// warnings collects the Slicelets' warnings and errors, for a test
	// to print when it fails.
	warnings testlog.Buffer
}

type task struct {
	name   string
	sl     *slicelet.Slicelet
	server *Server
	http   *httptest.Server
	hits   atomic.Int64 // key requests served
	cancel context.CancelFunc
	done   chan error
}

// testGossip is gossip.TestConfig with the default failure-detection
// timers. These tests stop tasks only gracefully, which gossip reports at
// once; millisecond probe timeouts would add nothing but live tasks
// marked failed on a busy machine, and keys moving under the tests' feet.
func testGossip(name string) gossip.Config {
	g := gossip.TestConfig(name)
	d := gossip.DefaultConfig()
	g.ProbeInterval, g.ProbeTimeout, g.SuspicionMult = d.ProbeInterval, d.ProbeTimeout, d.SuspicionMult
	return g
}

func newCluster(tb testing.TB) *cluster {
	tb.Helper()
	cfg := roles.DefaultConfig()
	cfg.NodeName = "slicerd-0"
	cfg.DataDir = tb.TempDir()
	cfg.RPCAddr = "127.0.0.1:0"
	cfg.Gossip = testGossip(cfg.NodeName)
	cfg.RebalanceDelay = 50 * time.Millisecond
	cfg.StartupGrace = 100 * time.Millisecond
	cfg.JoinRetryInterval = 50 * time.Millisecond
	cfg.PullMinBackoff = 10 * time.Millisecond
	cfg.PullMaxBackoff = 200 * time.Millisecond
	agent, err := roles.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c := &cluster{tb: tb, agent: agent, tasks: make(map[string]*task)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	c.stops = append(c.stops, func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("agent: %v", err)
		}
	})
	tb.Cleanup(c.close)
	testwait.For(tb, "the agent's gossip to start", func() bool { return agent.GossipAddr() != "" })
	c.gossipAddr = agent.GossipAddr()

	c.hc = &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	ck, err := clerk.New(clerk.Config{Job: testJob, Addrs: []string{agent.RPCAddr()},
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	cdone := make(chan error, 1)
	go func() { cdone <- ck.Run(cctx) }()
	c.stops = append(c.stops, func() {
		ccancel()
		if err := <-cdone; err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("clerk: %v", err)
		}
		c.hc.CloseIdleConnections()
	})
	c.clerk = ck
	c.client = NewClient(ck, c.hc)
	return c
}

// close stops everything in reverse order of start: tasks, clerk, agent.
func (c *cluster) close() {
	for _, name := range slices.Sorted(maps.Keys(c.tasks)) {
		c.stopTask(name)
	}
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
}

func (c *cluster) startTask(name string) *task { return c.startTaskWith(name, false) }

// startTaskWith starts a task; with handoff, its entries move with their
// keys (WithHandoff, and the Slicelet's ExportState and ImportState).
func (c *cluster) startTaskWith(name string, handoff bool) *task {
	c.tb.Helper()
	ts := httptest.NewUnstartedServer(nil)
	gcfg := testGossip(name)
	var srv atomic.Pointer[Server]
	cfg := slicelet.Config{
		Job:        testJob,
		Task:       name,
		Addr:       ts.Listener.Addr().String(),
		GossipAddr: "127.0.0.1:0",
		Join:       []string{c.gossipAddr},
		Gossip:     gcfg,
		Logger:     slog.New(slog.NewTextHandler(&c.warnings, &slog.HandlerOptions{Level: slog.LevelWarn})).With("task", name),
	}
	var opts []Option
	if handoff {
		cfg.ExportState = func(ctx context.Context, start, end assign.SliceKey, emit func(k, v []byte) error) error {
			return srv.Load().ExportState(ctx, start, end, emit)
		}
		cfg.ImportState = func(k, v []byte) { srv.Load().ImportState(k, v) }
		opts = append(opts, WithHandoff(0))
		ts.Config.Protocols = new(http.Protocols)
		ts.Config.Protocols.SetHTTP1(true)
		ts.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	sl, err := slicelet.New(cfg)
	if err != nil {
		ts.Close()
		c.tb.Fatal(err)
	}
	t := &task{name: name, sl: sl, server: NewServer(sl, nil, opts...), http: ts, done: make(chan error, 1)}
	srv.Store(t.server)
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/kv/") {
			t.hits.Add(1)
		}
		t.server.ServeHTTP(w, r)
	})
	ts.Start()
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go func() { t.done <- sl.Run(ctx) }()
	c.tasks[name] = t
	return t
}

// stopTask stops a task gracefully: its Slicelet leaves gossip, then its
// HTTP server closes.
func (c *cluster) stopTask(name string) {
	t := c.tasks[name]
	delete(c.tasks, name)
	t.cancel()
	if err := <-t.done; err != nil && !errors.Is(err, context.Canceled) {
		c.tb.Errorf("task %s: %v", name, err)
	}
	t.http.Close()
}

func (c *cluster) liveNames() []string { return slices.Sorted(maps.Keys(c.tasks)) }

// waitSettled waits until the Clerk routes on an assignment over exactly
// the live tasks and every task's Slicelet agrees with it on keys.
func (c *cluster) waitSettled(keys []string) {
	c.tb.Helper()
	testwait.For(c.tb, fmt.Sprintf("an assignment over %v that every Slicelet follows", c.liveNames()), func() bool {
		a := c.clerk.Assignment()
		if a == nil || len(a.Tasks) != len(c.tasks) {
			return false
		}
		for _, t := range a.Tasks {
			if c.tasks[t.Name] == nil {
				return false
			}
		}
		for _, k := range keys {
			owner, ok := c.ownerTask(k)
			if !ok {
				return false
			}
			for name, t := range c.tasks {
				if t.sl.IsAffinitizedKeyString(k) != (name == owner) {
					return false
				}
			}
		}
		return true
	})
}

// ownerTask is the name of the task the client routes key to.
func (c *cluster) ownerTask(key string) (string, bool) {
	addr, ok := c.client.Owner(key)
	if !ok {
		return "", false
	}
	for name, t := range c.tasks {
		if t.http.Listener.Addr().String() == addr {
			return name, true
		}
	}
	return "", false
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
	}
	return keys
}

func value(k string) []byte { return []byte("value of " + k) }

func TestCacheRoutesMovesAndRefuses(t *testing.T) {
	c := newCluster(t)
	for i := range 3 {
		c.startTask(fmt.Sprintf("kv-%d", i))
	}
	keys := testKeys(300)
	c.waitSettled(keys)
	ctx := context.Background()

	for _, k := range keys {
		if err := c.client.Put(ctx, k, value(k)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	for _, k := range keys {
		v, ok, err := c.client.Get(ctx, k)
		if err != nil || !ok || !bytes.Equal(v, value(k)) {
			t.Fatalf("get %s = %q, %v, %v; want the value put", k, v, ok, err)
		}
	}

	// Each key is held by exactly the task the Clerk routes it to.
	for _, k := range keys {
		owner, ok := c.ownerTask(k)
		if !ok {
			t.Fatalf("no owner for %s", k)
		}
		for name, tk := range c.tasks {
			if has := tk.server.has(k); has != (name == owner) {
				t.Errorf("key %s: task %s holds it = %v, but the client routes it to %s", k, name, has, owner)
			}
		}
	}
	total := 0
	for _, tk := range c.tasks {
		if tk.server.Len() == 0 {
			t.Errorf("task %s holds no key of %d; the assignment should spread them", tk.name, len(keys))
		}
		total += tk.server.Len()
	}
	if total != len(keys) {
		t.Errorf("tasks hold %d entries in all, want %d", total, len(keys))
	}

	// A request sent straight to a task that does not own the key is refused.
	k := keys[0]
	owner, _ := c.ownerTask(k)
	for name, tk := range c.tasks {
		if name == owner {
			continue
		}
		for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
			resp := c.do(t, method, tk.http.URL+"/kv/"+url.PathEscape(k), strings.NewReader("x"))
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "not assigned to task "+name) {
				t.Errorf("%s %s at non-owner %s: %d %q; want 421 naming the task", method, k, name, resp.StatusCode, body)
			}
		}
	}
	if tk := c.tasks[owner]; tk.server.has(k) != true {
		t.Errorf("misrouted requests changed the owner's entry for %s", k)
	}

	// Stats.
	tk := c.tasks[owner]
	resp := c.do(t, http.MethodGet, tk.http.URL+"/stats", nil)
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st.Task != owner || st.Keys != tk.server.Len() || st.Generation == 0 {
		t.Errorf("stats = %+v; want task %s, %d keys, a generation", st, owner, tk.server.Len())
	}

	// Stop one task: its keys move to the survivors, who start cold.
	before := make(map[string]string, len(keys))
	for _, k := range keys {
		before[k], _ = c.ownerTask(k)
	}
	gen := c.clerk.Assignment().Generation
	c.stopTask("kv-1")
	c.waitSettled(keys)
	if g := c.clerk.Assignment().Generation; g <= gen {
		t.Fatalf("generation %d after a task stopped; want above %d", g, gen)
	}
	moved, misses := 0, 0
	for _, k := range keys {
		owner, _ := c.ownerTask(k)
		if owner == "kv-1" {
			t.Fatalf("key %s still routed to the stopped task", k)
		}
		if before[k] == "kv-1" {
			moved++
		}
		_, ok, err := c.client.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s after kv-1 stopped: %v", k, err)
		}
		if !ok {
			misses++
			if err := c.client.Put(ctx, k, value(k)); err != nil {
				t.Fatalf("re-put %s: %v", k, err)
			}
		}
	}
	if moved == 0 {
		t.Fatal("kv-1 owned no key before it stopped")
	}
	if misses < moved {
		t.Errorf("%d misses after kv-1's %d keys moved; a moved key cannot be in its new owner's cache", misses, moved)
	}
	for _, k := range keys {
		v, ok, err := c.client.Get(ctx, k)
		if err != nil || !ok || !bytes.Equal(v, value(k)) {
			t.Fatalf("get %s after re-put = %q, %v, %v", k, v, ok, err)
		}
	}
	// Survivors hold only keys they own.
	testwait.For(t, "survivors to drop entries of slices moved away", func() bool {
		for _, tk := range c.tasks {
			for _, k := range tk.server.keys() {
				if !tk.sl.IsAffinitizedKeyString(k) {
					return false
				}
			}
		}
		return true
	})
}

// TestReplicatedKeysShareReads replicates every slice to two tasks and
// checks that writes reach both replicas while reads spread over them.
func TestReplicatedKeysShareReads(t *testing.T) {
	c := newCluster(t)
	for i := range 3 {
		c.startTask(fmt.Sprintf("kv-%d", i))
	}
	c.waitSettled(testKeys(1))
	jobs := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(c.agent.RPCAddr()))
	ctx := context.Background()
	if _, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: testJob, Config: &slicerv1.JobConfig{MinRedundancy: 2, MaxRedundancy: 2},
	})); err != nil {
		t.Fatal(err)
	}
	keys := testKeys(20)
	testwait.For(t, "every key on two tasks whose Slicelets agree", func() bool {
		for _, k := range keys {
			names := c.clerk.AssignedTaskNames([]byte(k))
			if len(names) != 2 {
				return false
			}
			for name, tk := range c.tasks {
				if tk.sl.IsAffinitizedKeyString(k) != slices.Contains(names, name) {
					return false
				}
			}
		}
		return true
	})
	for _, k := range keys {
		if err := c.client.Put(ctx, k, value(k)); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		for _, name := range c.clerk.AssignedTaskNames([]byte(k)) {
			if !c.tasks[name].server.has(k) {
				t.Errorf("key %s: replica %s does not hold it after a put", k, name)
			}
		}
	}
	const reads = 200
	k := keys[0]
	before := map[string]int64{}
	for name, tk := range c.tasks {
		before[name] = tk.hits.Load()
	}
	for range reads {
		if v, ok, err := c.client.Get(ctx, k); err != nil || !ok || !bytes.Equal(v, value(k)) {
			t.Fatalf("get %s = %q, %v, %v; want the value put", k, v, ok, err)
		}
	}
	for _, name := range c.clerk.AssignedTaskNames([]byte(k)) {
		// Each replica expects reads/2; a 30/70 split is far beyond chance.
		if got := c.tasks[name].hits.Load() - before[name]; got < reads*3/10 {
			t.Errorf("replica %s served %d of %d reads of %s; reads should spread over both replicas", name, got, reads, k)
		}
	}
}

func TestServerLimitsAndMissingKeys(t *testing.T) {
	c := newCluster(t)
	tk := c.startTask("kv-0")
	c.waitSettled(testKeys(10))

	big := bytes.Repeat([]byte("x"), MaxValueBytes+1)
	resp := c.do(t, http.MethodPut, tk.http.URL+"/kv/big", bytes.NewReader(big))
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT of %d bytes: %d; want 413", len(big), resp.StatusCode)
	}
	if tk.server.has("big") {
		t.Error("an oversized value was stored")
	}

	ctx := context.Background()
	if _, ok, err := c.client.Get(ctx, "absent"); err != nil || ok {
		t.Errorf("get of an absent key = %v, %v; want not found, no error", ok, err)
	}
	// Keys are any bytes: slashes, spaces and percent signs travel escaped.
	for _, k := range []string{"a/b", "with space", "100%", "ключ"} {
		if err := c.client.Put(ctx, k, value(k)); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		if v, ok, err := c.client.Get(ctx, k); err != nil || !ok || !bytes.Equal(v, value(k)) {
			t.Fatalf("get %q = %q, %v, %v", k, v, ok, err)
		}
		if !tk.server.has(k) {
			t.Errorf("key %q stored under another name", k)
		}
		if err := c.client.Delete(ctx, k); err != nil {
			t.Fatalf("delete %q: %v", k, err)
		}
		if _, ok, _ := c.client.Get(ctx, k); ok {
			t.Errorf("key %q present after delete", k)
		}
	}
	// Exactly the limit is accepted.
	if err := c.client.Put(ctx, "max", big[:MaxValueBytes]); err != nil {
		t.Errorf("put of exactly %d bytes: %v", MaxValueBytes, err)
	}
}

func (c *cluster) do(tb testing.TB, method, url string, body io.Reader) *http.Response {
	tb.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

func (s *Server) has(key string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.entries[key]
	return ok
}

func (s *Server) keys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Collect(maps.Keys(s.entries))
}

// newDetachedServer is a Server with no Slicelet, for exercising the
// entry-dropping path alone.
func newDetachedServer(keys []string) *Server {
	s := &Server{entries: make(map[string]entry, len(keys))}
	for _, k := range keys {
		s.entries[k] = entry{val: value(k), sk: assign.HashString(k)}
	}
	s.log = slog.New(slog.DiscardHandler)
	return s
}

func TestOnChangedSlicesDropsOnlyUnassignedRanges(t *testing.T) {
	keys := testKeys(2000)
	s := newDetachedServer(keys)
	half := assign.KeySpaceEnd / 2
	quarter := assign.KeySpaceEnd / 4
	unassigned := []assign.Slice{
		{Start: half + quarter, End: assign.KeySpaceEnd}, // out of order on purpose
		{Start: 0, End: quarter},
	}
	s.OnChangedSlices(nil, unassigned)
	kept := 0
	for _, k := range keys {
		h := assign.HashString(k)
		dropped := h < quarter || h >= half+quarter
		if s.has(k) == dropped {
			t.Errorf("key %s (slice key %#x): held = %v, want %v", k, h, s.has(k), !dropped)
		}
		if !dropped {
			kept++
		}
	}
	if kept == 0 || kept == len(keys) {
		t.Fatalf("kept %d of %d; the test ranges should split the keys", kept, len(keys))
	}
	s.OnChangedSlices([]assign.Slice{{Start: 0, End: quarter}}, nil)
	if s.Len() != kept {
		t.Errorf("an assignment without unassigned slices dropped entries: %d, want %d", s.Len(), kept)
	}
}

// FuzzInRanges checks the binary search against a linear scan.
func FuzzInRanges(f *testing.F) {
	f.Add(uint64(0), uint64(10), uint64(20), uint64(30), uint64(5))
	f.Add(uint64(0), uint64(assign.KeySpaceEnd), uint64(0), uint64(0), uint64(assign.KeySpaceEnd-1))
	f.Add(uint64(100), uint64(200), uint64(200), uint64(300), uint64(200))
	f.Fuzz(func(t *testing.T, a, b, c, d, k uint64) {
		// Two disjoint ranges from four sorted points.
		pts := []uint64{a % assign.KeySpaceEnd, b % assign.KeySpaceEnd, c % assign.KeySpaceEnd, d % assign.KeySpaceEnd}
		slices.Sort(pts)
		k %= assign.KeySpaceEnd
		var ranges []assign.Slice
		for i := 0; i < 4; i += 2 {
			if pts[i] < pts[i+1] {
				ranges = append(ranges, assign.Slice{Start: pts[i], End: pts[i+1]})
			}
		}
		want := false
		for _, r := range ranges {
			if r.Start <= k && k < r.End {
				want = true
			}
		}
		if got := inRanges(ranges, k); got != want {
			t.Fatalf("inRanges(%v, %#x) = %v, want %v", ranges, k, got, want)
		}
	})
}

func BenchmarkOnChangedSlices(b *testing.B) {
	keys := testKeys(100_000)
	// A tenth of the key space in 10 slices moves away each time.
	var unassigned []assign.Slice
	step := assign.KeySpaceEnd / 10
	for i := range assign.SliceKey(10) {
		unassigned = append(unassigned, assign.Slice{Start: i * step, End: i*step + step/10})
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := newDetachedServer(keys)
		b.StartTimer()
		s.OnChangedSlices(nil, unassigned)
	}
}

func BenchmarkServerGet(b *testing.B) {
	c := newCluster(b)
	tk := c.startTask("kv-0")
	c.waitSettled(testKeys(1))
	if err := c.client.Put(context.Background(), "bench", value("bench")); err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/kv/bench", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		tk.server.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

func BenchmarkClientGet(b *testing.B) {
	c := newCluster(b)
	c.startTask("kv-0")
	c.waitSettled(testKeys(1))
	ctx := context.Background()
	if err := c.client.Put(ctx, "bench", value("bench")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok, err := c.client.Get(ctx, "bench"); err != nil || !ok {
				b.Errorf("get: %v %v", ok, err)
				return
			}
		}
	})
}

// TestHandoffMovesEntries: with handoff, a task that joins and the tasks
// that take a drained task's keys fetch the entries of the keys they gain,
// so every key is still found without being written again; without
// handoff the moved keys are lost, as a cache's would be.
func TestHandoffMovesEntries(t *testing.T) {
	for _, handoff := range []bool{true, false} {
		t.Run(fmt.Sprintf("handoff=%v", handoff), func(t *testing.T) {
			c := newCluster(t)
			for i := range 3 {
				c.startTaskWith(fmt.Sprintf("kv-%d", i), handoff)
			}
			keys := testKeys(600)
			c.waitSettled(keys)
			ctx := context.Background()
			for _, k := range keys {
				if err := c.client.Put(ctx, k, value(k)); err != nil {
					t.Fatalf("put %s: %v", k, err)
				}
			}
			found := func(what string) (moved, kept int) {
				t.Helper()
				for _, k := range keys {
					v, ok, err := c.client.Get(ctx, k)
					if err != nil {
						t.Fatalf("%s: get %s: %v", what, k, err)
					}
					if ok && bytes.Equal(v, value(k)) {
						kept++
					}
				}
				return len(keys), kept
			}

			owners := func() map[string]string {
				m := make(map[string]string, len(keys))
				for _, k := range keys {
					m[k], _ = c.ownerTask(k)
				}
				return m
			}
			before := owners()
			c.startTaskWith("kv-3", handoff)
			c.waitSettled(keys)
			movedTo3 := 0
			for k, o := range owners() {
				if o != before[k] {
					movedTo3++
				}
			}
			// The joiner fetches asynchronously; a request waits for it.
			_, kept := found("after kv-3 joined")
			t.Logf("kv-3 joined: %d keys moved, %d of %d found", movedTo3, kept, len(keys))
			if movedTo3 == 0 {
				t.Fatal("no key moved to the joiner")
			}
			if handoff && kept < len(keys)*99/100 {
				t.Errorf("with handoff only %d of %d keys found after a join", kept, len(keys))
				for name, tk := range c.tasks {
					f, x, n := tk.sl.HandoffStats()
					t.Logf("%s: %d fetches, %d failed, %d entries", name, f, x, n)
				}
				t.Logf("the tasks' warnings:\n%s", c.warnings.String())
			}
			if !handoff && kept > len(keys)-movedTo3 {
				t.Errorf("without handoff %d of %d keys found, but %d moved", kept, len(keys), movedTo3)
			}

			// kv-1 drains, then stops.
			dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := c.tasks["kv-1"].sl.Drain(dctx); err != nil {
				t.Fatalf("drain kv-1: %v", err)
			}
			c.stopTask("kv-1")
			c.waitSettled(keys)
			_, kept = found("after kv-1 drained")
			t.Logf("kv-1 drained: %d of %d found", kept, len(keys))
			if handoff && kept < len(keys)*99/100 {
				t.Errorf("with handoff only %d of %d keys found after a drain", kept, len(keys))
			}
			var fetches, failed uint64
			for _, tk := range c.tasks {
				f, x, _ := tk.sl.HandoffStats()
				fetches, failed = fetches+f, failed+x
			}
			if handoff && (fetches == 0 || failed != 0) {
				t.Errorf("%d fetches, %d failed", fetches, failed)
			}
		})
	}
}

// TestLeavingEntriesExpire: entries kept for a handoff are exported while
// kept and dropped once their time is past, also without further
// assignment changes.
func TestLeavingEntriesExpire(t *testing.T) {
	now := time.Now()
	s := &Server{entries: map[string]entry{}, retain: time.Minute, leaving: map[string]leavingEntry{
		"kept": {entry: entry{val: []byte("1"), sk: assign.HashString("kept")}, until: now.Add(time.Minute)},
		"gone": {entry: entry{val: []byte("2"), sk: assign.HashString("gone")}, until: now.Add(-time.Second)},
	}}
	var got []string
	if err := s.ExportState(context.Background(), 0, assign.KeySpaceEnd, func(k, _ []byte) error {
		got = append(got, string(k))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"kept"}) {
		t.Errorf("exported %v, want only the entry still kept", got)
	}
	s.StateBytes(func(assign.SliceKey, int64) {})
	if _, ok := s.leaving["gone"]; ok || len(s.leaving) != 1 {
		t.Errorf("after StateBytes the kept entries are %v; the expired one should be gone", s.leaving)
	}
}
