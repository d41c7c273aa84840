package loadshift

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/clerktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPowerLawMatchesThePaper(t *testing.T) {
	p, err := NewPowerLaw(100, 1.5)
	if err != nil {
		t.Fatal(err)
	}
	// The hottest of 100 keys at exponent 1.5 carries 1/H(100, 1.5).
	if s := p.Share(0); math.Abs(s-0.4145) > 0.001 {
		t.Errorf("hottest key's share %.4f, want about 0.414", s)
	}
	sum := 0.0
	for r := range p.Len() {
		sum += p.Share(r)
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Errorf("shares sum to %g", sum)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, p.Len())
	const n = 200000
	for range n {
		counts[p.Sample(rng)]++
	}
	for _, r := range []int{0, 1, 9, 99} {
		want := p.Share(r) * n
		if math.Abs(float64(counts[r])-want) > 5*math.Sqrt(want)+1 {
			t.Errorf("rank %d drawn %d times, want about %.0f", r, counts[r], want)
		}
	}
	for _, bad := range []struct {
		n int
		e float64
	}{{0, 1.5}, {10, -1}, {10, math.NaN()}, {10, math.Inf(1)}} {
		if _, err := NewPowerLaw(bad.n, bad.e); err == nil {
			t.Errorf("NewPowerLaw(%d, %g) accepted", bad.n, bad.e)
		}
	}
}

func TestMeterImbalance(t *testing.T) {
	start := time.Unix(1000, 0)
	m := NewMeter(start)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	for range 30 {
		m.Add("a", at(0.5))
	}
	for range 10 {
		m.Add("b", at(1.5))
		m.Add("a", at(1.5))
	}
	m.Add("a", at(-0.5)) // before the start: ignored
	if got := m.Counts(0, 2, []string{"a", "b", "c"}); got[0] != 40 || got[1] != 10 || got[2] != 0 {
		t.Errorf("counts %v, want [40 10 0]", got)
	}
	// max 40 over mean 50/3.
	if x, ok := m.Imbalance(0, 2, []string{"a", "b", "c"}); !ok || math.Abs(x-2.4) > 1e-9 {
		t.Errorf("imbalance %g %v, want 2.4", x, ok)
	}
	if x, ok := m.Imbalance(1, 2, []string{"a", "b"}); !ok || x != 1 {
		t.Errorf("imbalance of bucket 1 %g %v, want 1", x, ok)
	}
	if _, ok := m.Imbalance(5, 9, []string{"a"}); ok {
		t.Error("imbalance of empty buckets is ok")
	}
	if b := m.Bucket(at(-0.5)); b != -1 {
		t.Errorf("bucket of -0.5 s = %d, want -1", b)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"keys":     func(c *Config) { c.Keys = 0 },
		"rate":     func(c *Config) { c.Rate = math.NaN() },
		"workers":  func(c *Config) { c.Workers = 0 },
		"timeout":  func(c *Config) { c.Timeout = 0 },
		"exponent": func(c *Config) { c.Exponent = -2 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
}

// task is an HTTP server that counts the key requests it answers.
type task struct {
	srv  *httptest.Server
	hits atomic.Int64
}

func newTask(t *testing.T) *task {
	tk := &task{}
	tk.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/kv/key-") {
			tk.hits.Add(1)
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(tk.srv.Close)
	return tk
}

// TestDriverMetersWhatTasksAnswer offers load to two tasks that replicate
// every key, checks the Meter agrees with the tasks' own counts, and that a
// shift is measured as balanced within a window.
func TestDriverMetersWhatTasksAnswer(t *testing.T) {
	a, b := newTask(t), newTask(t)
	srv, err := clerktest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	tasks := []assign.Task{{Name: "a", Addr: a.srv.Listener.Addr().String()}, {Name: "b", Addr: b.srv.Listener.Addr().String()}}
	asg := clerktest.Uniform("kv", 1, tasks, 4)
	for i := range asg.Slices {
		asg.Slices[i].Tasks = []string{"a", "b"}
	}
	srv.Publish(asg)
	ck, err := clerk.New(clerk.Config{Job: "kv", Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cdone := make(chan error, 1)
	go func() { cdone <- ck.Run(ctx) }()
	defer func() { cancel(); <-cdone }()

	cfg := DefaultConfig()
	cfg.Rate, cfg.Workers = 400, 8
	d, err := NewDriver(cfg, ck, nil)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithCancel(ctx)
	ddone := make(chan error, 1)
	go func() { ddone <- d.Run(dctx) }()

	m := DefaultMeasure()
	m.Window, m.Period, m.StopWhenBalanced = 1, 20*time.Second, true
	var samples []Sample
	m.OnSample = func(s Sample) { samples = append(samples, s) }
	res, err := d.MeasureShift(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	dcancel()
	if err := <-ddone; err != nil {
		t.Fatal(err)
	}
	if !res.Balanced || res.ReactionSeconds < 1 || res.Shift != 1 || len(samples) == 0 || samples[0].Tasks != 2 {
		t.Errorf("shift measured as %+v with samples %v; want balanced after at least the 1 s window, over 2 tasks", res, samples)
	}
	if res.HotKey != d.HotKey() {
		t.Errorf("hot key %q reported, driver has %q", res.HotKey, d.HotKey())
	}
	// Both tasks serve every key, so a perfect split is predicted.
	if e, ok := d.ExpectedImbalance(); !ok || math.Abs(e-1) > 1e-9 {
		t.Errorf("expected imbalance %g %v, want 1", e, ok)
	}
	answered, failed, _ := d.Stats()
	got := d.Meter().Counts(-1, 1<<20, []string{tasks[0].Addr, tasks[1].Addr})
	if answered == 0 || failed != 0 || int64(got[0]) != a.hits.Load() || int64(got[1]) != b.hits.Load() {
		t.Errorf("metered %v (answered %d, failed %d), tasks counted %d and %d", got, answered, failed, a.hits.Load(), b.hits.Load())
	}
	d.hc.CloseIdleConnections()
}
