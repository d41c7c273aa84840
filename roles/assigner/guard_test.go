package assigner

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
)

func readLease(t *testing.T, a *Assigner, task string, kind slicerv1.LeaseKind, from, to uint64, ttl time.Duration) *slicerv1.ReadLeaseResponse {
	t.Helper()
	req := &slicerv1.ReadLeaseRequest{Job: "kv", Task: task, Kind: kind, TtlMs: uint32(ttl.Milliseconds())}
	if from != 0 {
		req.Value = &slicerv1.LeaseValue{FromGeneration: from, ToGeneration: to}
	}
	resp, err := a.ReadLease(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("ReadLease(%s, %v, %d→%d): %v", task, kind, from, to, err)
	}
	return resp.Msg
}

// A strong job's guard follows its generations: set at once on a job
// without one, moved through a bridge that the surviving reader takes, and
// moved only once the reader that died let its read lease expire.
func TestGuardFollowsGenerations(t *testing.T) {
	ctx, a, members, guardAt := startStrongGuard(t)

	const ttl = 300 * time.Millisecond
	if r := readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_GUARD, 1, 1, ttl); !r.GetGranted() || !r.GetStrong() {
		t.Fatalf("t0's guard read: %v", r)
	}
	deadSent := time.Now()
	if r := readLease(t, a, "t1", slicerv1.LeaseKind_LEASE_KIND_GUARD, 1, 1, ttl); !r.GetGranted() {
		t.Fatalf("t1's guard read: %v", r)
	}
	if r := readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_GUARD, 2, 2, ttl); r.GetGranted() || r.GetGuard().GetValue().GetToGeneration() != 1 {
		t.Fatalf("a read of a guard value not set was granted, or the state is wrong: %v", r)
	}

	// t1 dies holding the guard; the next generation drops it.
	members.set("kv", "t0")
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	if gen := a.jobs["kv"].pub.Current().Generation; gen != 2 {
		t.Fatalf("after t1 died the job is at generation %d, want 2", gen)
	}
	// t0 keeps renewing the guard until the bridge opens, takes the
	// bridge, and lets the guard go.
	testwait.For(t, "t0 to take the bridge 1→2", func() bool {
		readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_GUARD, 1, 1, ttl)
		return readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_BRIDGE, 1, 2, ttl).GetGranted()
	})
	if _, err := a.ReleaseLease(ctx, connect.NewRequest(&slicerv1.ReleaseLeaseRequest{Job: "kv", Task: "t0", Kind: slicerv1.LeaseKind_LEASE_KIND_GUARD})); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the guard to move to generation 2", guardAt(2))
	// A safety bound, not a speed claim: t1 may use the guard for its TTL
	// from when it sent its read, so the guard cannot have moved sooner.
	if held := time.Since(deadSent); held < ttl {
		t.Fatalf("the guard moved %v after t1's read was sent, before its TTL of %v ran out", held, ttl)
	}
	if r := readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_GUARD, 2, 2, ttl); !r.GetGranted() {
		t.Fatalf("t0's read of the new guard: %v", r)
	}
}

// A task's release that reaches the lease manager late — sent to an
// Assigner that was paused, or held up in the network, after the task gave
// up waiting for it — names the read it released, and leaves alone the
// read of the next guard the task took since. Were that read ended, the
// next move would find no reader of the guard and set the guard past it
// while the task still used the keys it gave.
func TestLateReleaseLeavesNewerRead(t *testing.T) {
	ctx, a, members, guardAt := startStrongGuard(t)

	const short, long = 300 * time.Millisecond, time.Minute
	for _, task := range []string{"t0", "t1"} {
		if r := readLease(t, a, task, slicerv1.LeaseKind_LEASE_KIND_GUARD, 1, 1, short); !r.GetGranted() {
			t.Fatalf("%s's guard read: %v", task, r)
		}
	}
	members.set("kv", "t0")
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "t0 to take the bridge 1→2", func() bool {
		readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_GUARD, 1, 1, short)
		return readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_BRIDGE, 1, 2, long).GetGranted()
	})
	// t0 releases the guard at 1; the release is held up, and t0 goes on
	// without it. The guard moves once t0's read of it expires.
	late := connect.NewRequest(&slicerv1.ReleaseLeaseRequest{Job: "kv", Task: "t0", Kind: slicerv1.LeaseKind_LEASE_KIND_GUARD,
		Value: &slicerv1.LeaseValue{FromGeneration: 1, ToGeneration: 1}})
	testwait.For(t, "the guard to move to generation 2", guardAt(2))
	if r := readLease(t, a, "t0", slicerv1.LeaseKind_LEASE_KIND_GUARD, 2, 2, long); !r.GetGranted() {
		t.Fatalf("t0's read of the guard at 2: %v", r)
	}
	if _, err := a.ReleaseLease(ctx, connect.NewRequest(&slicerv1.ReleaseLeaseRequest{Job: "kv", Task: "t0", Kind: slicerv1.LeaseKind_LEASE_KIND_BRIDGE,
		Value: &slicerv1.LeaseValue{FromGeneration: 1, ToGeneration: 2}})); err != nil {
		t.Fatal(err)
	}

	// The release of the guard at 1 arrives now.
	if _, err := a.ReleaseLease(ctx, late); err != nil {
		t.Fatal(err)
	}
	readers, err := a.leases.Readers(ctx, "kv", lease.Guard)
	if err != nil {
		t.Fatal(err)
	}
	if len(readers) != 1 || readers[0] != (lease.Reader{Name: "t0", Value: lease.GuardValue(2)}) {
		t.Fatalf("readers of the guard after a late release of t0's read at 1: %+v; want t0's read at 2, which t0 uses for a minute", readers)
	}
}

// ReadLease refuses a job that is not strong, a bad kind, and a task
// calling far too often.
func TestReadLeaseRefuses(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	if err := store.SetConfig(ctx, "kv", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	members := &fakeMembers{}
	members.set("kv", "t0")
	a := testAssigner(t, testConfig(t, "a1"), store, members, nil)
	read := func(kind slicerv1.LeaseKind, v *slicerv1.LeaseValue) error {
		_, err := a.ReadLease(ctx, connect.NewRequest(&slicerv1.ReadLeaseRequest{Job: "kv", Task: "t0", Kind: kind, Value: v, TtlMs: 1000}))
		return err
	}
	if err := read(slicerv1.LeaseKind_LEASE_KIND_GUARD, &slicerv1.LeaseValue{FromGeneration: 1, ToGeneration: 1}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a guard read of an affinity job: %v, want FAILED_PRECONDITION", err)
	}
	if err := read(0, nil); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("kind 0: %v, want INVALID_ARGUMENT", err)
	}
	var err error
	for range 2 * leaseCallBurst {
		if err = read(slicerv1.LeaseKind_LEASE_KIND_GUARD, nil); err != nil {
			break
		}
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("%d calls in a row: %v, want RESOURCE_EXHAUSTED", 2*leaseCallBurst, err)
	}
}

// startStrongGuard starts a leading Assigner of a strong job kv of tasks
// t0 and t1 (its guard driver running until the test ends), commits the
// job's first assignment and waits for its guard at generation 1. It
// returns the context the driver runs under, the Assigner, its members
// and a condition that holds once the guard is open at a generation. The
// bridge wait is a minute: a reader that never takes the bridge must end
// the wait by covering, not by time.
func startStrongGuard(t *testing.T) (context.Context, *Assigner, *fakeMembers, func(gen uint64) func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	store := testStore(t)
	cfg := assign.Config{MinRedundancy: 1, MaxRedundancy: 1, Consistency: assign.Strong}
	if err := store.SetConfig(ctx, "kv", cfg); err != nil {
		t.Fatal(err)
	}
	members := &fakeMembers{}
	members.set("kv", "t0", "t1")
	acfg := testConfig(t, "a1")
	acfg.BridgeWait = time.Minute
	a := testAssigner(t, acfg, store, members, nil)
	lead(t, a, "kv")
	a.mu.Lock()
	a.runCtx = ctx
	a.mu.Unlock()
	t.Cleanup(func() { cancel(); a.drivers.Wait() })
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	guardAt := func(gen uint64) func() bool {
		return func() bool {
			st, err := a.leases.State(ctx, "kv", lease.Guard)
			return err == nil && st.Set && !st.Recalled && st.Value == lease.GuardValue(gen)
		}
	}
	testwait.For(t, "the guard to be set at generation 1", guardAt(1))
	return ctx, a, members, guardAt
}
