package slicelet_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/metrics/metricstest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

// serveTask serves h on a loopback port until the test ends and returns
// the address. It listens on a random address of 127/8 other than
// 127.0.0.1, where the tests of other packages running beside it listen
// and dial: a client of theirs still retrying a port of a server that
// stopped, which this listener was then given, would count among this
// task's requests.
func serveTask(t *testing.T, h func() http.Handler) (addr string, start func()) {
	t.Helper()
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{}
	done := make(chan struct{})
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String(), func() {
		srv.Handler = h()
		go func() {
			defer close(done)
			_ = srv.Serve(ln)
		}()
	}
}

// TestMisroutedRequests routes requests with a Clerk that holds an older
// assignment than the task they reach: the task counts every request, and
// as misrouted exactly those for keys its own assignment no longer gives
// it, which it answers 421.
func TestMisroutedRequests(t *testing.T) {
	dist, srv := slicerdNode(t, "slicerd-1", gossip.RoleDistributor)

	reg := prometheus.NewPedanticRegistry()
	var sl *slicelet.Slicelet
	addr, serve := serveTask(t, func() http.Handler {
		key := func(r *http.Request) string { return r.URL.Query().Get("key") }
		return slicelet.HTTPMiddleware(sl, key, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !sl.IsAffinitizedKeyString(key(r)) {
				w.WriteHeader(http.StatusMisdirectedRequest)
			}
		}))
	})
	sl, err := slicelet.New(slicelet.Config{
		Job: job, Task: "kv-0", Addr: addr, Join: []string{dist.GossipAddr()},
		Gossip: gossip.TestConfig("replaced"), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	serve()
	run(t, sl)

	// Four slices, kv-0 owning the 1st and 3rd.
	ts := []assign.Task{{Name: "kv-0", Addr: addr}, {Name: "kv-1", Addr: "127.0.0.1:1"}}
	a1 := clerktest.Uniform(job, 1, ts, 4)
	srv.Publish(a1)
	<-sl.Ready()

	creg := prometheus.NewPedanticRegistry()
	ccfg := clerk.DefaultConfig()
	ccfg.Job, ccfg.Addrs, ccfg.Registerer = job, []string{srv.Addr()}, creg
	c, err := clerk.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clerkDone := make(chan error, 1)
	go func() { clerkDone <- c.Run(ctx) }()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// The Clerk stops following: it routes on generation 1 from now on.
	cancel()
	if err := <-clerkDone; err != nil {
		t.Fatalf("clerk Run: %v", err)
	}

	// kv-0 gives its 3rd slice to kv-1 and takes the 2nd.
	a2 := clerktest.Uniform(job, 2, ts, 4)
	a2.Slices[1].Tasks, a2.Slices[2].Tasks = []string{"kv-0"}, []string{"kv-1"}
	srv.Publish(a2)
	testwait.For(t, "kv-0 at generation 2", func() bool { return sl.Generation() == 2 })

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	const keys = 400
	sent, misdirected, want := 0, 0, 0
	for i := range keys {
		key := fmt.Sprintf("user:%d", i)
		to, ok := c.PickTaskString(key)
		if !ok {
			t.Fatalf("the clerk has no task for %q", key)
		}
		if to != addr {
			continue
		}
		sent++
		if !hasTask(a2, key, "kv-0") {
			want++
		}
		resp, err := hc.Get("http://" + addr + "/?key=" + key)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusMisdirectedRequest {
			misdirected++
		}
	}
	if want == 0 || want == sent {
		t.Fatalf("of %d requests the stale clerk sent to kv-0, %d are for keys kv-0 lost; want some, not all", sent, want)
	}
	if misdirected != want {
		t.Errorf("kv-0 answered %d requests 421, want %d", misdirected, want)
	}
	value := func(g prometheus.Gatherer, name string, labels ...string) float64 {
		t.Helper()
		v, ok := metricstest.Value(t, g, name, labels...)
		if !ok {
			t.Fatalf("no metric %s%v", name, labels)
		}
		return v
	}
	task := []string{"job", job, "task", "kv-0"}
	for _, tc := range []struct {
		g    prometheus.Gatherer
		name string
		want float64
	}{
		{reg, "slicerd_slicelet_requests_total", float64(sent)},
		{reg, "slicerd_slicelet_misrouted_requests_total", float64(want)},
		{reg, "slicerd_slicelet_lookups_total", float64(sent)}, // the handler's IsAffinitizedKeyString
		{reg, "slicerd_slicelet_assignment_generation", 2},
		{creg, "slicerd_clerk_lookups_total", keys},
		{creg, "slicerd_clerk_assignment_generation", 1},
	} {
		if got := value(tc.g, tc.name, task[:2]...); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	if v := value(reg, "slicerd_slicelet_requests_total", task...); v != float64(sent) {
		t.Errorf("requests labelled job=%s task=kv-0 = %v, want %d", job, v, sent)
	}
	metricstest.Lint(t, reg)
	metricstest.Lint(t, creg)
}

func hasTask(a *assign.Assignment, key, task string) bool {
	for _, n := range a.Slices[a.Find(assign.HashString(key))].Tasks {
		if n == task {
			return true
		}
	}
	return false
}

// TestMetricsReplaceEarlierSlicelet checks that a Slicelet created again
// for the same task on the same registerer takes its predecessor's
// series, and that another task's live beside them.
func TestMetricsReplaceEarlierSlicelet(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cfg := slicelet.Config{Job: job, Task: "kv-0", Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:1"}, Registerer: reg}
	first, err := slicelet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.ReportLoadString("a", 1)
	if _, err := slicelet.New(cfg); err != nil {
		t.Fatalf("second Slicelet of the task: %v", err)
	}
	other := cfg
	other.Task = "kv-1"
	if _, err := slicelet.New(other); err != nil {
		t.Fatalf("Slicelet of another task: %v", err)
	}
	if v, ok := metricstest.Value(t, reg, "slicerd_slicelet_requests_total", "task", "kv-0"); !ok || v != 0 {
		t.Errorf("requests of kv-0 = %v (present %v), want 0: the new Slicelet's", v, ok)
	}
	if _, ok := metricstest.Value(t, reg, "slicerd_slicelet_requests_total", "task", "kv-1"); !ok {
		t.Error("kv-1 has no requests series")
	}
}
