// Package metrics holds what slicerd's Prometheus metrics share: the
// name prefix, the registry an agent serves (with the Go runtime's and
// the process's collectors), the HTTP server of --metrics-addr, and a
// counter that many goroutines increment without contending.
//
// Metrics are opt-in everywhere: the roles, the Clerk and the Slicelet
// take a prometheus.Registerer, and register nothing when it is nil.
// Labels are bounded by the number of jobs and tasks; no metric has a
// per-key label.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every slicerd metric: slicerd_<subsystem>_<name>.
const Namespace = "slicerd"

// Path is where the metrics server answers.
const Path = "/metrics"

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors (go_*, process_*), for slicerd's own metrics to be
// registered beside.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// Handler serves g's metrics in the Prometheus text (or OpenMetrics)
// format. Errors of single collectors are logged and the rest served.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: maxScrapesInFlight,
		Timeout:             scrapeTimeout,
	})
}

// A scrape beyond maxScrapesInFlight concurrent ones is answered 503 at
// once, and one that takes longer than scrapeTimeout 503 too, so a
// misconfigured scraper cannot pile up work in the process it watches.
const (
	maxScrapesInFlight = 4
	scrapeTimeout      = 10 * time.Second
)

// shutdownTimeout bounds how long Server.Run waits for scrapes in flight
// when its context ends.
const shutdownTimeout = 2 * time.Second

// Server serves one registry on Path over plain HTTP, on a listener of its
// own: nothing but GET /metrics is answered there.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// Listen binds addr (host:port) for a Server of g's metrics; Run serves.
func Listen(addr string, g prometheus.Gatherer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, Handler(g, log))
	return &Server{
		ln:  ln,
		log: log,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      scrapeTimeout + 5*time.Second,
			IdleTimeout:       time.Minute,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then shuts the server down, waiting a short
// while for scrapes in flight. It returns once nothing of the server runs.
func (s *Server) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("metrics: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.log.Debug("metrics server did not drain in time; closing it", "err", err)
		s.srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}

// Close releases the listener of a Server that never ran.
func (s *Server) Close() error { return s.ln.Close() }

// Register registers c with reg, replacing a collector registered before
// with the same descriptors: a Clerk or Slicelet created again in the same
// process (after the previous one's Run returned) takes over its
// predecessor's series instead of failing. A nil reg registers nothing.
func Register(reg prometheus.Registerer, c prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		reg.Unregister(are.ExistingCollector)
		err = reg.Register(c)
	}
	if err != nil {
		return fmt.Errorf("metrics: register: %w", err)
	}
	return nil
}

// counterShards is the number of cells of a ShardedCounter: enough that
// goroutines counting different keys rarely share a cache line.
const counterShards = 64

// ShardedCounter is a monotonic count that many goroutines add to at
// once, spread over cache-line-sized cells chosen by a hash the caller
// already has (a key's slice key), so that lookups of different keys do
// not contend on one atomic. Reading it sums the cells.
type ShardedCounter struct {
	cells [counterShards]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

// Inc counts one event for hash h.
func (c *ShardedCounter) Inc(h uint64) { c.cells[h%counterShards].n.Add(1) }

// Load returns the count so far.
func (c *ShardedCounter) Load() uint64 {
	var n uint64
	for i := range c.cells {
		n += c.cells[i].n.Load()
	}
	return n
}

// Name returns the full name of a slicerd metric: slicerd_subsystem_name.
func Name(subsystem, name string) string {
	return prometheus.BuildFQName(Namespace, subsystem, name)
}

// DistributionBuckets are the buckets, in seconds, of the histograms of
// an assignment's delay from its commit (the Distributor's commit-to-send
// and the Clerk's assignment delay): from a loopback hop (1 ms) to a
// client that was cut off for a minute, with bounds at 100 ms, 1 s and
// 2 s, where the Slicer paper's Figure 10 is read (95% within 2 s).
var DistributionBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}

// SinceCommit is the delay from committed, a time taken on another host
// (the Assigner's), to now: at least 0, since the hosts' clocks may
// disagree by more than the delay itself.
func SinceCommit(now, committed time.Time) time.Duration {
	return max(now.Sub(committed), 0)
}
