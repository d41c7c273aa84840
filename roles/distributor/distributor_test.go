package distributor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
)

// A pull admitted just before the Distributor stops is one Run waits for:
// no pull starts after Run has returned.
func TestDistributorNoPullOutlivesRun(t *testing.T) {
	d := testDistributor(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan struct{})
	var returned, late atomic.Bool
	d.testPullStarted = func() {
		if returned.Load() {
			late.Store(true)
		}
	}
	// The request was admitted while Run was running; Run is told to stop
	// before the pull starts. Run must not return before the pull it
	// admitted has ended; the bound only keeps a Run that rightly waits
	// from blocking the test.
	d.testAdmitted = func() {
		cancel()
		select {
		case <-runDone:
		case <-time.After(300 * time.Millisecond):
		}
	}
	go func() {
		if err := d.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
		returned.Store(true)
		close(runDone)
	}()
	testwait.For(t, "Run to start", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.runCtx != nil
	})
	if _, err := d.Latest("kv"); err != nil {
		t.Fatalf("job admitted before stopping: %v", err)
	}
	<-runDone
	d.pulls.Wait()
	if late.Load() {
		t.Fatal("a pull started after Distributor.Run returned")
	}
	if _, err := d.Latest("other"); err == nil {
		t.Error("a stopped Distributor admitted a new job")
	}
}

// A request that reaches the Distributor after the RPC server is up but
// before Run has started is served, not refused as a shutdown: Run starts
// the pull of every job asked for before it.
func TestDistributorServesJobsAskedBeforeRun(t *testing.T) {
	d := testDistributor(t)
	var started atomic.Int32
	d.testPullStarted = func() { started.Add(1) }

	if _, err := d.Latest("kv"); err != nil {
		t.Fatalf("job asked for before Run: %v", err)
	}
	if n := started.Load(); n != 0 {
		t.Fatalf("%d pulls started before Run", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(ctx) }()
	testwait.For(t, "Run to start the pull of the job asked for before it", func() bool { return started.Load() == 1 })
	cancel()
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A Distributor holds at most Config.MaxJobs jobs: while no Assigner
// answers, names nobody knows stay, so a request for one more is refused
// (RESOURCE_EXHAUSTED), and the jobs it holds are still served.
func TestDistributorHoldsAtMostMaxJobs(t *testing.T) {
	d := testDistributor(t)
	d.maxJobs = 2
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for _, job := range []string{"made-up-1", "made-up-2"} {
		if _, err := d.Latest(job); err != nil {
			t.Fatalf("job %s, within the bound: %v", job, err)
		}
	}
	if _, err := d.Latest("made-up-3"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a job beyond the bound: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := d.Latest("made-up-1"); err != nil {
		t.Fatalf("a job held, at the bound: %v", err)
	}
}

// testDistributor is a Distributor on a gossip node of its own, not run.
func testDistributor(t *testing.T) *Distributor {
	t.Helper()
	gcfg := gossip.TestConfig("distributor-1")
	gcfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleDistributor}, RPCAddr: "127.0.0.1:1"}
	node, err := gossip.Start(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown() })
	return New(Config{
		Logger: slog.New(slog.DiscardHandler), Preference: lease.DefaultPreference(),
		PullMinBackoff: 10 * time.Millisecond, PullMaxBackoff: 100 * time.Millisecond,
	}, node, make(chan struct{}))
}
