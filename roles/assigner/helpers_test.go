package assigner

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger { return testlog.Logger(t) }

// testConfig is an Assigner's configuration with the agent's defaults
// and timers shrunk for tests, as the agent's TestConfig has them.
func testConfig(t testing.TB, name string) Config {
	c := DefaultConfig()
	c.Logger = testLogger(t)
	c.NodeName = name
	c.Preference = lease.Preference{Recheck: 50 * time.Millisecond}
	c.StandbyPollInterval = 20 * time.Millisecond
	c.RebalanceDelay = 20 * time.Millisecond
	c.StartupGrace = 50 * time.Millisecond
	c.JobLeaseTTL = 500 * time.Millisecond
	c.MaxLoadReportsPerSecond = 1000 // Slicelets in tests report every few milliseconds
	c.LoadReportBurst = 1000
	return c
}

// testStore opens a bbolt store in a temporary directory, closed at cleanup.
func testStore(t testing.TB) storage.Store {
	t.Helper()
	store, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// testLeases maps each test store to the one embedded lease manager all
// the test's Assigners on it share, as the agents of one process would.
var testLeases sync.Map // storage.Store → lease.Manager

// testAssigner builds an Assigner as the agent does, with the embedded
// lease manager of store (nil for tests that never commit).
func testAssigner(t testing.TB, cfg Config, store storage.Store, members Members, stopping <-chan struct{}) *Assigner {
	t.Helper()
	var leases lease.Manager
	if b, ok := store.(*storage.Bolt); ok {
		if m, ok := testLeases.Load(store); ok {
			leases = m.(lease.Manager)
		} else {
			m, err := lease.NewEmbedded(context.Background(), b, lease.EmbeddedOptions{})
			if err != nil {
				t.Fatal(err)
			}
			testLeases.Store(store, m)
			t.Cleanup(func() { testLeases.Delete(store); m.Close() })
			leases = m
		}
	}
	return New(cfg, store, leases, members, stopping)
}

// lead makes a take job's lease, as its leader does for a job it prefers,
// so that a test can drive its decisions directly.
func lead(t testing.TB, a *Assigner, job string) {
	t.Helper()
	a.leader.Evaluate(context.Background(), []string{job})
	a.leader.Gained()
	if _, held := a.leader.Held(job); !held {
		t.Fatalf("assigner %s did not get the lease of job %s", a.self, job)
	}
}

// taskMember joins gossip the way a Slicelet does.
func taskMember(t *testing.T, job, task, join string) *gossip.Node {
	t.Helper()
	return testnet.TaskMember(t, job, task, join, testLogger(t))
}

var (
	taskNames = assignertest.TaskNames
	hasTasks  = assignertest.HasTasks
)
