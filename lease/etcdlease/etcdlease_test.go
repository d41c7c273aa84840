package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/lease/leasetest"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

func openStore(t *testing.T, endpoint, prefix string) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.Open(context.Background(), etcdstore.Options{Endpoints: []string{endpoint}, Prefix: prefix})
	if err != nil {
		t.Fatalf("etcdstore.Open: %v", err)
	}
	return s
}

// TestContract holds the etcd manager, with the etcd store whose fenced
// commits check its job leases, to the contract every lease manager keeps,
// against a real etcd server.
func TestContract(t *testing.T) {
	srv := etcdtest.Start(t)
	var prefixes atomic.Int64
	open := func(t *testing.T, prefix string) leasetest.Pair {
		s := openStore(t, srv.Endpoint(), prefix)
		return leasetest.Pair{M: etcdlease.New(s, etcdlease.Options{}), S: s}
	}
	leasetest.Run(t, leasetest.Opener{
		Open: func(t *testing.T) leasetest.Pair {
			return open(t, fmt.Sprintf("/lease-contract-%d/", prefixes.Add(1)))
		},
		// Another process's manager: its own client on the same prefix.
		Peer: func(t *testing.T, p leasetest.Pair) lease.Manager {
			s := openStore(t, srv.Endpoint(), p.S.(*etcdstore.Store).Prefix())
			t.Cleanup(func() { s.Close() })
			return etcdlease.New(s, etcdlease.Options{})
		},
		Reopen: func(t *testing.T, p leasetest.Pair) leasetest.Pair {
			prefix := p.S.(*etcdstore.Store).Prefix()
			p.M.Close()
			p.S.Close()
			return open(t, prefix)
		},
		// etcd grants whole seconds, and at least 1.5 election timeouts
		// (2 s with etcd's defaults).
		TTL: 2 * time.Second,
	})
}

// A holder's job leases share one etcd lease, and renewing all of them is
// one keep-alive: the rest traffic of an Assigner does not grow with the
// number of jobs it holds.
func TestOneEtcdLeasePerHolder(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv.Endpoint(), "/one-lease/")
	defer s.Close()
	m := etcdlease.New(s, etcdlease.Options{})
	defer m.Close()
	ctx := t.Context()
	const jobs = 200
	// Acquired 16 at a time, as a Leader does: the first ones race to
	// grant the holder's etcd lease, and all of them end up on one.
	ls := make([]lease.Job, jobs)
	errs := make([]error, jobs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ls[i], errs[i] = m.Acquire(ctx, fmt.Sprintf("job-%03d", i), "assigner-a", 2*time.Second)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	other := etcdlease.New(s, etcdlease.Options{})
	defer other.Close()
	if _, err := other.Acquire(ctx, "job-b", "assigner-b", 2*time.Second); err != nil {
		t.Fatalf("Acquire by another holder: %v", err)
	}
	leases, err := s.Client().Leases(ctx)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	if len(leases.Leases) != 2 {
		t.Fatalf("%d jobs of one holder and 1 of another hold %d etcd leases, want 2", jobs, len(leases.Leases))
	}
	for _, l := range ls {
		if l.ID != ls[0].ID {
			t.Fatalf("job %s's lease is etcd lease %x, job %s's %x: want one per holder", l.Job, l.ID, ls[0].Job, ls[0].ID)
		}
	}

	requests := func(renew func()) float64 {
		before := etcdtest.MessagesReceived(t)
		renew()
		total := 0.0
		for method, n := range etcdtest.MessagesReceived(t) {
			total += n - before[method]
		}
		return total
	}
	one := requests(func() {
		if _, err := m.Renew(ctx, ls[0]); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	})
	all := requests(func() {
		for i, r := range m.RenewAll(ctx, ls) {
			if r.Err != nil || r.Job.Epoch != ls[i].Epoch || r.Job.TTL < 2*time.Second {
				t.Fatalf("RenewAll of %s = %+v, %v; want epoch %d and a TTL of 2s", ls[i].Job, r.Job, r.Err, ls[i].Epoch)
			}
		}
	})
	t.Logf("etcd messages received: %v to renew one job lease, %v to renew %d", one, all, jobs)
	// A keep-alive is a stream of its own, whose closing message the
	// server may count after the renewal returned, in the next window: a
	// renewal shows as 1 to 3 messages. One etcd lease per job would take
	// at least 200.
	if one == 0 || all > 10 {
		t.Fatalf("renewing %d job leases made %v etcd requests, renewing one %v: want a keep-alive for all", jobs, all, one)
	}
}

// When a holder's etcd lease expires, every job lease it carried is lost
// at once and free for others; the holder's next Acquire starts a new one.
func TestHolderLeaseExpiryLosesEveryJob(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv.Endpoint(), "/expiry/")
	defer s.Close()
	m := etcdlease.New(s, etcdlease.Options{})
	defer m.Close()
	other := etcdlease.New(s, etcdlease.Options{})
	defer other.Close()
	ctx := t.Context()
	var ls []lease.Job
	for _, job := range []string{"j1", "j2", "j3"} {
		l, err := m.Acquire(ctx, job, "a", 2*time.Second)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ls = append(ls, l)
	}
	testwait.Until(t, 30*time.Second, "the unrenewed holder lease to expire", func() bool {
		_, err := other.Holder(ctx, "j1")
		return errors.Is(err, lease.ErrNotHeld)
	})
	for i, r := range m.RenewAll(ctx, ls) {
		if !errors.Is(r.Err, lease.ErrLost) {
			t.Fatalf("RenewAll of %s after its holder lease expired: %v, want ErrLost", ls[i].Job, r.Err)
		}
	}
	for _, l := range ls {
		b, err := other.Acquire(ctx, l.Job, "b", 2*time.Second)
		if err != nil || b.Epoch <= l.Epoch {
			t.Fatalf("Acquire of %s by b after a's expiry = %+v, %v; want a lease above epoch %d", l.Job, b, err, l.Epoch)
		}
	}
	k, err := m.Acquire(ctx, "k", "a", 2*time.Second)
	if err != nil {
		t.Fatalf("a's Acquire after its holder lease expired: %v", err)
	}
	if k.ID == ls[0].ID {
		t.Fatalf("a's new job lease is on its expired etcd lease %x", k.ID)
	}
	if r, err := m.Renew(ctx, k); err != nil || r.Epoch != k.Epoch {
		t.Fatalf("Renew of a's new lease = %+v, %v", r, err)
	}
}

// A job key deleted by hand is found by the next scrub, and that job alone
// is lost; a released job is lost to Renew while the holder's others live.
func TestJobKeyDeletedOrReleased(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv.Endpoint(), "/scrub/")
	defer s.Close()
	m := etcdlease.New(s, etcdlease.Options{ScrubEvery: time.Nanosecond})
	defer m.Close()
	ctx := t.Context()
	var ls []lease.Job
	for _, job := range []string{"deleted", "released", "kept"} {
		l, err := m.Acquire(ctx, job, "a", 2*time.Second)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ls = append(ls, l)
	}
	if _, err := s.Client().Delete(ctx, s.JobLeaseKey("deleted")); err != nil {
		t.Fatalf("delete the job key: %v", err)
	}
	if err := m.Release(ctx, ls[1]); err != nil {
		t.Fatalf("Release: %v", err)
	}
	out := m.RenewAll(ctx, ls)
	for i, want := range []error{lease.ErrLost, lease.ErrLost, nil} {
		if !errors.Is(out[i].Err, want) || (want == nil && out[i].Err != nil) {
			t.Fatalf("RenewAll of %s: %v, want %v", ls[i].Job, out[i].Err, want)
		}
	}
	if h, err := m.Holder(ctx, "kept"); err != nil || h.Epoch != ls[2].Epoch {
		t.Fatalf("Holder of the kept job = %+v, %v", h, err)
	}
	if _, err := m.Holder(ctx, "released"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Holder of the released job: %v, want ErrNotHeld", err)
	}
}

// A holder that was refused a job (granting its etcd lease) and held
// nothing for longer than its TTL, so that its etcd lease expired unseen,
// acquires the job once it is free: on a new etcd lease.
func TestAcquireAfterAnIdleHolderLeaseExpired(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv.Endpoint(), "/idle/")
	defer s.Close()
	a := etcdlease.New(s, etcdlease.Options{})
	defer a.Close()
	b := etcdlease.New(s, etcdlease.Options{})
	defer b.Close()
	ctx := t.Context()
	la, err := a.Acquire(ctx, "j", "a", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "j", "b", 2*time.Second); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("b's Acquire of a's job: %v, want ErrHeld", err)
	}
	// b's idle etcd lease expires while a renews its own; then a
	// releases the job.
	testwait.Until(t, 30*time.Second, "b's idle etcd lease to expire", func() bool {
		if la, err = a.Renew(ctx, la); err != nil {
			t.Fatalf("a's Renew: %v", err)
		}
		resp, err := s.Client().Leases(ctx)
		return err == nil && len(resp.Leases) == 1
	})
	if err := a.Release(ctx, la); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctx, "j", "b", 2*time.Second)
	if err != nil || lb.Epoch <= la.Epoch {
		t.Fatalf("b's Acquire once a's lease expired = %+v, %v; want a lease above epoch %d", lb, err, la.Epoch)
	}
}

// heldGrants is an etcd client's Lease whose next Grant, once armed, is
// made and then held up before it returns, until release is closed: a
// Read paused between its etcd lease and its transaction, as a paused
// Assigner, or one whose transaction is held up in the network, makes it.
type heldGrants struct {
	clientv3.Lease
	armed   atomic.Bool
	granted chan struct{}
	release chan struct{}
}

func (h *heldGrants) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	resp, err := h.Lease.Grant(ctx, ttl)
	if h.armed.CompareAndSwap(true, false) {
		close(h.granted)
		<-h.release
	}
	return resp, err
}

// A read whose transaction comes after a later read of the same reader
// at the same value (a renewal sent again after the first timed out)
// leaves the reader's key on the later read's etcd lease. Moved to its
// own, granted before the later read was even sent, the key would expire
// before the deadline the reader counts from the later read, and a Wait
// could end while the reader still uses the lease.
func TestLateReadKeepsLaterRead(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv.Endpoint(), "/late-read/")
	t.Cleanup(func() { s.Close() })
	m := etcdlease.New(s, etcdlease.Options{})
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	l, err := m.Acquire(ctx, "j", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	g := lease.GuardValue(1)
	if err := m.Set(ctx, l, lease.Guard, g); err != nil {
		t.Fatal(err)
	}
	cli := s.Client()
	held := &heldGrants{Lease: cli.Lease, granted: make(chan struct{}), release: make(chan struct{})}
	cli.Lease = held
	t.Cleanup(func() { cli.Lease = held.Lease })
	key := s.LeaseKeys("j") + "guard-r/t1"

	held.armed.Store(true)
	late := make(chan error, 1)
	go func() {
		_, err := m.Read(ctx, "j", lease.Guard, "t1", "", g, 10*time.Second)
		late <- err
	}()
	<-held.granted
	if _, err := m.Read(ctx, "j", lease.Guard, "t1", "", g, 10*time.Second); err != nil {
		t.Fatalf("the later read: %v", err)
	}
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the reader's key after the later read: %v, %v", resp, err)
	}
	later := clientv3.LeaseID(resp.Kvs[0].Lease)
	close(held.release)
	err = <-late
	if err != nil && !errors.Is(err, lease.ErrRecalled) {
		t.Fatalf("the late read: %v", err)
	}
	resp, err = cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the reader's key after the late read: %v, %v", resp, err)
	}
	if got := clientv3.LeaseID(resp.Kvs[0].Lease); got != later {
		t.Fatalf("the late read moved the reader's key to etcd lease %x, granted before the later read's %x", got, later)
	}
	if ttl, err := cli.TimeToLive(ctx, later); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the later read's etcd lease after the late read: %+v, %v; want it alive", ttl, err)
	}
}
