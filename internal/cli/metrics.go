package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/roles"
)

func metricsAddrFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "metrics-addr", EnvVars: []string{"SLICERD_METRICS_ADDR"},
		Usage: "host:port to serve Prometheus metrics on, at GET /metrics over plain HTTP on a listener of its own; " +
			"bind it to loopback or a private interface (default: none, no metrics port)",
	}
}

// agentMetrics is the metrics server of a node run with --metrics-addr.
type agentMetrics struct {
	srv *metrics.Server
	log *slog.Logger
}

// listenMetrics binds --metrics-addr, if set, and gives cfg the registry it
// serves; nil when the flag is not set.
func listenMetrics(c *cli.Context, cfg *roles.Config, log *slog.Logger) (*agentMetrics, error) {
	addr := c.String("metrics-addr")
	if addr == "" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usageError("invalid --metrics-addr %q: use host:port, such as 127.0.0.1:9090", addr)
	}
	reg := metrics.NewRegistry()
	log = log.With("component", "metrics")
	srv, err := metrics.Listen(addr, reg, log)
	if err != nil {
		return nil, usageError("%v; choose another --metrics-addr", err)
	}
	cfg.Registerer = reg
	return &agentMetrics{srv: srv, log: log}, nil
}

// run runs the node with the metrics server beside it, which stops once
// the node has (so that scrapes see its shutdown), and returns when both
// have. A nil m runs the node alone.
func (m *agentMetrics) run(ctx context.Context, node func(context.Context) error) error {
	if m == nil {
		return node(ctx)
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() {
		err := m.srv.Run(sctx)
		if err != nil && sctx.Err() == nil {
			// The node goes on without metrics; say so now, not at exit.
			m.log.Error("the metrics server stopped; no metrics are served until slicerd restarts", "err", err)
		}
		served <- err
	}()
	m.log.Info("serving metrics", "metrics_addr", m.srv.Addr(), "path", metrics.Path)
	err := node(ctx)
	stop()
	return errors.Join(err, <-served)
}

// close releases the listener when the node did not start.
func (m *agentMetrics) close() {
	if m != nil {
		_ = m.srv.Close()
	}
}
