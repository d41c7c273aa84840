package assigner

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/storage"
)

// takeoverWithReports stores an assignment of four tasks as another
// Assigner would, has the tasks named report the skewed load to a new
// Assigner (as Slicelets report to every Assigner), lets it take the job
// over, and returns it, the clock its load reports follow, and the
// takeover's recorded decision.
func takeoverWithReports(t *testing.T, reporting ...string) (*Assigner, *time.Time, storage.HistoryEntry) {
	t.Helper()
	ctx := context.Background()
	store := tmpStore(t)
	tasks := []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}, {Name: "t1", Addr: "127.0.0.1:11"},
		{Name: "t2", Addr: "127.0.0.1:12"}, {Name: "t3", Addr: "127.0.0.1:13"}}
	stored, err := assign.Initial("kv", tasks, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	stored.Generation = 5
	if err := store.Commit(ctx, "kv", 0, stored); err != nil {
		t.Fatal(err)
	}
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2", "t3")
	for i := range members.peers {
		members.peers[i].RPCAddr = tasks[i].Addr
	}
	cfg := testConfig(t, "a2")
	cfg.RebalanceInterval = time.Second
	// The lease must outlast the test's decisions on a busy machine:
	// nothing here waits for it to lapse.
	cfg.JobLeaseTTL = 30 * time.Second
	a := testAssigner(t, cfg, store, members, nil)
	now := time.Unix(1000, 0)
	a.loads.now = func() time.Time { return now }
	for _, task := range reporting {
		req := assignertest.ReportFor(stored, task, assignertest.Skewed(), 1)
		req.EveryAssigner = true
		if _, err := a.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	a.evaluate(ctx, true) // takes the lease, and the job over
	hist, err := a.history(ctx, "kv", 1)
	if err != nil || len(hist) != 1 || hist[0].Cause != storage.CauseTakeover {
		t.Fatalf("history after the takeover = %v, %v; want the takeover's decision", hist, err)
	}
	return a, &now, hist[0]
}

// A takeover by an Assigner that has every serving task's load records
// the imbalance under it; one that has heard from some of them only (it
// has just started) records none, and says why, instead of a figure of
// the part it saw (four tasks of which one reported showed 4.000).
func TestTakeoverRecordsTheImbalanceItSaw(t *testing.T) {
	_, _, whole := takeoverWithReports(t, "t0", "t1", "t2", "t3")
	if whole.ImbalanceBefore <= 1.1 || whole.ImbalanceAfter != whole.ImbalanceBefore {
		t.Errorf("takeover with every task's load recorded imbalance %.3f -> %.3f; want the skew (above 1.1), unchanged by the takeover",
			whole.ImbalanceBefore, whole.ImbalanceAfter)
	}
	_, _, part := takeoverWithReports(t, "t0")
	if part.ImbalanceBefore != 0 || part.ImbalanceAfter != 0 || !strings.Contains(part.Detail, "3 task(s) serving the job had not reported load") {
		t.Errorf("takeover with one task's load of four recorded imbalance %.3f -> %.3f (%q); want none recorded, saying 3 tasks had not reported",
			part.ImbalanceBefore, part.ImbalanceAfter, part.Detail)
	}
}

// An Assigner that has just started takes no load-driven decision while
// tasks its assignment lists have not reported to it: their load is
// unknown, not zero. Once they have, or once loadWarmup has passed, it
// balances.
func TestFreshAssignerWaitsForEveryTasksLoad(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		after time.Duration // since start
		all   bool          // every task reported
		want  bool          // a load decision is committed
	}{
		{"warming up, one task reported", time.Second, false, false},
		{"warming up, every task reported", time.Second, true, true},
		{"warmed up, one task reported", loadWarmup + time.Second, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, now, _ := takeoverWithReports(t, "t0")
			a.started.Store(now.UnixNano())
			*now = now.Add(tc.after)
			j, err := a.job(ctx, "kv")
			if err != nil {
				t.Fatal(err)
			}
			gen := j.pub.Current().Generation
			reporting := []string{"t0"}
			if tc.all {
				reporting = []string{"t0", "t1", "t2", "t3"}
			}
			for _, task := range reporting {
				req := assignertest.ReportFor(j.pub.Current(), task, assignertest.Skewed(), 1)
				req.EveryAssigner = true
				if _, err := a.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
					t.Fatal(err)
				}
			}
			*now = now.Add(2 * time.Second) // past the reports' window: fresh
			a.balanceAll(ctx)
			if got := j.pub.Current().Generation > gen; got != tc.want {
				t.Errorf("load decision committed = %v, want %v", got, tc.want)
			}
		})
	}
}
