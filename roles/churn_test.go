package roles

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

// movedOnlyFrom returns the first key range whose tasks changed from prev
// to next other than by losing only gone (a departed task) or by gaining
// only came (a joiner); ok when there is none.
func movedOnlyFrom(prev, next *assign.Assignment, gone, came string) (lo, hi assign.SliceKey, ok bool) {
	var at []assign.SliceKey
	for _, a := range []*assign.Assignment{prev, next} {
		for _, s := range a.Slices {
			at = append(at, s.Start)
		}
	}
	at = append(at, assign.KeySpaceEnd)
	slices.Sort(at)
	at = slices.Compact(at)
	for i := 0; i+1 < len(at); i++ {
		ps, ns := prev.Slices[prev.Find(at[i])], next.Slices[next.Find(at[i])]
		var lost, gained []string
		for _, t := range ps.Tasks {
			if !slices.Contains(ns.Tasks, t) {
				lost = append(lost, t)
			}
		}
		for _, t := range ns.Tasks {
			if !slices.Contains(ps.Tasks, t) {
				gained = append(gained, t)
			}
		}
		switch {
		case len(lost) == 0 && len(gained) == 0:
		case gone != "" && slices.Equal(lost, []string{gone}):
		case came != "" && slices.Equal(gained, []string{came}):
		default:
			return at[i], at[i+1], false
		}
	}
	return 0, 0, true
}

// Real agents with load balancing on and skewed load reported: a task that
// dies loses its slices to the survivors and nothing else moves, and a task
// that joins takes its fair share of the key space and nothing else moves,
// however unbalanced the load. Moving load is the periodic decision's job
// (it never runs here: the interval is an hour).
func TestMembershipChangeMovesOnlyWhatItMust(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.RebalanceInterval = time.Hour
	node := startAgent(t, cfg)
	tasks := []string{"t0", "t1", "t2"}
	members := map[string]interface{ Shutdown() error }{}
	for _, name := range tasks {
		members[name] = taskMember(t, "kv", name, node.GossipAddr())
	}
	for _, name := range tasks {
		seesTask(t, node, "kv", name)
	}
	w := watchJob(t, node.RPCAddr(), "kv", false)
	first := w.until(t, "three tasks", hasTasks(tasks...))

	truth := skewed()
	client := reportClient(t, node)
	for _, name := range tasks {
		if _, err := client.ReportLoad(context.Background(), connect.NewRequest(reportFor(first, name, truth, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if got := node.assigner.loads.reporting("kv"); got != 3 {
		t.Fatalf("%d tasks reporting load, want 3", got)
	}
	j, err := node.assigner.job(context.Background(), "kv", false)
	if err != nil {
		t.Fatal(err)
	}
	before := j.pub.Current()

	// t2 dies (no leave).
	if err := members["t2"].Shutdown(); err != nil {
		t.Fatal(err)
	}
	died := w.until(t, "t2 removed after its failure", hasTasks("t0", "t1"))
	if lo, hi, ok := movedOnlyFrom(before, died, "t2", ""); !ok {
		t.Errorf("generation %d -> %d: keys [%#x, %#x) moved though t2 did not serve them", before.Generation, died.Generation, lo, hi)
	}
	if churn, share := assign.Churn(before, died), shareOf(before, "t2"); churn > share+1e-9 {
		t.Errorf("t2's death moved %.4f of the key space; it held %.4f", churn, share)
	}

	// t3 joins.
	taskMember(t, "kv", "t3", node.GossipAddr())
	joined := w.until(t, "t3 joined", hasTasks("t0", "t1", "t3"))
	if lo, hi, ok := movedOnlyFrom(died, joined, "", "t3"); !ok {
		t.Errorf("generation %d -> %d: keys [%#x, %#x) moved to a task other than the joiner", died.Generation, joined.Generation, lo, hi)
	}
	if s := shareOf(joined, "t3"); s < 0.333 || s > 0.334 {
		t.Errorf("t3 joined with %.4f of the key space, want its fair share 1/3", s)
	}
	if churn := assign.Churn(died, joined); churn > 0.334 {
		t.Errorf("t3's joining moved %.4f of the key space, more than its fair share", churn)
	}
}

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
	cfg := testConfig(t, "a1", "")
	cfg.RebalanceInterval = time.Second
	a := testAssigner(t, cfg, store, members, nil)
	lead(t, a, "kv")
	truth := skewed()
	for _, task := range tasks {
		if _, err := a.ReportLoad(ctx, connect.NewRequest(reportFor(stored, task.Name, truth, 1))); err != nil {
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
	if churn := assign.Churn(stored, rec.Current); churn != 0 || !sameRouting(rec.Current, stored) {
		t.Errorf("takeover with unchanged tasks moved %.4f of the key space (%d slices), want the stored %d slices unchanged",
			churn, len(rec.Current.Slices), len(stored.Slices))
	}
}

// Real agents: an Assigner restarted while its job's tasks stay live, and
// with their load reported before its startup grace passes, commits a
// takeover generation that moves no key.
func TestRestartedAssignerTakesOverWithoutChurn(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.RebalanceInterval = time.Hour
	node := startAgent(t, cfg)
	tasks := []string{"t0", "t1", "t2"}
	var first *gossip.Node
	for _, name := range tasks {
		n := taskMember(t, "kv", name, node.GossipAddr())
		if first == nil {
			first = n
		}
	}
	for _, name := range tasks {
		seesTask(t, node, "kv", name)
	}
	before := watchJob(t, node.RPCAddr(), "kv", false).until(t, "three tasks", hasTasks(tasks...))
	node.stop(t)

	cfg.StartupGrace = 3 * time.Second
	cfg.Gossip.Join = []string{first.GossipAddr()}
	node = startAgent(t, cfg)
	for _, name := range tasks {
		seesTask(t, node, "kv", name)
	}
	client := reportClient(t, node)
	truth := skewed()
	for _, name := range tasks {
		if _, err := client.ReportLoad(ctx, connect.NewRequest(reportFor(before, name, truth, 1))); err != nil {
			t.Fatal(err)
		}
	}
	j, err := node.assigner.job(ctx, "kv", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current().Generation; got != before.Generation {
		t.Fatalf("the restarted assigner committed generation %d before the tasks' load was reported; its startup grace is too short for this machine", got)
	}
	after := watchJob(t, node.RPCAddr(), "kv", false).until(t, "the takeover generation", func(a *assign.Assignment) bool {
		return a.Generation > before.Generation
	})
	if churn := assign.Churn(before, after); churn != 0 || !sameRouting(before, after) {
		t.Errorf("takeover generation %d moved %.4f of the key space (%d slices), want generation %d's %d slices unchanged",
			after.Generation, churn, len(after.Slices), before.Generation, len(before.Slices))
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
	cfg := testConfig(t, "a1", "")
	cfg.RebalanceInterval = time.Second
	a := testAssigner(t, cfg, store, members, nil)
	lead(t, a, "kv")
	now := time.Unix(1000, 0)
	a.loads.now = func() time.Time { return now }
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	j, err := a.job(ctx, "kv", false)
	if err != nil {
		t.Fatal(err)
	}
	before := j.pub.Current()
	now = now.Add(time.Second)
	for _, task := range []string{"t0", "t1", "t2"} {
		if _, err := a.ReportLoad(ctx, connect.NewRequest(reportFor(before, task, skewed(), 1))); err != nil {
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
	if lo, hi, ok := movedOnlyFrom(before, after, "t2", ""); !ok || !hasTasks("t0", "t1")(after) {
		t.Errorf("generation %d -> %d (tasks %v): keys [%#x, %#x) moved though t2 did not serve them", before.Generation, after.Generation, taskNames(after), lo, hi)
	}
}
