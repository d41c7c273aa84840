package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServerServesAndStops scrapes a Server, then stops it: Run returns
// and the port is closed.
func TestServerServesAndStops(t *testing.T) {
	reg := NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: Name("test", "events_total"), Help: "Events."})
	c.Add(3)
	reg.MustRegister(c)
	srv, err := Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + srv.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"slicerd_test_events_total 3", "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET %s lacks %q:\n%s", Path, want, body)
		}
	}
	for path, status := range map[string]int{"/": http.StatusNotFound, "/debug/pprof/": http.StatusNotFound} {
		resp, err := hc.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, status)
		}
	}
	resp, err = hc.Post("http://"+srv.Addr()+Path, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s = %d, want 405", Path, resp.StatusCode)
	}

	hc.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if _, err := hc.Get("http://" + srv.Addr() + Path); err == nil {
		t.Error("the metrics port still answers after Run returned")
	}
}

func TestListenRefusesBusyPort(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := Listen(srv.Addr(), NewRegistry(), nil); err == nil {
		t.Fatal("second Listen on a bound port succeeded")
	}
}

type constCollector struct {
	desc *prometheus.Desc
	v    float64
}

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, c.v)
}

func TestRegisterReplaces(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	desc := func(job string) *prometheus.Desc {
		return prometheus.NewDesc(Name("test", "value"), "A value.", nil, prometheus.Labels{"job": job})
	}
	for _, c := range []constCollector{{desc("a"), 1}, {desc("a"), 2}, {desc("b"), 3}} {
		if err := Register(reg, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := Register(nil, constCollector{desc("c"), 4}); err != nil {
		t.Fatalf("Register(nil) = %v", err)
	}
	want := `# HELP slicerd_test_value A value.
# TYPE slicerd_test_value gauge
slicerd_test_value{job="a"} 2
slicerd_test_value{job="b"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// Another metric under the same name and other labels is refused.
	clash := constCollector{prometheus.NewDesc(Name("test", "value"), "A value.", []string{"x"}, nil), 5}
	if err := Register(reg, clash); err == nil {
		t.Error("Register of an inconsistent collector succeeded")
	}
}

func TestShardedCounter(t *testing.T) {
	var c ShardedCounter
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				c.Inc(uint64(g*1000 + i))
			}
		})
	}
	wg.Wait()
	if got := c.Load(); got != 4000 {
		t.Fatalf("Load = %d, want 4000", got)
	}
}

// BenchmarkShardedCounter counts from every P at once: lookups of one
// hot key, and of keys spread over the key space.
func BenchmarkShardedCounter(b *testing.B) {
	for _, hot := range []bool{true, false} {
		name := "many-keys"
		if hot {
			name = "hot-key"
		}
		b.Run(name, func(b *testing.B) {
			var c ShardedCounter
			var next atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				h := uint64(42) // every goroutine's lookups of one key
				if !hot {
					h = next.Add(0x9e3779b97f4a7c15)
				}
				for pb.Next() {
					if !hot {
						h += 0x9e3779b97f4a7c15
					}
					c.Inc(h)
				}
			})
		})
	}
}
