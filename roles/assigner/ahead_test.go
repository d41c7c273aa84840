package assigner

import (
	"context"
	"testing"

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
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 10}}

	report := func(gen uint64, inc string) {
		t.Helper()
		f.now = f.now.Add(1e9)
		for _, task := range []string{"t0", "t1"} {
			req := assignertest.ReportFor(cur, task, truth, 1)
			req.Generation, req.Incarnation = gen, inc
			if _, err := f.as.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
				t.Fatal(err)
			}
		}
	}
	signalled := func() bool {
		select {
		case <-f.as.aheads:
			return true
		default:
			return false
		}
	}
	decide := func() {
		t.Helper()
		if err := f.as.reconcile(ctx, "kv", triggerLoad); err != nil {
			t.Fatal(err)
		}
	}

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
		report(tc.gen, tc.inc)
		if signalled() {
			t.Errorf("%s: a decision was asked for", tc.name)
		}
		decide()
		if got := f.j.pub.Current(); got.Generation != cur.Generation {
			t.Fatalf("%s: generation %d → %d", tc.name, cur.Generation, got.Generation)
		}
	}

	report(cur.Generation+40, cur.Incarnation)
	if !signalled() {
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
	report(cur.Generation+40, cur.Incarnation)
	if signalled() {
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
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 10}}
	report := func(sum uint64) bool {
		t.Helper()
		f.now = f.now.Add(1e9)
		for _, task := range []string{"t0", "t1"} {
			req := assignertest.ReportFor(cur, task, truth, 1)
			req.Incarnation, req.Checksum = cur.Incarnation, sum
			if _, err := f.as.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
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
	decide := func() *assign.Assignment {
		t.Helper()
		if err := f.as.reconcile(ctx, "kv", triggerLoad); err != nil {
			t.Fatal(err)
		}
		return f.j.pub.Current()
	}

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
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 10}}
	f.now = f.now.Add(1e9)
	for _, task := range []string{"t0", "t1"} {
		req := assignertest.ReportFor(stored, task, truth, 1)
		req.Incarnation, req.Checksum = stored.Incarnation, api.Checksum(stored)
		if _, err := f.as.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.as.aheads:
		t.Fatal("a report of the store's own generation, ahead of the Assigner's view, asked for a renumbering")
	default:
	}
	if got := f.j.pub.Current(); got.Generation != stored.Generation {
		t.Errorf("the view stayed at generation %d; the store holds %d", got.Generation, stored.Generation)
	}
	if err := f.as.reconcile(ctx, "kv", triggerLoad); err != nil {
		t.Fatal(err)
	}
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
