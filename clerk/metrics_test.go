package clerk_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/metrics/metricstest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestAssignmentDelayMetric: a generation that replaces the Clerk's
// assignment and carries its commit time is timed from the commit to its
// installation; one without the field (a server that predates it, or a
// Backup) is installed as before and not timed, nor is the first
// assignment, and a commit time ahead of this host's clock counts as 0.
func TestAssignmentDelayMetric(t *testing.T) {
	srv := newServer(t)
	reg := prometheus.NewPedanticRegistry()
	cfg := testConfig(srv.Addr())
	cfg.Registerer = reg
	srv.PublishCommitted(clerktest.Uniform(job, 1, tasks, 4), time.Now().Add(-time.Hour))
	c := start(t, cfg)
	waitGen(t, c, 1)

	delays := func() (uint64, float64) {
		t.Helper()
		n, sum, ok := metricstest.Histogram(t, reg, "slicerd_clerk_assignment_delay_seconds", "job", job)
		if !ok {
			t.Fatal("no slicerd_clerk_assignment_delay_seconds series for the job")
		}
		return n, sum
	}
	if n, _ := delays(); n != 0 {
		t.Errorf("the first assignment was timed (%d delays): it may have been committed long before the Clerk started", n)
	}

	// An old-style message: installed, not timed.
	srv.Publish(clerktest.Uniform(job, 2, tasks, 4))
	waitGen(t, c, 2)
	if n, _ := delays(); n != 0 {
		t.Errorf("%d delays after a generation without a commit time, want 0", n)
	}

	// Committed 3 s before this host's now: at least 3 s.
	srv.PublishCommitted(clerktest.Uniform(job, 3, tasks, 4), time.Now().Add(-3*time.Second))
	waitGen(t, c, 3)
	testwait.For(t, "one delay", func() bool { n, _ := delays(); return n == 1 })
	_, sum := delays()
	if sum < 3 {
		t.Errorf("delay of a generation committed 3 s ago observed as %v s", sum)
	}

	// The Assigner's clock an hour ahead: observed, as 0.
	srv.PublishCommitted(clerktest.Uniform(job, 4, tasks, 4), time.Now().Add(time.Hour))
	waitGen(t, c, 4)
	testwait.For(t, "two delays", func() bool { n, _ := delays(); return n == 2 })
	if _, after := delays(); after != sum {
		t.Errorf("a commit time in the future added %v s, want 0", after-sum)
	}
	metricstest.Lint(t, reg)
}
