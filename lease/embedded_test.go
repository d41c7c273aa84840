package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/leasetest"
	"github.com/slicerd/slicerd/storage"
)

// shortTTL is the expiry tests' lease lifetime for the embedded manager.
const shortTTL = 300 * time.Millisecond

func openEmbedded(t *testing.T, path string) leasetest.Pair {
	t.Helper()
	b, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	m, err := lease.NewEmbedded(t.Context(), b, lease.EmbeddedOptions{MaxReadTTL: 2 * shortTTL})
	if err != nil {
		b.Close()
		t.Fatalf("NewEmbedded: %v", err)
	}
	return leasetest.Pair{M: m, S: b}
}

// TestEmbeddedContract holds the embedded manager, with the bbolt store it
// persists into, to the contract every lease manager keeps.
func TestEmbeddedContract(t *testing.T) {
	leasetest.Run(t, leasetest.Opener{
		Open: func(t *testing.T) leasetest.Pair {
			return openEmbedded(t, t.TempDir()+"/"+storage.DataFileName)
		},
		Reopen: func(t *testing.T, p leasetest.Pair) leasetest.Pair {
			path := p.S.(*storage.Bolt).Path()
			p.M.Close()
			if err := p.S.Close(); err != nil {
				t.Fatal(err)
			}
			return openEmbedded(t, path)
		},
		TTL: shortTTL,
	})
}

// The embedded manager keeps a job's state in memory only while the job
// is in use: released with no reader (as a deleted job's lease is), it is
// dropped at once; with readers, once their leases ran out. Read back
// from the file, the job's guard is what was set and its next epoch
// continues above the last one granted, across a restart too.
func TestEmbeddedDropsIdleJobs(t *testing.T) {
	ctx := t.Context()
	path := t.TempDir() + "/" + storage.DataFileName
	p := openEmbedded(t, path)
	m := p.M.(*lease.Embedded)
	acquire := func(job string) lease.Job {
		t.Helper()
		l, err := m.Acquire(ctx, job, "a1", shortTTL)
		if err != nil {
			t.Fatalf("Acquire %s: %v", job, err)
		}
		return l
	}
	guard := func(job string) lease.State {
		t.Helper()
		st, err := m.State(ctx, job, lease.Guard)
		if err != nil {
			t.Fatalf("State %s: %v", job, err)
		}
		return st
	}

	// Released without readers: dropped at once.
	gone := acquire("gone")
	if err := m.Set(ctx, gone, lease.Guard, lease.GuardValue(3)); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if m.InMemoryForTest("gone") {
		t.Error("a released job without readers is still in memory")
	}
	if st := guard("gone"); st.Value != lease.GuardValue(3) || m.InMemoryForTest("gone") {
		t.Errorf("the dropped job's guard reads %+v (kept in memory: %v), want generation 3 read back, not kept",
			st, m.InMemoryForTest("gone"))
	}
	if again := acquire("gone"); again.Epoch != gone.Epoch+1 {
		t.Errorf("the dropped job's next lease has epoch %d, want %d", again.Epoch, gone.Epoch+1)
	}

	// Released while a reader holds its guard: dropped once the reader's
	// lease ran out, by a sweep another grant or renewal runs.
	strong := acquire("strong")
	if err := m.Set(ctx, strong, lease.Guard, lease.GuardValue(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(ctx, "strong", lease.Guard, "t0", "", lease.GuardValue(1), shortTTL); err != nil {
		t.Fatal(err)
	}
	if err := m.Release(ctx, strong); err != nil {
		t.Fatal(err)
	}
	if !m.InMemoryForTest("strong") {
		t.Fatal("a job whose guard a reader holds was dropped")
	}
	other := acquire("other")
	testwait.For(t, "the job to be dropped once its reader's lease ran out", func() bool {
		var err error
		if other, err = m.Renew(ctx, other); err != nil {
			t.Fatal(err)
		}
		return !m.InMemoryForTest("strong")
	})
	if !m.InMemoryForTest("other") {
		t.Error("a held job was dropped")
	}

	// After a restart, epochs still grow.
	p.M.Close()
	if err := p.S.Close(); err != nil {
		t.Fatal(err)
	}
	p = openEmbedded(t, path)
	defer func() { p.M.Close(); p.S.Close() }()
	m = p.M.(*lease.Embedded)
	if m.InMemoryForTest("other") {
		t.Error("after a restart, a job with nothing set for readers is in memory before it is used")
	}
	if l := acquire("gone"); l.Epoch != gone.Epoch+2 {
		t.Errorf("after a restart the job's lease has epoch %d, want %d", l.Epoch, gone.Epoch+2)
	}
}

// gatedStore holds every PutLeaseState until gate is closed: a store
// whose sync is slow.
type gatedStore struct {
	*storage.Bolt
	gate    chan struct{}
	waiting chan struct{} // receives once a put is held at the gate
}

func (g *gatedStore) PutLeaseState(ctx context.Context, job string, state []byte) error {
	select {
	case g.waiting <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Bolt.PutLeaseState(ctx, job, state)
}

// A write that waits on its store (a slow fsync) holds up no other call:
// tasks read and renew, and other jobs' leases are granted and renewed,
// meanwhile; and nobody reads the value being written before it is stored.
func TestEmbeddedStoresOutsideItsLock(t *testing.T) {
	b, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	g := &gatedStore{Bolt: b, gate: make(chan struct{}), waiting: make(chan struct{}, 1)}
	close(g.gate) // open while the test sets up
	m, err := lease.NewEmbedded(t.Context(), g, lease.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx := t.Context()
	kv, err := m.Acquire(ctx, "kv", "a1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	web, err := m.Acquire(ctx, "web", "a1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, kv, lease.Guard, lease.GuardValue(1)); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, web, lease.Guard, lease.GuardValue(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(ctx, "kv", lease.Guard, "t0", "", lease.GuardValue(1), 5*time.Second); err != nil {
		t.Fatal(err)
	}

	// kv's bridge is being set, held at the store.
	g.gate = make(chan struct{})
	setDone := make(chan error, 1)
	go func() { setDone <- m.Set(ctx, kv, lease.Bridge, lease.Value{From: 1, To: 2}) }()
	<-g.waiting

	if _, err := m.Read(ctx, "kv", lease.Guard, "t0", "", lease.GuardValue(1), 5*time.Second); err != nil {
		t.Errorf("renewing kv's guard while its bridge is stored: %v", err)
	}
	if _, err := m.Read(ctx, "web", lease.Guard, "w0", "", lease.GuardValue(1), 5*time.Second); err != nil {
		t.Errorf("reading web's guard while kv's bridge is stored: %v", err)
	}
	if _, err := m.Renew(ctx, web); err != nil {
		t.Errorf("renewing web's job lease while kv's bridge is stored: %v", err)
	}
	if _, err := m.Read(ctx, "kv", lease.Bridge, "t0", "", lease.Value{From: 1, To: 2}, 5*time.Second); !errors.Is(err, lease.ErrRecalled) {
		t.Errorf("reading kv's bridge before it is stored = %v, want ErrRecalled", err)
	}
	close(g.gate)
	if err := <-setDone; err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(ctx, "kv", lease.Bridge, "t0", "", lease.Value{From: 1, To: 2}, 5*time.Second); err != nil {
		t.Errorf("reading kv's bridge once stored: %v", err)
	}
}
