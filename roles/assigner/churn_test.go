package assigner

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
)

// An Assigner taking a job over with the same live tasks keeps the stored
// assignment, even with load reported that a load-driven decision would
// act on: the takeover generation moves no key.
func TestTakeoverWithLoadMovesNothing(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	tasks := []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}, {Name: "t1", Addr: "127.0.0.1:11"}, {Name: "t2", Addr: "127.0.0.1:12"}}
	stored, err := assign.Initial("kv", tasks, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	stored.Generation = 5
	if err := store.Commit(ctx, "kv", 0, stored); err != nil {
		t.Fatal(err)
	}
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	for i := range members.peers {
		members.peers[i].RPCAddr = tasks[i].Addr
	}
	cfg := testConfig(t, "a1")
	cfg.RebalanceInterval = time.Second
	a := testAssigner(t, cfg, store, members, nil)
	lead(t, a, "kv")
	truth := assignertest.Skewed()
	for _, task := range tasks {
		if _, err := a.ReportLoad(ctx, connect.NewRequest(assignertest.ReportFor(stored, task.Name, truth, 1))); err != nil {
			t.Fatal(err)
		}
	}

	a.takeover(ctx, "kv")
	rec, err := store.Load(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Current.Generation != 6 {
		t.Fatalf("takeover stored generation %d, want 6", rec.Current.Generation)
	}
	if churn := assign.Churn(stored, rec.Current); churn != 0 || !assignertest.SameRouting(rec.Current, stored) {
		t.Errorf("takeover with unchanged tasks moved %.4f of the key space (%d slices), want the stored %d slices unchanged",
			churn, len(rec.Current.Slices), len(stored.Slices))
	}
}

// A load-driven decision taken while a task has gone from gossip but the
// membership decision has not run yet commits nothing: the membership
// decision then moves only the departed task's keys.
func TestLoadDecisionWaitsForMembershipDecision(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	cfg := testConfig(t, "a1")
	cfg.RebalanceInterval = time.Second
	a := testAssigner(t, cfg, store, members, nil)
	lead(t, a, "kv")
	now := time.Unix(1000, 0)
	a.loads.now = func() time.Time { return now }
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	j, err := a.job(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	before := j.pub.Current()
	now = now.Add(time.Second)
	for _, task := range []string{"t0", "t1", "t2"} {
		if _, err := a.ReportLoad(ctx, connect.NewRequest(assignertest.ReportFor(before, task, assignertest.Skewed(), 1))); err != nil {
			t.Fatal(err)
		}
	}

	members.set("kv", "t0", "t1")
	if err := a.reconcile(ctx, "kv", triggerLoad); err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current(); got.Generation != before.Generation {
		t.Fatalf("a load-driven decision with t2 gone committed generation %d (tasks %v); want it left to the membership decision",
			got.Generation, taskNames(got))
	}
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	after := j.pub.Current()
	if lo, hi, ok := assignertest.MovedOnlyFrom(before, after, "t2", ""); !ok || !hasTasks("t0", "t1")(after) {
		t.Errorf("generation %d -> %d (tasks %v): keys [%#x, %#x) moved though t2 did not serve them", before.Generation, after.Generation, taskNames(after), lo, hi)
	}
}
