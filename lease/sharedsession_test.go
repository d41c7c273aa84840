package lease_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// gate delays every byte etcd sends to the connections it dialled while it
// is closed: requests still reach etcd and are applied, their answers come
// late (a one-way network stall).
type gate struct {
	mu     sync.Mutex
	closed bool
	open   chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
}

func (g *gate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	ch, closed := g.open, g.closed
	g.mu.Unlock()
	if closed {
		<-ch
	}
}

func (g *gate) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.g.wait()
	return n, err
}

// sharedSessionRig is one Assigner's Leader ("a") on an etcd manager whose
// connection goes through a gate, and an observer's store and manager on
// a connection of their own.
type sharedSessionRig struct {
	srv      *etcdtest.Server
	g        *gate
	a        *lease.Leader
	ma       *etcdlease.Manager // a's manager
	observer *etcdstore.Store
	other    *etcdlease.Manager
}

func newSharedSessionRig(t *testing.T, prefix string, reqTimeout time.Duration) *sharedSessionRig {
	t.Helper()
	srv := etcdtest.Start(t)
	g := newGate()
	t.Cleanup(g.reopen)
	open := func(dial func(context.Context, string) (net.Conn, error)) *etcdstore.Store {
		s, err := etcdstore.Open(t.Context(), etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: prefix,
			RequestTimeout: reqTimeout, Dial: dial})
		if err != nil {
			t.Fatalf("etcdstore.Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	sa := open(g.dial)
	ma := etcdlease.New(sa, etcdlease.Options{RequestTimeout: reqTimeout})
	t.Cleanup(func() { ma.Close() })
	observer := open(nil)
	other := etcdlease.New(observer, etcdlease.Options{})
	t.Cleanup(func() { other.Close() })
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: ma, TTL: 2 * time.Second, Members: assigners("a"),
		Preference: lease.Preference{Recheck: time.Hour}, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	return &sharedSessionRig{srv: srv, g: g, a: a, ma: ma, observer: observer, other: other}
}

// checkNotStranded fails the test if, for 3 TTLs, job j is held by
// nobody: a wants it and keeps evaluating it, yet does not hold it, and no
// other Assigner can take it.
func (r *sharedSessionRig) checkNotStranded(t *testing.T, jobs []string) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(3 * 2 * time.Second)
	for time.Now().Before(deadline) {
		r.a.Evaluate(ctx, jobs) // the Assigner's recheck
		if _, held := r.a.Held("j"); held {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	h, herr := r.other.Holder(ctx, "j")
	_, berr := r.other.Acquire(ctx, "j", "b", 2*time.Second)
	if berr == nil {
		return
	}
	t.Fatalf("job j has had no writer for 3 TTLs: a wants it and does not hold it (a.Held = false), "+
		"yet etcd has its key (holder %q, epoch %d, TTL %v, err %v), kept alive by a's session through the renewals of a's other job; "+
		"another Assigner's Acquire: %v", h.Holder, h.Epoch, h.TTL, herr, berr)
}

// An Acquire whose put etcd applied but whose answer was lost (the
// request timed out) leaves the job's key on the holder's etcd lease,
// known to neither the manager nor the Leader; the renewals of the
// holder's other jobs keep that etcd lease, and with it the key, alive,
// so the key does not expire. The holder's next Acquire of the job
// deletes it (only that key, on that etcd lease) and takes the job
// afresh: the job does not stay without a holder.
func TestAcquireWhoseAnswerWasLostDoesNotStrandTheJob(t *testing.T) {
	r := newSharedSessionRig(t, "/lost-answer/", 500*time.Millisecond)
	ctx := t.Context()
	r.a.Evaluate(ctx, []string{"k"})
	if _, held := r.a.Held("k"); !held {
		t.Fatal("a did not take k")
	}
	runLeaders(t, r.a)

	r.g.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.a.Evaluate(ctx, []string{"j", "k"}) // the Acquire of j times out; etcd applied its put
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Evaluate did not return")
	}
	r.g.reopen()
	h, err := r.other.Holder(ctx, "j")
	if err != nil || h.Holder != "a" {
		t.Fatalf("j's key after a's Acquire lost its answer: %+v, %v; want holder a (the put was applied)", h, err)
	}
	if _, held := r.a.Held("j"); held {
		t.Fatal("a holds j: the Acquire's answer was not lost")
	}
	r.checkNotStranded(t, []string{"j", "k"})
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// A renewal returns when its caller's context ends, even the caller that
// sends the batch's keep-alive (which the manager's request timeout
// bounds), so that a Leader whose renewal hangs goes on with its retries,
// its checks and its shutdown after a renewal interval.
func TestRenewAllHonoursItsContext(t *testing.T) {
	const reqTimeout = 3 * time.Second
	r := newSharedSessionRig(t, "/renew-ctx/", reqTimeout)
	ctx := t.Context()
	r.a.Evaluate(ctx, []string{"k"})
	l, held := r.a.Held("k")
	if !held {
		t.Fatal("a did not take k")
	}
	r.g.close()
	defer r.g.reopen()
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	out := r.ma.RenewAll(rctx, []lease.Job{l})
	took := time.Since(start)
	t.Logf("RenewAll with a 300ms context returned after %v: %v", took.Round(time.Millisecond), out[0].Err)
	// Not a speed bound: unbounded by its context, the call returns at
	// the request timeout, ten times the context's.
	if took >= reqTimeout {
		t.Fatalf("RenewAll with a 300ms context returned after %v, at the manager's request timeout: its caller's context did not bound it", took.Round(time.Millisecond))
	}
}
