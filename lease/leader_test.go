package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/lease/leasetest"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

func embedded(t *testing.T) (*lease.Embedded, *storage.Bolt) {
	t.Helper()
	return leasetest.Embedded(t, lease.EmbeddedOptions{})
}

func assigners(names ...string) func() []gossip.Peer {
	var peers []gossip.Peer
	for _, n := range names {
		peers = append(peers, gossip.Peer{Name: n, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive})
	}
	return func() []gossip.Peer { return peers }
}

// Two Assigners that both consider themselves preferred (each sees only
// itself, as in a partition) never both hold the job: the second gets it
// once the first releases it on stopping, and the first's commits are
// fenced out from then on.
func TestLeaderOneHolderAtATime(t *testing.T) {
	m, store := embedded(t)
	ctx := context.Background()
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, TTL: time.Second, Members: assigners("a")})
	b := lease.NewLeader(lease.LeaderConfig{Self: "b", Manager: m, TTL: time.Second, Members: assigners("b")})
	a.Evaluate(ctx, []string{"j"})
	b.Evaluate(ctx, []string{"j"})
	la, aHeld := a.Held("j")
	_, bHeld := b.Held("j")
	if !aHeld || bHeld {
		t.Fatalf("after both tried: a holds %v, b holds %v; want only a", aHeld, bHeld)
	}
	if g := a.Gained(); len(g) != 1 || g[0] != "j" {
		t.Errorf("a gained %v, want [j]", g)
	}
	if g := b.Gained(); len(g) != 0 {
		t.Errorf("b gained %v without the lease", g)
	}
	// b cannot see the holder a in gossip: it takes the writes itself, and
	// only a commits them.
	if r := b.Target("j"); !r.Self {
		t.Errorf("b routes writes for j to %+v, want itself", r)
	}
	if err := store.CommitFenced(ctx, "j", la.Epoch, 0, storagetest.Assignment("j", 1, 1, 1)); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stop()
	<-done // releases the lease
	if _, held := a.Held("j"); held {
		t.Error("a still holds j after its Run returned")
	}
	testwait.For(t, "b to take the released lease", func() bool {
		b.Evaluate(ctx, []string{"j"})
		_, held := b.Held("j")
		return held
	})
	lb, _ := b.Held("j")
	if lb.Epoch <= la.Epoch {
		t.Errorf("b's epoch %d is not above a's %d", lb.Epoch, la.Epoch)
	}
	err := store.CommitFenced(ctx, "j", la.Epoch, 1, storagetest.Assignment("j", 2, 1, 1))
	if !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("a's commit after b took the lease: got %v, want ErrFenced", err)
	}
}

// A holder that does not renew (a process paused past its lease) stops
// holding at its local deadline, before the manager could grant the lease
// to anyone else.
func TestLeaderHeldEndsAtDeadline(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, TTL: ttl})
	sent := time.Now()
	a.Evaluate(ctx, []string{"j"})
	if _, held := a.Held("j"); !held {
		t.Fatal("a did not take the lease")
	}
	time.Sleep(time.Until(sent.Add(ttl)))
	// A safety bound, not a speed claim: past the TTL since the request
	// was sent, the manager may grant the lease again, so a must not
	// consider it held.
	if _, held := a.Held("j"); held {
		t.Fatal("a still holds j a TTL after it asked for the lease, without renewing")
	}
	b := lease.NewLeader(lease.LeaderConfig{Self: "b", Manager: m, TTL: ttl})
	testwait.For(t, "b to take the expired lease", func() bool {
		b.Evaluate(ctx, []string{"j"})
		_, held := b.Held("j")
		return held
	})
}

// A renewing holder keeps its lease and epoch; a lease found lost is
// dropped at once, and only the epoch found lost.
func TestLeaderRenewsAndLoses(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := context.Background()
	// Renewals every third of a 2 s TTL keep up on a loaded machine.
	const ttl = 2 * time.Second
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, TTL: ttl})
	a.Evaluate(ctx, []string{"j"})
	first, _ := a.Held("j")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		time.Sleep(ttl / 10) // sampling, not a wait for an event
		l, held := a.Held("j")
		if !held || l.Epoch != first.Epoch {
			t.Fatalf("while renewing: held %v at epoch %d, want epoch %d", held, l.Epoch, first.Epoch)
		}
	}
	// A write sent under an earlier epoch, fenced after the lease was
	// taken again, does not drop the lease held now: dropped unreleased,
	// its key would stay on the holder's etcd lease, which the holder's
	// other jobs' renewals keep alive, and nobody could take the job.
	a.Lost("j", first.Epoch-1, storage.ErrFenced)
	if l, held := a.Held("j"); !held || l.Epoch != first.Epoch {
		t.Fatalf("after a write under an earlier epoch was fenced: held %v at epoch %d, want epoch %d", held, l.Epoch, first.Epoch)
	}
	a.Lost("j", first.Epoch, storage.ErrFenced)
	if _, held := a.Held("j"); held {
		t.Fatal("a holds j after Lost")
	}
	select {
	case <-a.Changes():
	default:
		t.Error("Lost did not signal a change")
	}
}

// A write forwarded to an Assigner as the job's preferred one makes it
// adopt the job when it prefers another; one forwarded to it as the
// holder, after it released the lease, does not.
func TestLeaderForwardedAdoption(t *testing.T) {
	m, _ := embedded(t)
	ctx := context.Background()
	// With no distances known, the rendezvous hash picks; find the
	// Assigner it prefers over "a" for job j.
	other := ""
	for _, n := range []string{"b", "c", "d", "e", "f"} {
		if lease.DefaultPreference().Choose("j", []string{"a", n}, nil, nil, "") == n {
			other = n
			break
		}
	}
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, Members: assigners("a", other)})
	if _, self := a.Preferred("j"); self {
		t.Fatalf("a prefers itself over %s", other)
	}
	a.Forwarded(ctx, "j", other, true)
	if _, self := a.Preferred("j"); self {
		t.Error("a write sent to a as a holder made it adopt the job")
	}
	a.Forwarded(ctx, "j", other, false)
	if _, self := a.Preferred("j"); !self {
		t.Error("a write sent to a as the preferred assigner did not make it adopt the job")
	}
	a.Evaluate(ctx, []string{"j"})
	if _, held := a.Held("j"); !held {
		t.Error("a adopted j but did not take its lease")
	}
}

// stallRenew is a manager whose renewals hang until their deadline while
// stalled is set: a manager, or the path to it, that stopped answering.
type stallRenew struct {
	lease.Manager
	stalled atomic.Bool
	// selfHeld counts Acquires refused because the caller itself holds
	// the lease.
	selfHeld atomic.Int32
}

func (m *stallRenew) Renew(ctx context.Context, l lease.Job) (lease.Job, error) {
	if m.stalled.Load() {
		<-ctx.Done()
		return lease.Job{}, ctx.Err()
	}
	return m.Manager.Renew(ctx, l)
}

func (m *stallRenew) RenewAll(ctx context.Context, ls []lease.Job) []lease.Renewal {
	if m.stalled.Load() {
		<-ctx.Done()
		out := make([]lease.Renewal, len(ls))
		for i := range out {
			out[i].Err = ctx.Err()
		}
		return out
	}
	return m.Manager.RenewAll(ctx, ls)
}

func (m *stallRenew) Acquire(ctx context.Context, job, holder string, ttl time.Duration) (lease.Job, error) {
	l, err := m.Manager.Acquire(ctx, job, holder, ttl)
	var he *lease.HeldError
	if errors.As(err, &he) && he.Holder == holder {
		m.selfHeld.Add(1)
	}
	return l, err
}

// A holder whose renewal missed its local deadline takes the job again at
// once, under a new epoch, rather than being locked out by its own lease
// until the manager lets it expire (or, with itself alive in gossip, until
// the next preference recheck).
func TestLeaderRetakesItsLapsedLease(t *testing.T) {
	t.Parallel()
	em, _ := embedded(t)
	m := &stallRenew{Manager: em}
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, TTL: ttl, Members: assigners("a"),
		Preference: lease.Preference{Recheck: time.Hour}})
	a.Evaluate(ctx, []string{"j"})
	first, held := a.Held("j")
	if !held {
		t.Fatal("a did not take the lease")
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	m.stalled.Store(true)
	testwait.For(t, "a's lease to lapse while its renewals hang", func() bool {
		_, held := a.Held("j")
		return !held
	})
	m.stalled.Store(false)
	// Evaluate and Run's retries both try to take it again.
	testwait.For(t, "a to take j again", func() bool {
		a.Evaluate(ctx, []string{"j"})
		_, held := a.Held("j")
		return held
	})
	again, _ := a.Held("j")
	if again.Epoch <= first.Epoch {
		t.Errorf("retaken at epoch %d, want above the lapsed %d", again.Epoch, first.Epoch)
	}
	if n := m.selfHeld.Load(); n != 0 {
		t.Errorf("%d acquires were refused because a itself held the lease", n)
	}
}

// view is a gossip view a test changes as it goes.
type view struct{ peers atomic.Pointer[[]gossip.Peer] }

func newView(names ...string) *view {
	v := &view{}
	v.set(names...)
	return v
}

func (v *view) set(names ...string) {
	peers := assigners(names...)()
	v.peers.Store(&peers)
}

func (v *view) get() []gossip.Peer { return *v.peers.Load() }

// runLeaders runs each of ls until the test ends.
func runLeaders(t *testing.T, ls ...*lease.Leader) {
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, len(ls))
	for _, l := range ls {
		go func() { done <- l.Run(ctx) }()
	}
	t.Cleanup(func() {
		stop()
		for range ls {
			<-done
		}
	})
}

// preferredOf returns, of two Assigner names, the one the rendezvous hash
// prefers for job j when no distance is known, and the other.
func preferredOf(x, y string) (winner, loser string) {
	if lease.DefaultPreference().Choose("j", []string{x, y}, nil, nil, "") == x {
		return x, y
	}
	return y, x
}

// An Assigner that sees a change first (here, the other Assigner joining)
// and finds the job held by a live Assigner defers to it; when the holder
// sees the change too and releases the job for it, it takes the lease at
// once instead of still deferring to an Assigner that let the job go,
// which would leave the job without a holder until something else
// changed.
func TestLeaderDeferralEndsWhenHolderLetsGo(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := t.Context()
	x, h := preferredOf("a", "b") // x is preferred once both see both
	hView, xView := newView(h), newView(h)
	// Rechecks an hour apart: only the deferral's own checks can end it.
	pref := lease.Preference{Recheck: time.Hour}
	hl := lease.NewLeader(lease.LeaderConfig{Self: h, Manager: m, TTL: time.Second, Members: hView.get, Preference: pref})
	xl := lease.NewLeader(lease.LeaderConfig{Self: x, Manager: m, TTL: time.Second, Members: xView.get, Preference: pref})
	hl.Evaluate(ctx, []string{"j"})
	if _, held := hl.Held("j"); !held {
		t.Fatalf("%s did not take the lease", h)
	}
	runLeaders(t, hl, xl)

	xView.set(h, x) // x sees both first: it prefers itself, h still holds
	xl.Evaluate(ctx, []string{"j"})
	xl.Evaluate(ctx, []string{"j"}) // the Assigner's next recheck
	if _, held := xl.Held("j"); held {
		t.Fatalf("%s took the lease %s holds", x, h)
	}
	if got := xl.PreferredName("j"); got != h {
		t.Errorf("%s prefers %q while %s holds the job; want it to defer to the holder", x, got, h)
	}
	hView.set(h, x) // now h sees x, prefers it, and releases the job for it
	hl.Evaluate(ctx, []string{"j"})
	if _, held := hl.Held("j"); held {
		t.Fatalf("%s kept the lease though it prefers %s", h, x)
	}
	testwait.For(t, x+" to take the job its holder let go", func() bool {
		xl.Evaluate(ctx, []string{"j"})
		_, held := xl.Held("j")
		return held
	})
	if g := xl.Gained(); len(g) != 1 || g[0] != "j" {
		t.Errorf("%s gained %v, want [j]", x, g)
	}
}

// An Assigner restarted under the same name before its previous run's
// lease expired finds the job held by itself: that lease is not another
// live holder's, and it takes the job as soon as the lease expires rather
// than waiting a preference recheck or deferring to itself.
func TestLeaderTakesLeaseOfItsPreviousRun(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	prev := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, TTL: ttl, Members: assigners("a")})
	prev.Evaluate(ctx, []string{"j"})
	first, held := prev.Held("j")
	if !held {
		t.Fatal("the previous run did not take the lease")
	}
	// The previous run is killed: it never renews nor releases.
	a := lease.NewLeader(lease.LeaderConfig{Self: "a", Manager: m, TTL: ttl, Members: assigners("a"),
		Preference: lease.Preference{Recheck: time.Hour}})
	a.Evaluate(ctx, []string{"j"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	testwait.For(t, "a to take the lease its previous run left", func() bool {
		_, held := a.Held("j")
		return held
	})
	if l, _ := a.Held("j"); l.Epoch <= first.Epoch {
		t.Errorf("taken at epoch %d, want above the previous run's %d", l.Epoch, first.Epoch)
	}
}

// An Assigner that adopted a job because writes were forwarded to it
// keeps the job while they keep coming, holding its lease or not: were
// the adoption to lapse once it held the lease, it would release the job
// to an Assigner that does not want it, and adopt it again at the next
// write.
func TestLeaderAdoptionLastsWhileWritesCome(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := t.Context()
	other, self := preferredOf("a", "b")
	const adoptFor = 100 * time.Millisecond
	l := lease.NewLeader(lease.LeaderConfig{Self: self, Manager: m, Members: assigners(self, other), AdoptFor: adoptFor})
	l.Forwarded(ctx, "j", other, false)
	l.Evaluate(ctx, []string{"j"})
	first, held := l.Held("j")
	if !held {
		t.Fatal("the adopted job's lease was not taken")
	}
	last := time.Now() // the last write forwarded
	for start := time.Now(); time.Since(start) < 5*adoptFor; {
		time.Sleep(adoptFor / 10) // writes every tenth of the adoption, not a wait for an event
		if gap := time.Since(last); gap >= adoptFor/2 {
			// The machine stalled the writes for half an adoption or
			// more: the adoption may have ended, as it should without
			// writes. Begin again from a write.
			t.Logf("writes stalled for %v; observing again", gap.Round(time.Millisecond))
			l.Forwarded(ctx, "j", other, false)
			l.Evaluate(ctx, []string{"j"})
			last, start = time.Now(), time.Now()
			if first, held = l.Held("j"); !held {
				t.Fatal("the adopted job's lease was not taken again")
			}
			continue
		}
		l.Forwarded(ctx, "j", other, false)
		last = time.Now()
		l.Evaluate(ctx, []string{"j"})
		lj, held := l.Held("j")
		if stall := time.Since(last); (!held || lj.Epoch != first.Epoch) && stall >= adoptFor/2 {
			// Stalled between the write and the check: the same.
			t.Logf("stalled for %v after a write; observing again", stall.Round(time.Millisecond))
			last = time.Time{}
			continue
		}
		if !held || lj.Epoch != first.Epoch {
			t.Fatalf("%v after the adoption began, with writes still forwarded: held %v at epoch %d, want epoch %d",
				time.Since(start).Round(time.Millisecond), held, lj.Epoch, first.Epoch)
		}
	}
}

// A write forwarded to an Assigner as the job's preferred one while
// another live Assigner holds the job's lease adopts nothing: the holder
// generates the job, and the write's receiver routes the job's writes to
// it.
func TestLeaderForwardedWithLiveHolder(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := t.Context()
	h, b := preferredOf("a", "c")
	hl := lease.NewLeader(lease.LeaderConfig{Self: h, Manager: m, Members: assigners(h, b)})
	hl.Evaluate(ctx, []string{"j"})
	if _, held := hl.Held("j"); !held {
		t.Fatalf("%s did not take the lease", h)
	}
	bl := lease.NewLeader(lease.LeaderConfig{Self: b, Manager: m, Members: assigners(h, b)})
	// A third Assigner's view differs: it takes b for the preferred one.
	bl.Forwarded(ctx, "j", "z", false)
	if _, self := bl.Preferred("j"); self {
		t.Errorf("%s adopted the job %s holds", b, h)
	}
	if r := bl.Target("j"); r.Peer.Name != h || !r.Holder {
		t.Errorf("%s routes the job's writes to %+v, want the holder %s", b, r, h)
	}
}

// An Assigner leaving gossip prefers another for its jobs, which do not
// know it is leaving until the leave is complete: it keeps its leases,
// and gives them back only when Run ends, after the leave.
func TestLeaderLeavingKeepsLeasesUntilRunEnds(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := t.Context()
	self, other := preferredOf("a", "b")
	v := newView(self, other)
	l := lease.NewLeader(lease.LeaderConfig{Self: self, Manager: m, Members: v.get})
	l.Evaluate(ctx, []string{"j"})
	if _, held := l.Held("j"); !held {
		t.Fatalf("%s did not take the lease", self)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()

	leaving := v.get()
	for i := range leaving {
		if leaving[i].Name == self {
			leaving[i].Status = gossip.StatusLeaving
		}
	}
	v.peers.Store(&leaving)
	l.Evaluate(ctx, []string{"j"})
	if _, held := l.Held("j"); !held {
		t.Fatalf("%s released the job while leaving, before the others could know", self)
	}
	stop()
	<-done
	if _, err := m.Holder(ctx, "j"); !errors.Is(err, lease.ErrNotHeld) {
		t.Errorf("after Run ended the job's lease reads %v; want it released", err)
	}
}

// An Assigner nearer the job's tasks than its holder by more than the
// margin wants the job even after it found the holder and deferred to it:
// it tries again as often as it checks the deferral, and so takes the job
// as soon as the holder lets it go, not a whole preference recheck later.
func TestLeaderNearerContenderTakesReleasedJob(t *testing.T) {
	t.Parallel()
	m, _ := embedded(t)
	ctx := t.Context()
	task := gossip.Peer{Name: "j/t", Roles: []gossip.Role{gossip.RoleTask}, Job: "j", Task: "t", Status: gossip.StatusAlive}
	withTask := func(v *view) func() []gossip.Peer {
		return func() []gossip.Peer { return append(v.get(), task) }
	}
	rtt := func(a, b string) (time.Duration, bool) {
		switch {
		case a == "x" && b == "j/t", a == "j/t" && b == "x":
			return time.Millisecond, true
		case a == "h" && b == "j/t", a == "j/t" && b == "h":
			return 10 * time.Millisecond, true
		}
		return 0, false
	}
	hView, xView := newView("h"), newView("h", "x")
	pref := lease.Preference{Recheck: time.Hour} // only the Leader's own pacing can retry
	hl := lease.NewLeader(lease.LeaderConfig{Self: "h", Manager: m, TTL: time.Second, Members: withTask(hView), RTT: rtt, Preference: pref})
	xl := lease.NewLeader(lease.LeaderConfig{Self: "x", Manager: m, TTL: time.Second, Members: withTask(xView), RTT: rtt, Preference: pref})
	hl.Evaluate(ctx, []string{"j"})
	xl.Evaluate(ctx, []string{"j"}) // finds h holding, defers
	xl.Evaluate(ctx, []string{"j"}) // nearer by far more than the margin: wants it still
	if _, self := xl.Preferred("j"); !self {
		t.Fatal("x does not prefer itself though it is nearer than h by 9 ms")
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- xl.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	hView.set("h", "x") // h sees x, nearer, and releases the job for it
	hl.Evaluate(ctx, []string{"j"})
	if _, held := hl.Held("j"); held {
		t.Fatal("h kept the job though x is nearer")
	}
	testwait.For(t, "x to take the job h released", func() bool {
		_, held := xl.Held("j")
		return held
	})
}

// On etcd, an Assigner deferring to the holder of a job asks etcd nothing
// about it while it waits: it watches the job lease keys, and takes the
// job when the holder's key is deleted.
func TestLeaderDeferralOnEtcdWaitsForTheRelease(t *testing.T) {
	srv := etcdtest.Start(t)
	manager := func() lease.Manager {
		s, err := etcdstore.Open(t.Context(), etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/deferral/"})
		if err != nil {
			t.Fatalf("etcdstore.Open: %v", err)
		}
		m := etcdlease.New(s, etcdlease.Options{})
		t.Cleanup(func() {
			m.Close()
			s.Close()
		})
		return m
	}
	ctx := t.Context()
	x, h := preferredOf("a", "b") // x is preferred once both see both
	hView, xView := newView(h), newView(h)
	// Rechecks an hour apart, a handoff window of two hours.
	pref := lease.Preference{Recheck: time.Hour}
	hl := lease.NewLeader(lease.LeaderConfig{Self: h, Manager: manager(), TTL: 2 * time.Second, Members: hView.get, Preference: pref})
	xl := lease.NewLeader(lease.LeaderConfig{Self: x, Manager: manager(), TTL: 2 * time.Second, Members: xView.get, Preference: pref})
	hl.Evaluate(ctx, []string{"j"})
	if _, held := hl.Held("j"); !held {
		t.Fatalf("%s did not take the lease", h)
	}
	runLeaders(t, hl, xl)
	testwait.For(t, x+"'s watch of the job leases", xl.WatchingReleases)

	xView.set(h, x) // x prefers itself; h holds the job
	xl.Evaluate(ctx, []string{"j"})
	if _, held := xl.Held("j"); held {
		t.Fatalf("%s took the lease %s holds", x, h)
	}
	// Deferring, x reads nothing of etcd: without the watch it would read
	// the job's lease every tenth of the TTL in the handoff window.
	before := etcdtest.MessagesReceived(t)
	time.Sleep(time.Second) // the window over which reads are counted
	if n := etcdtest.MessagesReceived(t)["Range"] - before["Range"]; n != 0 {
		t.Errorf("%v reads of etcd in a second while %s deferred to %s; want none", n, x, h)
	}
	hView.set(h, x) // h prefers x and releases the job
	hl.Evaluate(ctx, []string{"j"})
	if _, held := hl.Held("j"); held {
		t.Fatalf("%s kept the lease though it prefers %s", h, x)
	}
	// Only the release's event can end the deferral: no Evaluate here, and
	// the next check of it is a day away.
	testwait.For(t, x+" to take the job its holder let go", func() bool {
		_, held := xl.Held("j")
		return held
	})
}
