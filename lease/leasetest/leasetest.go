// Package leasetest is the contract every lease.Manager keeps, as a test
// suite: each implementation runs it from its own tests, so the embedded
// and etcd managers are held to the same guarantees (see the lease package
// documentation), including that the store they are paired with fences
// commits by their job leases. It is for tests only.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// Pair is a manager and the store whose fenced commits check its job
// leases, as slicerd pairs them.
type Pair struct {
	M lease.Manager
	S interface {
		storage.Store
		storage.Fencer
	}
}

// Opener opens what the suite runs against.
type Opener struct {
	// Open returns a manager and store over new, empty state. The suite
	// closes both.
	Open func(t *testing.T) Pair
	// Peer returns another manager of the same leases, as a second slicerd
	// process would open it; nil when the implementation serves one
	// process (the embedded manager), and the suite then shares p.M.
	Peer func(t *testing.T, p Pair) lease.Manager
	// Reopen closes p and opens its state again, as a restarted process
	// would; nil skips the checks across restarts.
	Reopen func(t *testing.T, p Pair) Pair
	// TTL is a short lease lifetime the implementation grants as asked
	// (etcd rounds to whole seconds, with a minimum): the expiry tests
	// wait for it to pass.
	TTL time.Duration
}

// Run runs the contract suite as subtests of t.
func Run(t *testing.T, o Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"AcquireExclusive", testAcquireExclusive},
		{"EpochsGrow", testEpochsGrow},
		{"Renew", testRenew},
		{"RenewAll", testRenewAll},
		{"Expiry", testExpiry},
		{"RacingAcquirers", testRacingAcquirers},
		{"FencedCommit", testFencedCommit},
		{"History", testHistory},
		{"FencedAfterExpiry", testFencedAfterExpiry},
		{"SetReadRecall", testSetReadRecall},
		{"ReaderExpiry", testReaderExpiry},
		{"GuardAndBridge", testGuardAndBridge},
		{"UnreadNamesItsValue", testUnreadNamesItsValue},
		{"OtherProcessWaits", testOtherProcessWaits},
		{"LostLeaseWritesNothing", testLostLeaseWritesNothing},
		{"Invalid", testInvalid},
		{"Restart", testRestart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, o)
		})
	}
}

// waitTimeout keeps a broken wait from hanging the test; no claim on speed.
const waitTimeout = 30 * time.Second

func open(t *testing.T, o Opener) Pair {
	t.Helper()
	p := o.Open(t)
	t.Cleanup(func() {
		p.M.Close()
		p.S.Close()
	})
	return p
}

func peer(t *testing.T, o Opener, p Pair) lease.Manager {
	t.Helper()
	if o.Peer == nil {
		return p.M
	}
	m := o.Peer(t, p)
	t.Cleanup(func() { m.Close() })
	return m
}

func mustAcquire(t *testing.T, m lease.Manager, job, holder string, ttl time.Duration) lease.Job {
	t.Helper()
	l, err := m.Acquire(context.Background(), job, holder, ttl)
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", job, holder, err)
	}
	if l.Job != job || l.Holder != holder || l.Epoch == 0 || l.TTL < ttl {
		t.Fatalf("Acquire(%s, %s, %v) = %+v: want the job, the holder, an epoch and a TTL of at least the one asked", job, holder, ttl, l)
	}
	return l
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// long is a TTL no test outlives.
const long = 50 * time.Second

func testAcquireExclusive(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	a := mustAcquire(t, p.M, "j", "assigner-a", long)
	_, err := other.Acquire(ctx, "j", "assigner-b", long)
	wantErr(t, "a second holder's Acquire", err, lease.ErrHeld)
	if !strings.Contains(err.Error(), "assigner-a") {
		t.Errorf("ErrHeld does not name the holder: %v", err)
	}
	_, err = p.M.Acquire(ctx, "j", "assigner-a", long)
	wantErr(t, "the holder's own second Acquire", err, lease.ErrHeld)
	h, err := other.Holder(ctx, "j")
	if err != nil || h.Holder != "assigner-a" || h.Epoch != a.Epoch {
		t.Fatalf("Holder = %+v, %v; want assigner-a at epoch %d", h, err, a.Epoch)
	}
	// Another job's lease is independent.
	mustAcquire(t, other, "k", "assigner-b", long)
	_, err = other.Holder(ctx, "nobody")
	wantErr(t, "Holder of an unleased job", err, lease.ErrNotHeld)
}

func testEpochsGrow(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	var last uint64
	for i := range 4 {
		m := p.M
		if i%2 == 1 {
			m = other
		}
		l := mustAcquire(t, m, "j", fmt.Sprintf("holder-%d", i), long)
		if l.Epoch <= last {
			t.Fatalf("grant %d has epoch %d, not above the previous %d", i, l.Epoch, last)
		}
		last = l.Epoch
		if err := m.Release(ctx, l); err != nil {
			t.Fatalf("Release: %v", err)
		}
		_, err := m.Holder(ctx, "j")
		wantErr(t, "Holder after Release", err, lease.ErrNotHeld)
		if _, err := m.Renew(ctx, l); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Renew after Release: got %v, want ErrLost", err)
		}
		if err := m.Release(ctx, l); err != nil {
			t.Fatalf("a second Release: %v", err)
		}
	}
}

func testRenew(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	// A TTL long enough that renewals a tenth of it apart keep up on a
	// loaded machine: the test is about renewal, not about timing.
	ttl := max(o.TTL, 2*time.Second)
	l := mustAcquire(t, p.M, "j", "a", ttl)
	// Renewing for longer than one TTL keeps the lease and its epoch.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		r, err := p.M.Renew(ctx, l)
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if r.Epoch != l.Epoch || r.TTL < ttl {
			t.Fatalf("Renew = %+v, want epoch %d and TTL ≥ %v", r, l.Epoch, ttl)
		}
		time.Sleep(ttl / 10) // the renewal interval, not a wait for an event
	}
	if h, err := p.M.Holder(ctx, "j"); err != nil || h.Epoch != l.Epoch {
		t.Fatalf("Holder after renewals = %+v, %v; want epoch %d", h, err, l.Epoch)
	}
}

// testRenewAll renews the leases of two holders in one call: each is
// renewed but the released one, which is lost.
func testRenewAll(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	ls := []lease.Job{
		mustAcquire(t, p.M, "j1", "a", long),
		mustAcquire(t, p.M, "j2", "b", long),
		mustAcquire(t, p.M, "j3", "a", long),
	}
	if err := p.M.Release(ctx, ls[2]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	out := p.M.RenewAll(ctx, ls)
	if len(out) != len(ls) {
		t.Fatalf("RenewAll of %d leases returned %d outcomes", len(ls), len(out))
	}
	for i, l := range ls[:2] {
		if r := out[i]; r.Err != nil || r.Job.Job != l.Job || r.Job.Epoch != l.Epoch || r.Job.TTL < long {
			t.Fatalf("RenewAll of %s = %+v, %v; want epoch %d and TTL ≥ %v", l.Job, r.Job, r.Err, l.Epoch, long)
		}
	}
	wantErr(t, "RenewAll of the released lease", out[2].Err, lease.ErrLost)
}

func testExpiry(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	l := mustAcquire(t, p.M, "j", "a", o.TTL)
	testwait.Until(t, waitTimeout, "the unrenewed job lease to expire", func() bool {
		_, err := other.Holder(ctx, "j")
		return errors.Is(err, lease.ErrNotHeld)
	})
	b := mustAcquire(t, other, "j", "b", long)
	if b.Epoch <= l.Epoch {
		t.Fatalf("the lease granted after expiry has epoch %d, not above %d", b.Epoch, l.Epoch)
	}
	_, err := p.M.Renew(ctx, l)
	wantErr(t, "Renew of the expired lease", err, lease.ErrLost)
	// Releasing the expired lease must not release the new holder's.
	if err := p.M.Release(ctx, l); err != nil {
		t.Fatalf("Release of the expired lease: %v", err)
	}
	if h, err := other.Holder(ctx, "j"); err != nil || h.Holder != "b" {
		t.Fatalf("Holder after the old holder's Release = %+v, %v; want b", h, err)
	}
}

func testRacingAcquirers(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	const n = 8
	managers := []lease.Manager{p.M, peer(t, o, p)}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []lease.Job
		errs []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := managers[i%2].Acquire(ctx, "j", fmt.Sprintf("holder-%d", i), long)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, l)
			} else if !errors.Is(err, lease.ErrHeld) {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 || len(won) != 1 {
		t.Fatalf("%d racing Acquires: %d won (%+v), unexpected errors %v; want exactly one winner", n, len(won), won, errs)
	}
}

func testFencedCommit(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	a := mustAcquire(t, p.M, "j", "a", long)
	if err := p.S.CommitFenced(ctx, "j", a.Epoch, 0, storagetest.Assignment("j", 1, 2, 2)); err != nil {
		t.Fatalf("CommitFenced by the holder: %v", err)
	}
	if err := p.M.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, other, "j", "b", long)
	err := p.S.CommitFenced(ctx, "j", a.Epoch, 1, storagetest.Assignment("j", 2, 2, 2))
	wantErr(t, "CommitFenced by the old holder", err, storage.ErrFenced)
	rec, lerr := p.S.Load(ctx, "j")
	if lerr != nil || rec.Generation() != 1 {
		t.Fatalf("after the fenced commit the store holds generation %d (%v), want 1", rec.Generation(), lerr)
	}
	if err := p.S.CommitFenced(ctx, "j", b.Epoch, 1, storagetest.Assignment("j", 2, 2, 2)); err != nil {
		t.Fatalf("CommitFenced by the new holder: %v", err)
	}
	// The generation check still applies under the fence.
	err = p.S.CommitFenced(ctx, "j", b.Epoch, 1, storagetest.Assignment("j", 3, 2, 2))
	wantErr(t, "a fenced commit on a stale generation", err, storage.ErrConflict)
	err = p.S.CommitFenced(ctx, "j", 0, 2, storagetest.Assignment("j", 3, 2, 2))
	wantErr(t, "a fenced commit with epoch 0", err, storage.ErrInvalid)
	// A job whose lease was never granted fences every epoch out.
	err = p.S.CommitFenced(ctx, "never", b.Epoch, 0, storagetest.Assignment("never", 1, 1, 1))
	wantErr(t, "a fenced commit of a job nobody leased", err, storage.ErrFenced)
}

// testHistory: a recorded commit writes its decision with the stored
// generation in the same write; a commit that fails records nothing; the
// newest storage.HistoryLimit are kept, newest first; deleting the job
// deletes its history; a job created again keeps numbering above.
func testHistory(t *testing.T, o Opener) {
	p := open(t, o)
	h, ok := p.S.(storage.Historian)
	if !ok {
		t.Skipf("%T keeps no decision history", p.S)
	}
	ctx := context.Background()
	a := mustAcquire(t, p.M, "j", "a", long)
	if got, err := h.History(ctx, "j", 0); err != nil || len(got) != 0 {
		t.Fatalf("History of a job without one = %v, %v; want none", got, err)
	}
	entry := func(gen uint64) storage.HistoryEntry {
		return storage.HistoryEntry{Generation: 999, Cause: storage.CauseLoad, Detail: fmt.Sprint("decision ", gen),
			Churn: 0.05, ImbalanceBefore: 1.5, ImbalanceAfter: 1.1,
			Moves: []storage.HistoryMove{{Phase: "move", Kind: "reassign", Start: 10, End: 20, From: "t1", To: "t2", Reason: "hot"}}}
	}
	n := uint64(storage.HistoryLimit + 5)
	for gen := uint64(1); gen <= n; gen++ {
		if err := h.CommitRecorded(ctx, "j", a.Epoch, gen-1, storagetest.Assignment("j", gen, 2, 1), entry(gen)); err != nil {
			t.Fatalf("CommitRecorded generation %d: %v", gen, err)
		}
	}
	// A conflicting commit and a fenced one record nothing.
	err := h.CommitRecorded(ctx, "j", a.Epoch, 1, storagetest.Assignment("j", n+1, 2, 1), entry(n+1))
	wantErr(t, "a recorded commit on a stale generation", err, storage.ErrConflict)
	err = h.CommitRecorded(ctx, "j", a.Epoch+1000, n, storagetest.Assignment("j", n+1, 2, 1), entry(n+1))
	wantErr(t, "a recorded commit under another epoch", err, storage.ErrFenced)
	bad := entry(n + 1)
	bad.Moves[0].End = bad.Moves[0].Start
	err = h.CommitRecorded(ctx, "j", a.Epoch, n, storagetest.Assignment("j", n+1, 2, 1), bad)
	wantErr(t, "a recorded commit with an invalid entry", err, storage.ErrInvalid)
	if rec, err := p.S.Load(ctx, "j"); err != nil || rec.Generation() != n {
		t.Fatalf("after the failed commits the store holds generation %d (%v), want %d", rec.Generation(), err, n)
	}
	got, err := h.History(ctx, "j", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != storage.HistoryLimit {
		t.Fatalf("History kept %d entries, want %d", len(got), storage.HistoryLimit)
	}
	for i, e := range got {
		want := n - uint64(i)
		if e.Generation != want || e.Detail != fmt.Sprint("decision ", want) || len(e.Moves) != 1 || e.Moves[0].To != "t2" {
			t.Fatalf("History[%d] = %+v; want generation %d's decision, newest first", i, e, want)
		}
	}
	if got, err := h.History(ctx, "j", 3); err != nil || len(got) != 3 || got[2].Generation != n-2 {
		t.Fatalf("History limited to 3 = %+v, %v", got, err)
	}
	if err := p.S.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if got, err := h.History(ctx, "j", 0); err != nil || len(got) != 0 {
		t.Fatalf("History after Delete = %d entries, %v; want none", len(got), err)
	}
	if err := h.CommitRecorded(ctx, "j", a.Epoch, 0, storagetest.Assignment("j", 1, 2, 1), entry(1)); err != nil {
		t.Fatalf("CommitRecorded after Delete: %v", err)
	}
	if got, err := h.History(ctx, "j", 0); err != nil || len(got) != 1 || got[0].Generation != n+1 {
		t.Fatalf("History of the job created again = %+v, %v; want one entry at generation %d", got, err, n+1)
	}
}

// testFencedAfterExpiry: once a lease expired and another holder took it,
// the old holder's commits fail, however long it was paused.
func testFencedAfterExpiry(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	a := mustAcquire(t, p.M, "j", "a", o.TTL)
	var b lease.Job
	testwait.Until(t, waitTimeout, "another holder to get the expired lease", func() bool {
		var err error
		b, err = other.Acquire(ctx, "j", "b", long)
		return err == nil
	})
	err := p.S.CommitFenced(ctx, "j", a.Epoch, 0, storagetest.Assignment("j", 1, 1, 1))
	wantErr(t, "a commit under the expired lease", err, storage.ErrFenced)
	if err := p.S.CommitFenced(ctx, "j", b.Epoch, 0, storagetest.Assignment("j", 1, 1, 1)); err != nil {
		t.Fatalf("CommitFenced by the new holder: %v", err)
	}
}

func testSetReadRecall(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	l := mustAcquire(t, p.M, "j", "a", long)
	if st, err := other.State(ctx, "j", lease.Guard); err != nil || st.Set {
		t.Fatalf("State of a guard never set = %+v, %v; want unset", st, err)
	}
	_, err := other.Read(ctx, "j", lease.Guard, "t1", "", lease.GuardValue(1), long)
	wantErr(t, "Read of a guard never set", err, lease.ErrRecalled)

	g1, g2 := lease.GuardValue(1), lease.GuardValue(2)
	if err := p.M.Set(ctx, l, lease.Guard, g1); err != nil {
		t.Fatalf("Set guard: %v", err)
	}
	if st, err := other.State(ctx, "j", lease.Guard); err != nil || st != (lease.State{Set: true, Value: g1}) {
		t.Fatalf("State after Set = %+v, %v", st, err)
	}
	r, err := other.Read(ctx, "j", lease.Guard, "t1", "", g1, long)
	if err != nil || r.Value != g1 || r.TTL <= 0 {
		t.Fatalf("Read guard at its value = %+v, %v", r, err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t2", "", g1, long); err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	_, err = other.Read(ctx, "j", lease.Guard, "t3", "", g2, long)
	wantErr(t, "Read at another value", err, lease.ErrRecalled)
	readers, err := p.M.Readers(ctx, "j", lease.Guard)
	if err != nil || len(readers) != 2 || readers[0] != (lease.Reader{Name: "t1", Value: g1}) || readers[1].Name != "t2" {
		t.Fatalf("Readers = %+v, %v; want t1 and t2 at %v", readers, err, g1)
	}
	err = p.M.Set(ctx, l, lease.Guard, g2)
	wantErr(t, "Set while readers hold the guard", err, lease.ErrBusy)

	if err := p.M.Recall(ctx, l, lease.Guard); err != nil {
		t.Fatalf("Recall: %v", err)
	}
	if err := p.M.Recall(ctx, l, lease.Guard); err != nil {
		t.Fatalf("a second Recall: %v", err)
	}
	if st, _ := other.State(ctx, "j", lease.Guard); !st.Recalled || st.Value != g1 {
		t.Fatalf("State after Recall = %+v, want recalled at %v", st, g1)
	}
	_, err = other.Read(ctx, "j", lease.Guard, "t1", "", g1, long)
	wantErr(t, "renewing a recalled guard", err, lease.ErrRecalled)
	_, err = other.Read(ctx, "j", lease.Guard, "t4", "", g1, long)
	wantErr(t, "a new reader of a recalled guard", err, lease.ErrRecalled)

	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	go func() { done <- p.M.Wait(wctx, l, lease.Guard) }()
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "", g1); err != nil {
		t.Fatalf("Unread: %v", err)
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "", lease.Value{}); err != nil {
		t.Fatalf("a second Unread: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) while t2 still holds the guard", err)
	default:
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t2", "", g1); err != nil {
		t.Fatalf("Unread: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait after every reader left: %v", err)
	}
	if err := p.M.Set(ctx, l, lease.Guard, g2); err != nil {
		t.Fatalf("Set after the readers left: %v", err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "", g2, long); err != nil {
		t.Fatalf("Read of the new value: %v", err)
	}
}

func testReaderExpiry(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	l := mustAcquire(t, p.M, "j", "a", long)
	if err := p.M.Set(ctx, l, lease.Guard, lease.GuardValue(5)); err != nil {
		t.Fatal(err)
	}
	// A reader that dies holding the guard: it is never released.
	sent := time.Now()
	r, err := other.Read(ctx, "j", lease.Guard, "dead", "", lease.GuardValue(5), o.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.M.Recall(ctx, l, lease.Guard); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := p.M.Wait(wctx, l, lease.Guard); err != nil {
		t.Fatalf("Wait for a reader that lets its lease expire: %v", err)
	}
	// A safety bound, not a speed claim: the reader may use the guard for
	// TTL from when it sent its request, so Wait must not end sooner.
	if held := time.Since(sent); held < r.TTL {
		t.Fatalf("Wait returned %v after the read was sent, before its TTL of %v ran out", held, r.TTL)
	}
	if readers, err := p.M.Readers(ctx, "j", lease.Guard); err != nil || len(readers) != 0 {
		t.Fatalf("Readers after Wait = %+v, %v; want none", readers, err)
	}
	if err := p.M.Set(ctx, l, lease.Guard, lease.GuardValue(6)); err != nil {
		t.Fatalf("Set after the reader expired: %v", err)
	}
}

func testGuardAndBridge(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	l := mustAcquire(t, p.M, "j", "a", long)
	g, b := lease.GuardValue(3), lease.Value{From: 3, To: 4}
	if err := p.M.Set(ctx, l, lease.Guard, g); err != nil {
		t.Fatal(err)
	}
	if err := p.M.Set(ctx, l, lease.Bridge, b); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "", g, long); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Bridge, "t1", "", b, long); err != nil {
		t.Fatal(err)
	}
	// Recalling the guard leaves the bridge open, and the other way round.
	if err := p.M.Recall(ctx, l, lease.Guard); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Bridge, "t2", "", b, long); err != nil {
		t.Fatalf("Read of the bridge while the guard is recalled: %v", err)
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "", g); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := p.M.Wait(wctx, l, lease.Guard); err != nil {
		t.Fatalf("Wait on the guard while the bridge has readers: %v", err)
	}
	if err := p.M.Set(ctx, l, lease.Guard, lease.GuardValue(4)); err != nil {
		t.Fatal(err)
	}
	readers, err := other.Readers(ctx, "j", lease.Bridge)
	if err != nil || len(readers) != 2 {
		t.Fatalf("bridge Readers = %+v, %v; want t1 and t2", readers, err)
	}
	if st, err := other.State(ctx, "j", lease.Bridge); err != nil || st != (lease.State{Set: true, Value: b}) {
		t.Fatalf("bridge State = %+v, %v; want open at %v", st, err, b)
	}
}

// A release names the read it releases: one that arrives after the reader
// read the lease again at another value leaves that read alone.
func testUnreadNamesItsValue(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	l := mustAcquire(t, p.M, "j", "a", long)
	g1, g2 := lease.GuardValue(1), lease.GuardValue(2)
	if err := p.M.Set(ctx, l, lease.Guard, g1); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "", g1, long); err != nil {
		t.Fatal(err)
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "", g1); err != nil {
		t.Fatal(err)
	}
	if err := p.M.Recall(ctx, l, lease.Guard); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := p.M.Wait(wctx, l, lease.Guard); err != nil {
		t.Fatal(err)
	}
	if err := p.M.Set(ctx, l, lease.Guard, g2); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "", g2, long); err != nil {
		t.Fatal(err)
	}
	// The release of the read at 1, again, as if it came late.
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "", g1); err != nil {
		t.Fatalf("Unread at a value not held: %v", err)
	}
	if readers, err := p.M.Readers(ctx, "j", lease.Guard); err != nil || len(readers) != 1 || readers[0] != (lease.Reader{Name: "t1", Value: g2}) {
		t.Fatalf("Readers after a release of the read at %v = %+v, %v; want t1 still at %v", g1, readers, err, g2)
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "", g2); err != nil {
		t.Fatal(err)
	}
	if readers, err := p.M.Readers(ctx, "j", lease.Guard); err != nil || len(readers) != 0 {
		t.Fatalf("Readers after the release of the read at %v = %+v, %v; want none", g2, readers, err)
	}
}

// A reader's read belongs to the process (instance) that took it: while it
// is live, a read by another process of the same reader is refused and
// changes nothing, and a release by another leaves it alone; the process
// that holds it renews it as before. Once it has expired the other process
// reads, and the first can no longer take it back.
func testOtherProcessWaits(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	l := mustAcquire(t, p.M, "j", "a", long)
	g := lease.GuardValue(1)
	if err := p.M.Set(ctx, l, lease.Guard, g); err != nil {
		t.Fatal(err)
	}
	held := func(what string) {
		t.Helper()
		if readers, err := p.M.Readers(ctx, "j", lease.Guard); err != nil || len(readers) != 1 || readers[0] != (lease.Reader{Name: "t1", Value: g}) {
			t.Fatalf("Readers %s = %+v, %v; want t1 at %v", what, readers, err, g)
		}
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "p1", g, o.TTL); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "p2", g, long); !errors.Is(err, lease.ErrOtherProcess) {
		t.Fatalf("Read by process p2 while p1 holds t1's read = %v; want ErrOtherProcess", err)
	}
	// The bridge gives the reader keys as the guard does: p2 reads neither
	// while p1 holds one.
	b := lease.Value{From: 1, To: 2}
	if err := p.M.Set(ctx, l, lease.Bridge, b); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Bridge, "t1", "p2", b, long); !errors.Is(err, lease.ErrOtherProcess) {
		t.Fatalf("Read of the bridge by process p2 while p1 holds t1's guard = %v; want ErrOtherProcess", err)
	}
	if readers, err := p.M.Readers(ctx, "j", lease.Bridge); err != nil || len(readers) != 0 {
		t.Fatalf("bridge Readers after p2's refused read = %+v, %v; want none", readers, err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "p1", g, o.TTL); err != nil {
		t.Fatalf("p1 renewing its read after p2 was refused: %v", err)
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "p2", g); err != nil {
		t.Fatalf("Unread by p2, which holds nothing: %v", err)
	}
	held("after p2 released what p1 holds")
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", strings.Repeat("x", lease.MaxInstanceLen+1), g, long); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Read with a %d-byte instance = %v; want ErrInvalid", lease.MaxInstanceLen+1, err)
	}

	// p1 stops renewing (paused, cut off or dead): once its read has
	// expired, p2 reads, and p1 is refused from then on.
	testwait.For(t, "p1's read to expire", func() bool {
		readers, err := p.M.Readers(ctx, "j", lease.Guard)
		return err == nil && len(readers) == 0
	})
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "p2", g, long); err != nil {
		t.Fatalf("Read by p2 once p1's read expired: %v", err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t1", "p1", g, o.TTL); !errors.Is(err, lease.ErrOtherProcess) {
		t.Fatalf("p1 renewing after p2 took t1's read = %v; want ErrOtherProcess", err)
	}
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "p1", g); err != nil {
		t.Fatalf("a late Unread by p1: %v", err)
	}
	held("after p1's late release")
	if err := other.Unread(ctx, "j", lease.Guard, "t1", "p2", g); err != nil {
		t.Fatal(err)
	}
	if readers, err := p.M.Readers(ctx, "j", lease.Guard); err != nil || len(readers) != 0 {
		t.Fatalf("Readers after p2's release = %+v, %v; want none", readers, err)
	}

	// A reader that names no instance (it predates them) is told apart
	// from none, as before instances.
	if _, err := other.Read(ctx, "j", lease.Guard, "t2", "", g, long); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t2", "p3", g, long); err != nil {
		t.Fatalf("Read by p3 over a read that names no instance: %v", err)
	}
	if _, err := other.Read(ctx, "j", lease.Guard, "t2", "", g, long); err != nil {
		t.Fatalf("Read naming no instance over p3's: %v", err)
	}
}

func testLostLeaseWritesNothing(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	other := peer(t, o, p)
	a := mustAcquire(t, p.M, "j", "a", long)
	if err := p.M.Set(ctx, a, lease.Guard, lease.GuardValue(1)); err != nil {
		t.Fatal(err)
	}
	if err := p.M.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := mustAcquire(t, other, "j", "b", long)
	wantErr(t, "Set under a lost lease", p.M.Set(ctx, a, lease.Guard, lease.GuardValue(2)), lease.ErrLost)
	wantErr(t, "Recall under a lost lease", p.M.Recall(ctx, a, lease.Guard), lease.ErrLost)
	wantErr(t, "Wait under a lost lease", p.M.Wait(ctx, a, lease.Guard), lease.ErrLost)
	if st, err := other.State(ctx, "j", lease.Guard); err != nil || st != (lease.State{Set: true, Value: lease.GuardValue(1)}) {
		t.Fatalf("guard after writes under a lost lease = %+v, %v; want open at generation 1", st, err)
	}
	if err := other.Recall(ctx, b, lease.Guard); err != nil {
		t.Fatalf("Recall by the new holder: %v", err)
	}
}

func testInvalid(t *testing.T, o Opener) {
	p := open(t, o)
	ctx := context.Background()
	l := mustAcquire(t, p.M, "j", "a", long)
	cases := []struct {
		what string
		err  error
	}{
		{"an empty job", func() error { _, err := p.M.Acquire(ctx, "", "a", long); return err }()},
		{"a job with a slash", func() error { _, err := p.M.Acquire(ctx, "a/b", "a", long); return err }()},
		{"an empty holder", func() error { _, err := p.M.Acquire(ctx, "k", "", long); return err }()},
		{"a holder with a slash", func() error { _, err := p.M.Acquire(ctx, "k", "a/b", long); return err }()},
		{"a holder of 300 bytes", func() error { _, err := p.M.Acquire(ctx, "k", strings.Repeat("h", 300), long); return err }()},
		{"a zero TTL", func() error { _, err := p.M.Acquire(ctx, "k", "a", 0); return err }()},
		{"a negative TTL", func() error { _, err := p.M.Acquire(ctx, "k", "a", -time.Second); return err }()},
		{"a TTL of an hour", func() error { _, err := p.M.Acquire(ctx, "k", "a", time.Hour); return err }()},
		{"kind 0", p.M.Set(ctx, l, 0, lease.GuardValue(1))},
		{"kind 3", p.M.Recall(ctx, l, 3)},
		{"a guard of generation 0", p.M.Set(ctx, l, lease.Guard, lease.Value{})},
		{"a guard over two generations", p.M.Set(ctx, l, lease.Guard, lease.Value{From: 1, To: 2})},
		{"a bridge going back", p.M.Set(ctx, l, lease.Bridge, lease.Value{From: 2, To: 1})},
		{"a bridge to the same generation", p.M.Set(ctx, l, lease.Bridge, lease.Value{From: 2, To: 2})},
		{"an empty reader", func() error {
			_, err := p.M.Read(ctx, "j", lease.Guard, "", "", lease.GuardValue(1), long)
			return err
		}()},
		{"a reader TTL of zero", func() error {
			_, err := p.M.Read(ctx, "j", lease.Guard, "r", "", lease.GuardValue(1), 0)
			return err
		}()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, lease.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", c.what, c.err)
		}
	}
	if st, err := p.M.State(ctx, "j", lease.Guard); err != nil || st.Set {
		t.Errorf("invalid writes changed the guard: %+v, %v", st, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.M.Acquire(cctx, "k", "a", long); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a canceled context: got %v, want context.Canceled", err)
	}
}

func testRestart(t *testing.T, o Opener) {
	if o.Reopen == nil {
		t.Skip("the implementation does not restart")
	}
	p := o.Open(t)
	ctx := context.Background()
	// A lease may outlive its holder's process (etcd keeps it): short, so
	// that it expires within the test.
	a := mustAcquire(t, p.M, "j", "a", o.TTL)
	if err := p.M.Set(ctx, a, lease.Guard, lease.GuardValue(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.M.Read(ctx, "j", lease.Guard, "t1", "", lease.GuardValue(7), o.TTL); err != nil {
		t.Fatal(err)
	}
	p = o.Reopen(t, p)
	t.Cleanup(func() {
		p.M.Close()
		p.S.Close()
	})
	// The guard keeps its value, and its readers keep reading it.
	if st, err := p.M.State(ctx, "j", lease.Guard); err != nil || st != (lease.State{Set: true, Value: lease.GuardValue(7)}) {
		t.Fatalf("guard after restart = %+v, %v; want open at generation 7", st, err)
	}
	if _, err := p.M.Read(ctx, "j", lease.Guard, "t1", "", lease.GuardValue(7), o.TTL); err != nil {
		t.Fatalf("renewing the guard after restart: %v", err)
	}
	var b lease.Job
	testwait.Until(t, waitTimeout, "the job lease after restart", func() bool {
		var err error
		b, err = p.M.Acquire(ctx, "j", "b", long)
		return err == nil
	})
	if b.Epoch <= a.Epoch {
		t.Fatalf("epoch after restart %d, not above %d", b.Epoch, a.Epoch)
	}
	err := p.S.CommitFenced(ctx, "j", a.Epoch, 0, storagetest.Assignment("j", 1, 1, 1))
	wantErr(t, "a commit under the lease from before the restart", err, storage.ErrFenced)
	// The guard cannot move until every reader, those from before the
	// restart included, is gone.
	if err := p.M.Recall(ctx, b, lease.Guard); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if err := p.M.Wait(wctx, b, lease.Guard); err != nil {
		t.Fatalf("Wait after restart: %v", err)
	}
	if err := p.M.Set(ctx, b, lease.Guard, lease.GuardValue(8)); err != nil {
		t.Fatalf("Set after the readers from before the restart expired: %v", err)
	}
}

// Embedded returns an embedded manager on a bbolt store in a new
// temporary directory, both closed when the test ends.
func Embedded(t testing.TB, opts lease.EmbeddedOptions) (*lease.Embedded, *storage.Bolt) {
	t.Helper()
	b, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.NewEmbedded(context.Background(), b, opts)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); b.Close() })
	return m, b
}
