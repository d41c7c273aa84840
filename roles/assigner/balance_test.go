package assigner

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/metrics/metricstest"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
)

// balanceFixture is a leading Assigner, with load decisions every second
// and a fake clock for its load reports, over a job "kv" of members' tasks
// that has its first assignment. jcfg, if not nil, is stored as the job's
// configuration first.
type balanceFixture struct {
	as  *Assigner
	j   *assignerJob
	now time.Time
}

func newBalanceFixture(t testing.TB, members Members, jcfg *assign.Config) *balanceFixture {
	t.Helper()
	ctx := context.Background()
	store := testStore(t)
	if jcfg != nil {
		if err := store.SetConfig(ctx, "kv", *jcfg); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, "n")
	cfg.RebalanceInterval = time.Second
	// Decisions are taken under the lease: it must outlast the test on a
	// busy machine (nothing here renews it or waits for it to lapse).
	cfg.JobLeaseTTL = 30 * time.Second
	f := &balanceFixture{as: testAssigner(t, cfg, store, members, nil), now: time.Unix(1000, 0)}
	lead(t, f.as, "kv")
	f.as.loads.now = func() time.Time { return f.now }
	if err := f.as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	j, err := f.as.job(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	f.j = j
	return f
}

// report advances the clock a second and has each task report truth as
// measured under the current assignment.
func (f *balanceFixture) report(t testing.TB, truth assign.Load, tasks ...string) {
	t.Helper()
	f.now = f.now.Add(time.Second)
	cur := f.j.pub.Current()
	for _, task := range tasks {
		if _, err := f.as.ReportLoad(context.Background(), connect.NewRequest(assignertest.ReportFor(cur, task, truth, 1))); err != nil {
			t.Fatal(err)
		}
	}
}

// settle runs report-and-decide rounds, at most rounds of them, until a
// round commits nothing.
func (f *balanceFixture) settle(t testing.TB, truth assign.Load, rounds int, tasks ...string) {
	t.Helper()
	for range rounds {
		cur := f.j.pub.Current()
		f.report(t, truth, tasks...)
		f.as.balanceAll(context.Background())
		if f.j.pub.Current().Generation == cur.Generation {
			return
		}
	}
}

// The periodic decision, driven by hand with a fake clock: skewed load is
// balanced over a few decisions, each waiting for reports measured after
// the previous commit, and a decision that would not lower the imbalance
// is not committed.
func TestBalanceDecisions(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	as, j := f.as, f.j
	truth := assignertest.Skewed()
	reportAll := func() {
		t.Helper()
		f.report(t, truth, "t0", "t1", "t2")
	}
	start := assign.Imbalance(j.pub.Current(), truth)
	if start < 2.5 {
		t.Fatalf("initial imbalance %.3f; the test needs a skewed start", start)
	}

	reportAll()
	initial := j.pub.Current()
	gen := initial.Generation
	as.balanceAll(ctx)
	first := j.pub.Current()
	if first.Generation == gen {
		t.Fatalf("no load-driven decision was committed at imbalance %.3f", start)
	}
	if got := assign.Imbalance(first, truth); got >= start {
		t.Fatalf("the first decision left imbalance %.3f, from %.3f", got, start)
	}
	if churn := assign.Churn(initial, first); churn > assign.DefaultMoveChurn+assign.DefaultMergeChurn+1e-9 {
		t.Errorf("one decision moved %.3f of the key space", churn)
	}

	// Every report predates the commit, and none is overdue yet: no
	// decision until the tasks report again.
	f.now = f.now.Add(100 * time.Millisecond)
	as.balanceAll(ctx)
	if got := j.pub.Current().Generation; got != first.Generation {
		t.Fatalf("decided again (generation %d) on load measured before the last commit", got)
	}

	// Report and decide until the imbalance cannot be lowered any more.
	// Every decision is committed only if it lowers the imbalance.
	prev := assign.Imbalance(first, truth)
	settled := false
	for range 20 {
		reportAll()
		before := j.pub.Current()
		as.balanceAll(ctx)
		after := j.pub.Current()
		if after.Generation == before.Generation {
			settled = true
			break
		}
		got := assign.Imbalance(after, truth)
		if got > prev-assign.MinImbalanceGain+1e-9 {
			t.Errorf("generation %d committed at imbalance %.4f after %.4f", after.Generation, got, prev)
		}
		prev = got
	}
	if !settled {
		t.Errorf("still committing after 20 decisions at imbalance %.4f", prev)
	}
	if prev > 1.2 {
		t.Errorf("settled at imbalance %.3f, want below 1.2", prev)
	}
	t.Logf("imbalance %.3f -> %.3f in %d generations", start, prev, j.pub.Current().Generation-gen)
}

// With load balancing off, decisions ignore load: a decision on skewed load
// that would balance it (see TestBalanceDecisions) keeps the assignment.
func TestBalanceOff(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	cfg := testConfig(t, "n")
	cfg.RebalanceInterval = 0
	as := testAssigner(t, cfg, store, members, nil)
	lead(t, as, "kv")
	if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	j, _ := as.job(ctx, "kv")
	first := j.pub.Current()
	for _, task := range []string{"t0", "t1", "t2"} {
		if _, err := as.ReportLoad(ctx, connect.NewRequest(assignertest.ReportFor(first, task, assignertest.Skewed(), 1))); err != nil {
			t.Fatal(err)
		}
	}
	// A membership decision with nothing changed keeps the assignment.
	if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current(); got.Generation != first.Generation {
		t.Errorf("a decision with load balancing off moved keys for load: generation %d", got.Generation)
	}
}

// A task that stops reporting holds load-driven decisions back for at most
// one of its windows after a commit.
func TestFreshWaitsAtMostOneWindow(t *testing.T) {
	l := newLoads(10*time.Second, 0)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.put("kv", "a", &loadReport{window: time.Second}, []string{"a", "b"})
	if !l.fresh("kv", time.Time{}) {
		t.Error("not fresh with no commit")
	}
	commit := now.Add(500 * time.Millisecond)
	for _, tc := range []struct {
		at   time.Duration // after the commit
		want bool
	}{{0, false}, {999 * time.Millisecond, false}, {time.Second, true}} {
		now = commit.Add(tc.at)
		if got := l.fresh("kv", commit); got != tc.want {
			t.Errorf("%v after the commit: fresh = %v, want %v", tc.at, got, tc.want)
		}
	}
	// Fresh at once when every reporting task has reported since the
	// commit; a task that never reported holds nothing back.
	commit = now
	now = commit.Add(100 * time.Millisecond)
	l.put("kv", "b", &loadReport{window: time.Second}, []string{"a", "b"})
	if l.fresh("kv", commit) {
		t.Error("fresh while a has not reported since the commit")
	}
	l.put("kv", "a", &loadReport{window: time.Second}, []string{"a", "b"})
	if !l.fresh("kv", commit) {
		t.Error("not fresh after every task reported since the commit")
	}
	l.put("other", "x", &loadReport{window: time.Second}, []string{"x"})
	if !l.fresh("idle", commit) {
		t.Error("a job without reports is not fresh")
	}
}

// BenchmarkLoadDecision is the Assigner's work for one job at each tick
// beyond the algorithm itself: merging every task's latest report, then
// deciding and measuring the imbalance before and after. 100 tasks report
// on a job of about 100 slices per task with 1,000 hot keys.
func BenchmarkLoadDecision(b *testing.B) {
	const ntasks = 100
	members := &fakeMembers{}
	var names []string
	var live []assign.Task
	for i := range ntasks {
		name := fmt.Sprintf("t%03d", i)
		names = append(names, name)
		live = append(live, assign.Task{Name: name, Addr: fmt.Sprintf("127.0.0.1:%d", 10000+i)})
	}
	members.set("kv", names...)
	as := New(testConfig(b, "n"), nil, nil, members, nil)

	// Power-law load on 1,000 keys over a uniform background.
	parts := []assign.Load{{{Start: 0, End: assign.KeySpaceEnd, Load: 1000}}}
	for i := range 1000 {
		h := assign.HashString(fmt.Sprintf("key:%d", i))
		parts = append(parts, assign.Load{{Start: h, End: h + 1, Load: 1000 / math.Pow(float64(i+1), 1.2)}})
	}
	truth := assign.MergeLoads(parts...)
	jcfg := assign.DefaultConfig()
	jcfg.MaxRedundancy = 4
	cur, _, err := algorithmOf(jcfg).Decide("kv", nil, live, nil, jcfg)
	if err != nil {
		b.Fatal(err)
	}
	for range 10 {
		if cur, _, err = algorithmOf(jcfg).Decide("kv", cur, live, truth, jcfg); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range names {
		if _, err := as.ReportLoad(context.Background(), connect.NewRequest(assignertest.ReportFor(cur, name, truth, 10))); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		load := as.jobLoad("kv")
		next, _, err := algorithmOf(jcfg).Decide("kv", cur, live, load, jcfg)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = assign.Imbalance(cur, load), assign.Imbalance(next, load)
	}
	b.ReportMetric(float64(len(cur.Slices)), "slices")
}

// BenchmarkBalanceAtRest is one periodic load decision (balance) on a
// job at rest: balanced on a load that then stays, about 100 entries per
// task, which each task reports as the sum of a window's requests.
//
//   - noise: every entry's load the same within ±20%, reported at the
//     demo's rate (170 requests per task and window). The imbalance is
//     within the sampling noise: no decision could be committed.
//   - hotkey: the same with one key carrying 1.3 times a task's share,
//     reported at a million requests a window. The key alone sets the
//     imbalance, which no decision can lower, but the noise is too small
//     to tell without deciding.
//
// Neither commits anything.
//
//	go test -run '^$' -bench BalanceAtRest -benchmem ./roles/assigner/
func BenchmarkBalanceAtRest(b *testing.B) {
	for _, n := range []int{3, 100} {
		for _, hot := range []bool{false, true} {
			name := map[bool]string{false: "noise", true: "hotkey"}[hot]
			b.Run(fmt.Sprintf("tasks=%d/%s", n, name), func(b *testing.B) { benchBalanceAtRest(b, n, hot) })
		}
	}
}

func benchBalanceAtRest(b *testing.B, n int, hot bool) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, uint64(n)))
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%03d", i)
	}
	members := &fakeMembers{}
	members.set("kv", names...)
	f := newBalanceFixture(b, members, nil)
	f.as.metricCollectors()
	var truth assign.Load
	w := assign.KeySpaceEnd / uint64(100*n)
	for i := range 100 * n {
		truth = append(truth, assign.LoadEntry{Start: w * uint64(i), End: w * uint64(i+1), Load: 80 + 40*rng.Float64()})
	}
	truth[len(truth)-1].End = assign.KeySpaceEnd
	events := uint64(170)
	if hot {
		k := truth[len(truth)/2].Start + w/2
		// x = 1.3 (total + x) / n
		truth = assign.MergeLoads(truth, assign.Load{{Start: k, End: k + 1, Load: 1.3 * truth.Total() / (float64(n) - 1.3)}})
		events = 1_000_000
	}
	f.settle(b, truth, 30, names...)
	cur := f.j.pub.Current()
	f.now = f.now.Add(time.Second)
	for _, name := range names {
		req := assignertest.ReportFor(cur, name, truth, 1)
		req.Events = events
		if _, err := f.as.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
			b.Fatal(err)
		}
	}
	skipped := func() float64 {
		if f.as.metrics.skips == nil { // a build without the gate
			return 0
		}
		return testutil.ToFloat64(f.as.metrics.skips.WithLabelValues("kv"))
	}
	before := skipped()
	for b.Loop() {
		f.as.balance(ctx, "kv")
	}
	if f.j.pub.Current() != cur {
		b.Fatalf("a decision was committed at rest (imbalance %.3f)", assign.Imbalance(cur, truth))
	}
	b.ReportMetric(float64(len(cur.Slices)), "slices")
	b.ReportMetric(assign.Imbalance(cur, truth), "imbalance")
	b.ReportMetric((skipped()-before)/float64(b.N), "skipped/op")
}

// Tasks advertise capacities in gossip (here: t2 has capacity 3), and the
// periodic decisions balance load per unit of capacity: t2 ends carrying
// about three times the load of each of the others.
func TestBalanceByCapacity(t *testing.T) {
	members := &fakeMembers{}
	caps := map[string]float64{"t0": 1, "t1": 1, "t2": 3}
	for _, name := range []string{"t0", "t1", "t2"} {
		members.peers = append(members.peers, gossip.Peer{Name: "kv/" + name, Roles: []gossip.Role{gossip.RoleTask},
			Job: "kv", Task: name, Status: gossip.StatusAlive, Capacity: caps[name]})
	}
	f := newBalanceFixture(t, members, nil)
	as, j := f.as, f.j
	// An even load: the even first split leaves t2 at a third of its share.
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 1000}}
	live := as.tasksOf("kv", true)
	if len(live) != 3 || live[2].Capacity != 3 {
		t.Fatalf("live tasks %+v; want t2 with the capacity it advertises", live)
	}
	f.settle(t, truth, 30, "t0", "t1", "t2")
	cur := j.pub.Current()
	loads := assign.TaskLoads(cur, truth)
	t.Logf("tasks %v carry %v", cur.Tasks, loads)
	if got := assign.ImbalanceWith(cur, truth, live); got > 1.1 {
		t.Errorf("utilisation imbalance %.3f, want at most 1.1 (loads %v)", got, loads)
	}
	for _, task := range cur.Tasks {
		if task.Capacity != 0 {
			t.Errorf("the committed assignment records capacity %v for %s", task.Capacity, task.Name)
		}
	}
	// GetJob shows what each task advertises, and the imbalance per unit
	// of capacity.
	info := as.jobInfo(j)
	for _, lt := range info.GetLiveTasks() {
		if want := caps[lt.GetName()]; lt.GetCapacity() != want {
			t.Errorf("JobInfo: %s has capacity %v, want %v", lt.GetName(), lt.GetCapacity(), want)
		}
	}
	if got := info.GetImbalance(); got > 1.1 {
		t.Errorf("JobInfo imbalance %.3f, want the utilisation imbalance (at most 1.1)", got)
	}
}

// Tasks advertise memory limits in gossip and report the state they hold
// with their load: a task past its limit (t2, whose even third of the state
// is 1,000 bytes against a limit of 600) has slices moved off it by the
// next periodic decision, which is committed although, the load being
// even, it raises the imbalance; GetJob shows limits and state per task.
func TestBalanceByMemory(t *testing.T) {
	members := &fakeMembers{}
	limits := map[string]int64{"t0": 1 << 20, "t1": 1 << 20, "t2": 600}
	for _, name := range []string{"t0", "t1", "t2"} {
		members.peers = append(members.peers, gossip.Peer{Name: "kv/" + name, Roles: []gossip.Role{gossip.RoleTask},
			Job: "kv", Task: name, Status: gossip.StatusAlive, MemoryLimit: limits[name]})
	}
	f := newBalanceFixture(t, members, nil)
	as, j := f.as, f.j
	// Load and state both even over the key space, in many entries so
	// that slices can move in small steps.
	const n = 300
	truth := make(assign.Load, n)
	for i := range truth {
		truth[i] = assign.LoadEntry{Start: assign.KeySpaceEnd / n * uint64(i), End: assign.KeySpaceEnd / n * uint64(i+1), Load: 10, Bytes: 10}
	}
	truth[n-1].End = assign.KeySpaceEnd
	live := as.tasksOf("kv", true)
	if live[2].MemoryLimit != 600 {
		t.Fatalf("live tasks %+v; want t2 with the memory limit it advertises", live)
	}
	first := j.pub.Current()
	if b := assign.TaskBytes(first, truth); b[2] <= 600 {
		t.Fatalf("t2 holds %v bytes at first; the test needs it past its limit", b[2])
	}
	f.settle(t, truth, 10, "t0", "t1", "t2")
	cur := j.pub.Current()
	held := assign.TaskBytes(cur, truth)
	t.Logf("tasks %v hold %v bytes, imbalance %.3f", cur.Tasks, held, assign.Imbalance(cur, truth))
	if cur.Generation == first.Generation {
		t.Fatal("no decision was committed")
	}
	if over := assign.MemoryOverage(cur, truth, live); over > 0 {
		t.Errorf("tasks hold %v bytes: %v past the limits %v", held, over, limits)
	}
	info := as.jobInfo(j)
	for _, lt := range info.GetLiveTasks() {
		if want := uint64(limits[lt.GetName()]); lt.GetMemoryLimit() != want {
			t.Errorf("JobInfo: %s has memory limit %v, want %v", lt.GetName(), lt.GetMemoryLimit(), want)
		}
	}
	for i, tl := range info.GetTaskLoads() {
		if tl.GetBytes() != held[i] {
			t.Errorf("JobInfo: %s holds %v bytes, want %v", tl.GetTask(), tl.GetBytes(), held[i])
		}
	}
}

// A job's configured algorithm decides for it: consistent-hash places the
// first assignment on its ring, and static makes no load-driven move under
// load that weighted-move would balance (TestBalanceDecisions).
func TestJobAlgorithm(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{assign.AlgorithmConsistentHash, assign.AlgorithmStatic} {
		t.Run(name, func(t *testing.T) {
			jcfg := assign.DefaultConfig()
			jcfg.Algorithm = name
			members := &fakeMembers{}
			members.set("kv", "t0", "t1", "t2")
			f := newBalanceFixture(t, members, &jcfg)
			as, j := f.as, f.j
			first := j.pub.Current()
			alg, _ := assign.AlgorithmByName(name)
			want, _, err := alg.Decide("kv", nil, as.tasksOf("kv", true), nil, jcfg)
			if err != nil {
				t.Fatal(err)
			}
			if !assign.Equal(first, want) {
				t.Fatalf("first assignment has %d slices, not the %d of %s", len(first.Slices), len(want.Slices), name)
			}
			if name != assign.AlgorithmStatic {
				return
			}
			for range 3 {
				f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
				as.balanceAll(ctx)
			}
			if got := j.pub.Current().Generation; got != first.Generation {
				t.Errorf("a static job moved keys for load: generation %d after %d", got, first.Generation)
			}
		})
	}
}

// A frozen job takes no load-driven decision under load that weighted-move
// would balance (TestBalanceDecisions), but a task leaving still moves its
// keys; unfrozen, the load is balanced again.
func TestFrozenJob(t *testing.T) {
	ctx := context.Background()
	jcfg := assign.DefaultConfig()
	jcfg.Frozen = true
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2", "t3")
	f := newBalanceFixture(t, members, &jcfg)
	as, j := f.as, f.j
	balance := func(tasks ...string) {
		t.Helper()
		for range 5 {
			f.report(t, assignertest.Skewed(), tasks...)
			as.balanceAll(ctx)
		}
	}
	first := j.pub.Current()
	balance("t0", "t1", "t2", "t3")
	if got := j.pub.Current(); got.Generation != first.Generation {
		t.Fatalf("a frozen job moved keys for load: generation %d after %d", got.Generation, first.Generation)
	}

	members.set("kv", "t0", "t1", "t2")
	if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	left := j.pub.Current()
	if left.Generation == first.Generation || func() bool { _, ok := left.TaskIndex("t3"); return ok }() {
		t.Fatalf("a frozen job kept the departed t3: generation %d, tasks %v", left.Generation, left.Tasks)
	}

	jcfg.Frozen = false
	if _, err := as.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: api.ConfigToProto(jcfg)})); err != nil {
		t.Fatal(err)
	}
	before := assign.Imbalance(left, assignertest.Skewed())
	balance("t0", "t1", "t2")
	if after := assign.Imbalance(j.pub.Current(), assignertest.Skewed()); after >= before {
		t.Errorf("unfrozen, the imbalance went %.3f -> %.3f; want it balanced", before, after)
	}
}

// An operator's drain (stored in the job's configuration) and a task's own
// (its gossip tag) both move the task's keys off it at once while it stays
// live, and load-driven decisions carry on for the others meanwhile; a
// cordoned task gets nothing new. GetJob marks each.
func TestDrainAndCordon(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2", "t3")
	f := newBalanceFixture(t, members, nil)
	as, j := f.as, f.j
	holds := func(task string) bool {
		_, ok := j.pub.Current().TaskIndex(task)
		return ok
	}

	// The operator drains t1 and cordons t2.
	jcfg := assign.DefaultConfig()
	jcfg.Drained, jcfg.Cordoned = []string{"t1"}, []string{"t2"}
	setConfig := func() {
		t.Helper()
		if _, err := as.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: api.ConfigToProto(jcfg)})); err != nil {
			t.Fatal(err)
		}
		if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
			t.Fatal(err)
		}
	}
	setConfig()
	if holds("t1") {
		t.Fatalf("t1 still holds keys after the drain: tasks %v", j.pub.Current().Tasks)
	}
	cordoned := keysOfTask(j.pub.Current(), "t2")

	// Load decisions go on for the others, and never give t2 more.
	before := j.pub.Current().Generation
	for range 6 {
		f.report(t, assignertest.Skewed(), "t0", "t1", "t2", "t3")
		as.balanceAll(ctx)
	}
	if j.pub.Current().Generation == before {
		t.Errorf("no load-driven decision while t1 is drained")
	}
	if holds("t1") {
		t.Errorf("a load-driven decision gave the drained t1 keys")
	}
	if now := keysOfTask(j.pub.Current(), "t2"); now > cordoned {
		t.Errorf("the cordoned t2 went from %d to %d keys", cordoned, now)
	}

	// t3 drains itself through gossip.
	for i := range members.peers {
		if members.peers[i].Task == "t3" {
			members.peers[i].Draining = true
		}
	}
	if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	if holds("t3") {
		t.Errorf("t3 still holds keys after draining itself")
	}
	info := as.jobInfo(j)
	for _, lt := range info.GetLiveTasks() {
		want := map[string][2]bool{"t1": {true, false}, "t2": {false, true}, "t3": {true, false}}[lt.GetName()]
		if lt.GetDraining() != want[0] || lt.GetCordoned() != want[1] {
			t.Errorf("JobInfo: %s draining=%v cordoned=%v, want %v", lt.GetName(), lt.GetDraining(), lt.GetCordoned(), want)
		}
	}

	// Undrained, t1 takes its share again.
	jcfg.Drained = nil
	setConfig()
	if !holds("t1") {
		t.Errorf("t1 holds nothing after the undrain")
	}
}

// keysOfTask is the slice-key width task serves in a.
func keysOfTask(a *assign.Assignment, task string) uint64 {
	var n uint64
	for _, s := range a.Slices {
		if slices.Contains(s.Tasks, task) {
			n += s.Width()
		}
	}
	return n
}

// With a handoff deadline, a load-driven decision that moves keys between
// live tasks is committed in two generations: the first only adds the
// gaining tasks (so every key keeps the tasks it had), the deadline's
// signal takes the second, which only drops the losing ones and churns
// nothing; the job waits for it meanwhile, and a change of its tasks
// abandons it.
func TestMakeBeforeBreakDecisions(t *testing.T) {
	ctx := context.Background()
	jcfg := assign.DefaultConfig()
	jcfg.HandoffDeadlineMS = 50
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, &jcfg)
	as, j := f.as, f.j
	first := j.pub.Current()
	f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
	as.balanceAll(ctx)
	mid := j.pub.Current()
	if mid.Generation == first.Generation {
		t.Fatal("no load-driven decision")
	}
	if c := assign.Churn(first, mid); c == 0 {
		t.Fatal("the first step moved nothing")
	}
	for _, s := range first.Slices {
		for _, k := range []assign.SliceKey{s.Start, s.End - 1} {
			for _, task := range s.Tasks {
				if !slices.Contains(mid.Slices[mid.Find(k)].Tasks, task) {
					t.Fatalf("key %#x lost %s in the first step", k, task)
				}
			}
		}
	}
	// The job waits for the second step.
	f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
	as.balanceAll(ctx)
	if got := j.pub.Current().Generation; got != mid.Generation {
		t.Fatalf("a load decision went before the second step: generation %d", got)
	}
	select {
	case name := <-as.flips:
		if name != "kv" {
			t.Fatalf("deadline signal for %q", name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no deadline signal")
	}
	if err := as.reconcile(ctx, "kv", triggerFlip); err != nil {
		t.Fatal(err)
	}
	flipped := j.pub.Current()
	if flipped.Generation != mid.Generation+1 || assign.Churn(mid, flipped) != 0 || assign.Equal(mid, flipped) {
		t.Fatalf("second step: generation %d (want %d), churn %g (want 0)", flipped.Generation, mid.Generation+1, assign.Churn(mid, flipped))
	}
	t.Logf("generations %d -> %d (churn %.4f) -> %d (churn 0); slice tasks %d -> %d", first.Generation, mid.Generation,
		assign.Churn(first, mid), flipped.Generation, slots(mid), slots(flipped))

	// A task leaving, or a configuration change, while a second step
	// waits abandons it (each on a fresh job, whose first load decision
	// always moves keys, as above).
	for _, change := range []string{"a task leaves", "the configuration changes"} {
		members := &fakeMembers{}
		members.set("kv", "t0", "t1", "t2")
		f := newBalanceFixture(t, members, &jcfg)
		as, j := f.as, f.j
		f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
		as.balanceAll(ctx)
		as.mu.Lock()
		pending := j.pending
		as.mu.Unlock()
		if pending == nil {
			t.Fatalf("%s: no second step pending after the first load decision", change)
		}
		if change == "a task leaves" {
			members.set("kv", "t0", "t1")
		} else {
			c := jcfg
			c.MoveChurn = 0.05
			if _, err := as.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: api.ConfigToProto(c)})); err != nil {
				t.Fatal(err)
			}
		}
		if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
			t.Fatal(err)
		}
		as.mu.Lock()
		pending = j.pending
		as.mu.Unlock()
		if pending != nil && pending.mid != j.pub.Current().Generation {
			t.Errorf("%s: a stale second step is still pending", change)
		}
		if pending != nil && pending.mid == first.Generation+1 {
			t.Errorf("%s: the second step was not abandoned", change)
		}
		if _, ok := j.pub.Current().TaskIndex("t2"); ok && change == "a task leaves" {
			t.Errorf("t2 left but still holds keys")
		}
	}
}

// slots counts the (slice, task) pairs of a.
func slots(a *assign.Assignment) int {
	n := 0
	for _, s := range a.Slices {
		n += len(s.Tasks)
	}
	return n
}

// The second step of a make-before-break decision goes as soon as every
// gaining task reports ready for the first, long before its deadline; a
// report for an older generation or from a task that gained nothing does
// not count.
func TestMakeBeforeBreakReady(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	f, first, mid, gaining := startMakeBeforeBreak(t, members)
	as, j := f.as, f.j
	ready := func(task string, gen uint64) {
		t.Helper()
		if _, err := as.ReportReady(ctx, connect.NewRequest(&slicerv1.ReportReadyRequest{Job: "kv", Task: task, Generation: gen})); err != nil {
			t.Fatal(err)
		}
	}
	signalled := func() bool {
		select {
		case <-as.flips:
			return true
		default:
			return false
		}
	}
	// A signal before readiness and deadline (a stray one) changes nothing.
	if err := as.reconcile(ctx, "kv", triggerFlip); err != nil || j.pub.Current().Generation != mid.Generation {
		t.Fatalf("an early second step: %v, generation %d", err, j.pub.Current().Generation)
	}
	for _, task := range gaining {
		ready(task, first.Generation) // too old
	}
	if signalled() {
		t.Fatal("reports for the generation before the first step counted")
	}
	for _, task := range gaining {
		ready(task, mid.Generation)
	}
	if !signalled() {
		t.Fatalf("every gaining task %v reported ready, but no second step was signalled", gaining)
	}
	if err := as.reconcile(ctx, "kv", triggerFlip); err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current(); got.Generation != mid.Generation+1 || assign.Churn(mid, got) != 0 {
		t.Errorf("after the readiness reports: generation %d, churn %g", got.Generation, assign.Churn(mid, got))
	}
	if _, err := as.ReportReady(ctx, connect.NewRequest(&slicerv1.ReportReadyRequest{Job: "kv", Task: "t9", Generation: mid.Generation})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a report from a task not in gossip: %v, want FAILED_PRECONDITION", err)
	}
}

// A task failing after every gaining task reported ready, but before the
// second step of a make-before-break decision went, abandons the step: it
// would give the failed task keys that the first step still serves by the
// tasks losing them. The decision for the failure starts from the first
// step and leaves the failed task nothing.
func TestMakeBeforeBreakAbandonedByFailureBeforeTheFlip(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	f, _, mid, gaining := startMakeBeforeBreak(t, members)
	as, j := f.as, f.j
	slices.Sort(gaining)
	for _, task := range gaining {
		if _, err := as.ReportReady(ctx, connect.NewRequest(&slicerv1.ReportReadyRequest{Job: "kv", Task: task, Generation: mid.Generation})); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-as.flips:
	default:
		t.Fatalf("every gaining task %v reported ready, but no second step was signalled", gaining)
	}
	// A gaining task fails before the signalled step is taken.
	dead := gaining[0]
	members.set("kv", slices.DeleteFunc([]string{"t0", "t1", "t2"}, func(s string) bool { return s == dead })...)
	if err := as.reconcile(ctx, "kv", triggerFlip); err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current(); got.Generation != mid.Generation {
		t.Fatalf("the second step went after %s failed: generation %d, tasks %v", dead, got.Generation, taskNames(got))
	}
	if err := as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	got := j.pub.Current()
	if _, ok := got.TaskIndex(dead); ok || got.Generation <= mid.Generation {
		t.Errorf("after the decision for %s failing: generation %d (first step %d), tasks %v", dead, got.Generation, mid.Generation, taskNames(got))
	}
}

// A load-driven decision whose gain is within the sampling noise of the
// reports it was measured on is not committed: an imbalance of 1.26
// measured on a hundred requests per task could be chance alone (4.15
// standard errors for three tasks, 4.15 × √(1.26 × 2/3 / 100), are
// 0.38), the same on a million requests is real. Where even a perfect
// balance would gain no more than the noise, the decision is not
// computed at all (futile): counted as skipped, with no time observed
// for it.
func TestBalanceIgnoresSamplingNoise(t *testing.T) {
	hot := assign.KeySpaceEnd / 3
	truth := assign.Load{{Start: 0, End: hot, Load: 420}, {Start: hot, End: assign.KeySpaceEnd, Load: 580}}
	for _, tc := range []struct {
		events uint64
		commit bool
	}{{0, true}, {100, false}, {1_000_000, true}} {
		t.Run(fmt.Sprintf("%d events", tc.events), func(t *testing.T) {
			members := &fakeMembers{}
			members.set("kv", "t0", "t1", "t2")
			f := newBalanceFixture(t, members, nil)
			cur := f.j.pub.Current()
			if imb := assign.Imbalance(cur, truth); imb < 1.2 {
				t.Fatalf("initial imbalance %.3f; the test needs a skew", imb)
			}
			f.now = f.now.Add(time.Second)
			for _, task := range []string{"t0", "t1", "t2"} {
				req := assignertest.ReportFor(cur, task, truth, 1)
				req.Events = tc.events
				if _, err := f.as.ReportLoad(context.Background(), connect.NewRequest(req)); err != nil {
					t.Fatal(err)
				}
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(f.as.metricCollectors()...)
			computed := func() float64 {
				n, _ := metricstest.Value(t, reg, "slicerd_assigner_decision_duration_seconds", "job", "kv")
				return n
			}
			before := computed()
			f.as.balanceAll(context.Background())
			if committed := f.j.pub.Current().Generation != cur.Generation; committed != tc.commit {
				t.Errorf("imbalance %.3f on %d events per task: committed %v, want %v",
					assign.Imbalance(cur, truth), tc.events, committed, tc.commit)
			}
			skipped, _ := metricstest.Value(t, reg, "slicerd_assigner_load_decisions_skipped_total", "job", "kv")
			if n := computed() - before; n+skipped != 1 || (skipped == 1) == tc.commit {
				t.Errorf("%v decisions computed and %v skipped; want one %s", n, skipped, map[bool]string{true: "computed", false: "skipped"}[tc.commit])
			}
		})
	}
}

// A configuration an operator sets applies in full at once: a decision
// under it with the measured load is committed whatever it does to the
// imbalance, where a load decision on the same even load commits nothing.
func TestSetConfigDecidesInFull(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 3000}}
	f.settle(t, truth, 20, "t0", "t1", "t2")
	before := f.j.pub.Current()
	perTask := len(before.Slices) / 3

	cfg := assign.DefaultConfig()
	cfg.MinSlicesPerTask, cfg.MaxSlicesPerTask = 2*perTask+10, 2*perTask+60
	f.report(t, truth, "t0", "t1", "t2")
	f.as.balanceAll(ctx)
	if f.j.pub.Current().Generation != before.Generation {
		t.Fatal("a load decision on even load committed")
	}
	if err := f.as.store.SetConfig(ctx, "kv", cfg); err != nil {
		t.Fatal(err)
	}
	f.as.mu.Lock()
	f.j.cfg, f.j.configured = cfg, true
	f.as.mu.Unlock()
	f.report(t, truth, "t0", "t1", "t2")
	f.as.balanceAll(ctx)
	if got := f.j.pub.Current(); got.Generation != before.Generation {
		t.Fatalf("a load decision committed the new configuration (%d slices) though it gains nothing", len(got.Slices))
	}
	if err := f.as.reconcile(ctx, "kv", triggerConfig); err != nil {
		t.Fatal(err)
	}
	after := f.j.pub.Current()
	t.Logf("%d slices → %d under min %d per task", len(before.Slices), len(after.Slices), cfg.MinSlicesPerTask)
	if after.Generation == before.Generation || len(after.Slices) <= len(before.Slices) {
		t.Fatalf("the configuration decision left %d slices (generation %d → %d); want more, toward %d per task",
			len(after.Slices), before.Generation, after.Generation, cfg.MinSlicesPerTask)
	}
}

// Only settings the algorithm alone applies get a configuration decision
// of their own; drains, cordons, pins, redundancy and freezing are
// membership decisions' business.
func TestTuningChanged(t *testing.T) {
	base := assign.DefaultConfig()
	for _, tc := range []struct {
		name   string
		change func(*assign.Config)
		want   bool
	}{
		{"nothing", func(*assign.Config) {}, false},
		{"a drain", func(c *assign.Config) { c.Drained = []string{"t0"} }, false},
		{"a cordon", func(c *assign.Config) { c.Cordoned = []string{"t0"} }, false},
		{"redundancy", func(c *assign.Config) { c.MaxRedundancy = 3 }, false},
		{"freezing", func(c *assign.Config) { c.Frozen = true }, false},
		{"slices per task", func(c *assign.Config) { c.MinSlicesPerTask, c.MaxSlicesPerTask = 10, 20 }, true},
		{"the move churn", func(c *assign.Config) { c.MoveChurn = 0.2 }, true},
		{"the split factor", func(c *assign.Config) { c.SplitLoadFactor = 3 }, true},
		{"the algorithm", func(c *assign.Config) { c.Algorithm = assign.AlgorithmConsistentHash }, true},
	} {
		next := base
		next.Drained, next.Cordoned = slices.Clone(base.Drained), slices.Clone(base.Cordoned)
		tc.change(&next)
		if got := tuningChanged(base, next); got != tc.want {
			t.Errorf("%s: tuningChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// startMakeBeforeBreak starts a leading Assigner of job kv over members'
// tasks t0, t1 and t2, with make-before-break at its longest deadline, and
// takes a load decision on a skewed load: a make-before-break decision,
// whose first step it returns with the assignment before it and the tasks
// that step has gaining.
func startMakeBeforeBreak(t *testing.T, members *fakeMembers) (f *balanceFixture, first, mid *assign.Assignment, gaining []string) {
	t.Helper()
	jcfg := assign.DefaultConfig()
	jcfg.HandoffDeadlineMS = assign.MaxHandoffDeadlineMS
	members.set("kv", "t0", "t1", "t2")
	f = newBalanceFixture(t, members, &jcfg)
	first = f.j.pub.Current()
	f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
	f.as.balanceAll(context.Background())
	mid = f.j.pub.Current()
	f.as.mu.Lock()
	pending := f.j.pending
	f.as.mu.Unlock()
	if pending == nil || mid.Generation == first.Generation {
		t.Fatal("no make-before-break decision")
	}
	for task := range pending.gaining {
		gaining = append(gaining, task)
	}
	return f, first, mid, gaining
}
