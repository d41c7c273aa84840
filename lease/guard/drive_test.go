package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/guard"
	"github.com/slicerd/slicerd/lease/leasetest"
)

func embedded(t *testing.T) lease.Manager {
	m, _ := leasetest.Embedded(t, lease.EmbeddedOptions{})
	return m
}

// guardAt1 returns an embedded manager whose job kv's lease a1 holds, the
// driver a1 moves the guard with, and that lease; the guard is set at
// generation 1.
func guardAt1(t *testing.T) (lease.Manager, *guard.Driver, lease.Job) {
	t.Helper()
	m := embedded(t)
	held, err := m.Acquire(t.Context(), "kv", "a1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := &guard.Driver{Leases: m, Bridged: true, BridgeWait: 50 * time.Millisecond, Log: testlog.Logger(t)}
	if mv, err := d.Step(t.Context(), held, 1); err != nil || mv.To != 1 {
		t.Fatalf("Step to 1 = %+v, %v; want the guard set at 1", mv, err)
	}
	return m, d, held
}

func state(t *testing.T, m lease.Manager, kind lease.Kind) lease.State {
	t.Helper()
	st, err := m.State(t.Context(), "kv", kind)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A move interrupted after its recall is finished before the guard goes
// further: with the guard at 1 recalled and the bridge 1→2 held by t0, a
// step towards generation 3 sets the guard to 2, where t0's bridge agrees
// with it, and only then moves it on, through the bridge 2→3, once t0's
// bridge 1→2 is gone. (The driver before package guard set the guard to
// 3 beside the open bridge 1→2: t0 kept keys generation 3 gives others.)
func TestStepFinishesAnInterruptedMove(t *testing.T) {
	ctx := t.Context()
	m, d, held := guardAt1(t)
	if _, err := m.Read(ctx, "kv", lease.Guard, "t0", "", lease.GuardValue(1), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The move 1→2 up to its recall, then its driver is gone.
	b12 := lease.Value{From: 1, To: 2}
	if err := m.Set(ctx, held, lease.Bridge, b12); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(ctx, "kv", lease.Bridge, "t0", "", b12, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Unread(ctx, "kv", lease.Guard, "t0", "", lease.GuardValue(1)); err != nil {
		t.Fatal(err)
	}
	if err := m.Recall(ctx, held, lease.Guard); err != nil {
		t.Fatal(err)
	}

	// Generation 3 is committed; the next step finishes the move to 2.
	mv, err := d.Step(ctx, held, 3)
	if err != nil {
		t.Fatal(err)
	}
	if mv.To != 2 {
		t.Fatalf("Step to 3 from guard 1 recalled, bridge 1→2 held = %+v; want it to finish the move to 2 first", mv)
	}
	if g := state(t, m, lease.Guard); g.Recalled || g.Value != lease.GuardValue(2) {
		t.Fatalf("guard %+v; want open at 2", g)
	}
	if _, err := m.Read(ctx, "kv", lease.Bridge, "t0", "", b12, 5*time.Second); err != nil {
		t.Fatalf("t0 renewing its bridge 1→2 beside guard 2: %v", err)
	}

	// The move on to 3 cannot set the guard while t0 holds the bridge
	// 1→2, which it does not give up: the step waits for it.
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := d.Step(sctx, held, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Step to 3 with t0 holding bridge 1→2 = %v; want it to wait for t0", err)
	}
	if g := state(t, m, lease.Guard); g.Value != lease.GuardValue(2) {
		t.Fatalf("guard %+v while t0 holds the bridge 1→2; want it still at 2", g)
	}
	if err := m.Unread(ctx, "kv", lease.Bridge, "t0", "", b12); err != nil {
		t.Fatal(err)
	}
	// Now it goes through the bridge 2→3 (t0 no longer reads the guard).
	if mv, err := d.Step(ctx, held, 3); err != nil || mv.To != 3 {
		t.Fatalf("Step to 3 = %+v, %v", mv, err)
	}
	if g, b := state(t, m, lease.Guard), state(t, m, lease.Bridge); g.Recalled || g.Value != lease.GuardValue(3) || b.Value != (lease.Value{From: 2, To: 3}) {
		t.Fatalf("guard %+v, bridge %+v; want guard open at 3 after the bridge 2→3", g, b)
	}
}
