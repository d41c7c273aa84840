package assigner

import (
	"context"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
)

// Another Assigner commits between this one's read and its write: the
// conditional write fails, and the Assigner re-reads, rebases its decision
// on the newer assignment and commits after it (Slicer §4.1). Nothing
// committed is lost and generations only grow.
func TestAssignerRebasesOnConflict(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)

	gcfg := gossip.TestConfig("assigner-1")
	gcfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1"}
	node, err := gossip.Start(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	taskMember(t, "kv", "t0", node.GossipAddr())
	taskMember(t, "kv", "t1", node.GossipAddr())

	first, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	first.Generation = 5
	if err := store.Commit(ctx, "kv", 0, first); err != nil {
		t.Fatal(err)
	}

	stopping := make(chan struct{})
	a := testAssigner(t, testConfig(t, "assigner-1"), store, node, stopping)
	lead(t, a, "kv")
	j, err := a.job(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current().Generation; got != 5 {
		t.Fatalf("assigner loaded generation %d, want 5", got)
	}

	// The other Assigner's decision: generation 6, t0 at a new address.
	other := first.Clone()
	other.Generation = 6
	other.Tasks[0].Addr = "127.0.0.1:11"
	if err := store.Commit(ctx, "kv", 5, other); err != nil {
		t.Fatal(err)
	}

	testwait.For(t, "gossip to see both tasks", func() bool { return len(a.tasksOf("kv", true)) == 2 })
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	rec, err := store.Load(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Current.Generation != 7 || rec.Previous.Generation != 6 {
		t.Fatalf("stored generations %d (previous %d), want 7 after 6", rec.Current.Generation, rec.Previous.Generation)
	}
	if !assign.Equal(rec.Previous, other) {
		t.Errorf("the other assigner's commit was overwritten: previous is %v", rec.Previous)
	}
	if names := taskNames(rec.Current); len(names) != 2 {
		t.Errorf("rebased assignment has tasks %v, want t0 and t1", names)
	}
	if got := j.pub.Current(); got.Generation != 7 {
		t.Errorf("published generation %d, want 7", got.Generation)
	}
}
