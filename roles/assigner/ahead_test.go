package assigner

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/storage"
)

// A store that went back (restored from an older copy) holds the job
// below the generation its tasks hold, in the same incarnation, and they
// ignore older generations of it. A task's load report says what it
// holds: the Assigner's next decision, asked for at once, commits above
// it, with the stored assignment's tasks and keys, and records why. A
// report of another incarnation, or implausibly far ahead, or at a
// generation the store has, moves nothing.
func TestStoreThatWentBackContinuesAboveItsTasks(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1")
	f := newBalanceFixture(t, members, nil)
	cur := f.j.pub.Current()
	report := func(gen uint64, inc string) bool { return f.reportHeld(t, cur, gen, inc, 0) }
	decide := func() { f.decideLoad(t) }

	for _, tc := range []struct {
		name string
		gen  uint64
		inc  string
	}{
		{"the stored generation", cur.Generation, cur.Incarnation},
		{"another incarnation", cur.Generation + 40, storage.NewIncarnation()},
		{"no incarnation", cur.Generation + 40, ""},
		{"implausibly far ahead", cur.Generation + maxGenerationJump + 1, cur.Incarnation},
	} {
		if report(tc.gen, tc.inc) {
			t.Errorf("%s: a decision was asked for", tc.name)
		}
		decide()
		if got := f.j.pub.Current(); got.Generation != cur.Generation {
			t.Fatalf("%s: generation %d → %d", tc.name, cur.Generation, got.Generation)
		}
	}

	if !report(cur.Generation+40, cur.Incarnation) {
		t.Fatal("a task holding a newer generation asked for no decision")
	}
	decide()
	next := f.j.pub.Current()
	if next.Generation != cur.Generation+41 {
		t.Fatalf("after a task reported generation %d: generation %d, want %d", cur.Generation+40, next.Generation, cur.Generation+41)
	}
	if assign.Churn(cur, next) != 0 || next.Incarnation != cur.Incarnation {
		t.Errorf("the renumbered assignment moved keys (churn %g) or changed incarnation (%q → %q)", assign.Churn(cur, next), cur.Incarnation, next.Incarnation)
	}
	rec, err := storage.LoadCurrent(ctx, f.as.store, "kv")
	if err != nil || rec.Current.Generation != next.Generation {
		t.Fatalf("stored: %v, %v; want generation %d", rec.Current, err, next.Generation)
	}
	h, err := f.as.history(ctx, "kv", 1)
	if err != nil || len(h) != 1 || h[0].Cause != storage.CauseRenumber {
		t.Fatalf("history: %+v, %v; want one %q entry", h, err, storage.CauseRenumber)
	}
	t.Logf("recorded: %s", h[0].Detail)

	// Caught up: the same report again renumbers nothing.
	if report(cur.Generation+40, cur.Incarnation) {
		t.Error("a report below the current generation asked for a decision")
	}
	decide()
	if got := f.j.pub.Current(); got.Generation != next.Generation {
		t.Errorf("once past the task's generation: %d → %d", next.Generation, got.Generation)
	}
}

// A store restored from an older copy can reach, with its own commits, a
// generation its tasks already hold, with other content: the same
// number, in the same incarnation, so nobody takes the store's. The
// checksum a task reports with its generation tells the two apart: the
// job's next decision continues above it. A report of the same content
// moves nothing.
func TestSameGenerationWithOtherContentContinuesAbove(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1")
	f := newBalanceFixture(t, members, nil)
	cur := f.j.pub.Current()
	report := func(sum uint64) bool { return f.reportHeld(t, cur, cur.Generation, cur.Incarnation, sum) }
	decide := func() *assign.Assignment { return f.decideLoad(t) }

	if report(api.Checksum(cur)) || report(0) {
		t.Fatal("a report of the current content, or of no checksum, asked for a decision")
	}
	if got := decide(); got.Generation != cur.Generation {
		t.Fatalf("generation %d → %d on reports of the current content", cur.Generation, got.Generation)
	}
	if !report(api.Checksum(cur) + 1) {
		t.Fatal("a report of the current generation with other content asked for no decision")
	}
	next := decide()
	if next.Generation != cur.Generation+1 || assign.Churn(cur, next) != 0 {
		t.Fatalf("after a report of generation %d with other content: generation %d, churn %g; want %d, 0",
			cur.Generation, next.Generation, assign.Churn(cur, next), cur.Generation+1)
	}
	h, err := f.as.history(ctx, "kv", 1)
	if err != nil || len(h) != 1 || h[0].Cause != storage.CauseRenumber {
		t.Fatalf("history: %+v, %v; want one %q entry", h, err, storage.CauseRenumber)
	}
	if got := decide(); got.Generation != next.Generation {
		t.Errorf("once past it: generation %d → %d", next.Generation, got.Generation)
	}
}

// A report of a generation the store holds, but this Assigner's view has
// not caught up with yet (another Assigner's commit, seen late), is no
// restore: the Assigner catches up with the store and renumbers nothing.
func TestLaggingViewIsNotAStoreThatWentBack(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1")
	f := newBalanceFixture(t, members, nil)
	cur := f.j.pub.Current()
	if err := f.as.store.Commit(ctx, "kv", cur.Generation, takeoverAssignment(cur)); err != nil {
		t.Fatal(err)
	}
	rec, err := storage.LoadCurrent(ctx, f.as.store, "kv")
	if err != nil {
		t.Fatal(err)
	}
	stored := rec.Current
	if f.reportHeld(t, stored, stored.Generation, stored.Incarnation, api.Checksum(stored)) {
		t.Fatal("a report of the store's own generation, ahead of the Assigner's view, asked for a renumbering")
	}
	if got := f.j.pub.Current(); got.Generation != stored.Generation {
		t.Errorf("the view stayed at generation %d; the store holds %d", got.Generation, stored.Generation)
	}
	f.decideLoad(t)
	h, err := f.as.history(ctx, "kv", 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h {
		if e.Cause == storage.CauseRenumber {
			t.Errorf("generation %d recorded as a renumbering: %s", e.Generation, e.Detail)
		}
	}
}

// reportHeld has t0 and t1 report an even load as measured under a, each
// saying it holds generation gen of incarnation inc with checksum sum,
// and returns whether the reports asked Run for a renumbering decision.
func (f *balanceFixture) reportHeld(t *testing.T, a *assign.Assignment, gen uint64, inc string, sum uint64) bool {
	t.Helper()
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 10}}
	f.now = f.now.Add(time.Second)
	for _, task := range []string{"t0", "t1"} {
		req := assignertest.ReportFor(a, task, truth, 1)
		req.Generation, req.Incarnation, req.Checksum = gen, inc, sum
		if _, err := f.as.ReportLoad(context.Background(), connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.as.aheads:
		return true
	default:
		return false
	}
}

// decideLoad takes a load decision on kv and returns the assignment after it.
func (f *balanceFixture) decideLoad(t *testing.T) *assign.Assignment {
	t.Helper()
	if err := f.as.reconcile(context.Background(), "kv", triggerLoad); err != nil {
		t.Fatal(err)
	}
	return f.j.pub.Current()
}
