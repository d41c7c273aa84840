package roles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/internal/metrics/metricstest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

// TestMetrics runs an agent, two tasks and a Clerk on one registry, as a
// process serving --metrics-addr would hold them, checks that what they
// did shows in the metrics, and lints every metric with promlint.
func TestMetrics(t *testing.T) {
	reg := metrics.NewRegistry()
	cfg := testConfig(t, "a1", t.TempDir())
	cfg.Registerer = reg
	node := startAgent(t, cfg)
	s0 := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "kv-0", Registerer: reg})
	<-s0.Ready()

	ccfg := clerk.DefaultConfig()
	ccfg.Job, ccfg.Addrs, ccfg.Logger, ccfg.Registerer = "kv", []string{node.RPCAddr()}, testLogger(t), reg
	c, err := clerk.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clerkDone := make(chan error, 1)
	go func() { clerkDone <- c.Run(ctx) }()
	stopClerk := func() {
		cancel()
		if err := <-clerkDone; err != nil {
			t.Errorf("clerk Run: %v", err)
		}
		clerkDone <- nil
	}
	t.Cleanup(stopClerk)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels ...string) float64 {
		t.Helper()
		v, ok := metricstest.Value(t, reg, name, labels...)
		if !ok {
			t.Fatalf("no metric %s%v", name, labels)
		}
		return v
	}
	// The Clerk and the Slicelet each hold a watch stream on the
	// Distributor.
	testwait.For(t, "two subscribers", func() bool {
		v, _ := metricstest.Value(t, reg, "slicerd_distributor_subscribers", "job", "kv")
		return v == 2
	})

	// A second task makes a new generation, which reaches the streams
	// open when it arrives: their send delay is measured.
	s1 := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "kv-1", Registerer: reg})
	<-s1.Ready()
	testwait.For(t, "the clerk and kv-0 at the generation that gives kv-1 keys", func() bool {
		_, ok := c.Assignment().TaskIndex("kv-1")
		return ok && s0.Generation() == c.Generation()
	})
	gen := float64(c.Generation())
	testwait.For(t, "three subscribers", func() bool {
		v, _ := metricstest.Value(t, reg, "slicerd_distributor_subscribers", "job", "kv")
		return v == 3
	})
	testwait.For(t, "send delays of the new generation", func() bool {
		v, _ := metricstest.Value(t, reg, "slicerd_distributor_send_delay_seconds")
		return v >= 2
	})
	testwait.For(t, "commit-to-send delays of the new generation", func() bool {
		v, _ := metricstest.Value(t, reg, "slicerd_distributor_commit_to_send_seconds")
		return v >= 2
	})

	// Requests the Clerk routes to kv-0, which agrees: none misrouted.
	const lookups = 20
	routed := 0
	for i := range lookups {
		key := fmt.Sprintf("user:%d", i)
		s0.IsAffinitizedKeyString(key)
		if !slices.Contains(c.AssignedTaskNames([]byte(key)), "kv-0") {
			continue
		}
		routed++
		if err := s0.ReportLoadString(key, 1); err != nil {
			t.Fatal(err)
		}
	}
	if routed == 0 || routed == lookups {
		t.Fatalf("the clerk routed %d of %d keys to kv-0; want some but not all", routed, lookups)
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   func(float64) bool
		says   string
	}{
		{"slicerd_clerk_assignment_generation", []string{"job", "kv"}, func(v float64) bool { return v == gen }, fmt.Sprint(gen)},
		{"slicerd_clerk_assignment_age_seconds", []string{"job", "kv"}, func(v float64) bool { return v >= 0 }, ">= 0"},
		{"slicerd_clerk_lookups_total", []string{"job", "kv"}, func(v float64) bool { return v == lookups }, fmt.Sprint(lookups)},
		{"slicerd_clerk_assignment_delay_seconds", []string{"job", "kv"}, func(v float64) bool { return v >= 1 }, ">= 1 (the generation that gave kv-1 keys)"},
		{"slicerd_slicelet_assignment_generation", []string{"job", "kv", "task", "kv-0"}, func(v float64) bool { return v == gen }, fmt.Sprint(gen)},
		{"slicerd_slicelet_lookups_total", []string{"task", "kv-0"}, func(v float64) bool { return v == lookups }, fmt.Sprint(lookups)},
		{"slicerd_slicelet_requests_total", []string{"task", "kv-0"}, func(v float64) bool { return v == float64(routed) }, fmt.Sprint(routed)},
		{"slicerd_slicelet_misrouted_requests_total", []string{"task", "kv-0"}, func(v float64) bool { return v == 0 }, "0 (kv-0 and the clerk agree)"},
		{"slicerd_slicelet_requests_total", []string{"task", "kv-1"}, func(v float64) bool { return v == 0 }, "0"},
		{"slicerd_distributor_updates_sent_total", []string{"kind", "full"}, func(v float64) bool { return v >= 2 }, ">= 2"},
		{"slicerd_distributor_sent_bytes_total", []string{"kind", "full"}, func(v float64) bool { return v > 0 }, "> 0"},
		{"slicerd_gossip_members", []string{"state", "alive"}, func(v float64) bool { return v == 3 }, "3 (the agent and two tasks)"},
		{"slicerd_gossip_members", []string{"state", "failed"}, func(v float64) bool { return v == 0 }, "0"},
		{"slicerd_rpc_streams_open", nil, func(v float64) bool { return v >= 3 }, ">= 3 (two tasks and the clerk)"},
		{"slicerd_rpc_streams_refused_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"slicerd_rpc_stream_send_timeouts_total", nil, func(v float64) bool { return v == 0 }, "0"},
		{"slicerd_rpc_parked_handlers_total", nil, func(v float64) bool { return v >= 0 }, "present (a slow handler on a busy machine may be parked)"},
		{"slicerd_store_commit_duration_seconds", nil, func(v float64) bool { return v >= 2 }, ">= 2 commits"},
		{"slicerd_store_commit_conflicts_total", []string{"reason", "generation"}, func(v float64) bool { return v == 0 }, "0"},
		{"slicerd_store_commit_errors_total", nil, func(v float64) bool { return v == 0 }, "0"},
	} {
		if v := value(tc.name, tc.labels...); !tc.want(v) {
			t.Errorf("%s%v = %v, want %s", tc.name, tc.labels, v, tc.says)
		}
	}

	// Every metric of slicerd's is named slicerd_*; the rest are the Go
	// runtime's and the process's.
	for _, name := range metricstest.Names(t, reg, "") {
		if !strings.HasPrefix(name, "slicerd_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s is not named slicerd_*", name)
		}
	}
	metricstest.Lint(t, reg)

	// The subscriber gauge follows streams as they end.
	stopClerk()
	testwait.For(t, "two subscribers after the clerk stopped", func() bool {
		v, _ := metricstest.Value(t, reg, "slicerd_distributor_subscribers", "job", "kv")
		return v == 2
	})
}

// TestMetricsOffRegistersNothing checks that an agent without a
// Registerer counts nothing on its streams.
func TestMetricsOffRegistersNothing(t *testing.T) {
	node := startAgent(t, testConfig(t, "a1", t.TempDir()))
	if node.distributor.Counting() {
		t.Error("distributor counts sends without a registerer")
	}
	if node.assigner.Counting() {
		t.Error("assigner counts commits and decisions without a registerer")
	}
}

// TestMetricsRegistererConflict checks that a second agent on the same
// registerer is refused with a configuration error, registering nothing.
func TestMetricsRegistererConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := testConfig(t, "a1", t.TempDir())
	cfg.Registerer = reg
	startAgent(t, cfg)
	before := len(metricstest.Names(t, reg, ""))
	cfg2 := testConfig(t, "a2", t.TempDir())
	cfg2.Registerer = reg
	if _, err := New(context.Background(), cfg2); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "WrapRegistererWith") {
		t.Fatalf("New on a registerer in use = %v, want ErrConfig naming WrapRegistererWith", err)
	}
	if after := len(metricstest.Names(t, reg, "")); after != before {
		t.Errorf("the refused agent left metrics behind: %d families, want %d", after, before)
	}
}
