package slicelet

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/leaseclock"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/guard"
)

// DefaultLeaseTTL is Config.LeaseTTL's default: etcd's least lease TTL
// with its default election timeout.
const DefaultLeaseTTL = 2 * time.Second

// DefaultReleaseWait is Config.ReleaseWait's default.
const DefaultReleaseWait = time.Second

// transitionPoll paces the lease loop while a transition waits on this
// task: a new assignment, a bridge to take, or a guard to read.
const transitionPoll = 20 * time.Millisecond

// recentAssignments is how many of the newest assignments the Slicelet
// keeps for its leases: a guard or bridge names generations, and the task
// can read it only with their assignments at hand.
const recentAssignments = 8

// maxLosses bounds the log of ranges this task stopped owning, which
// handles check for continuity; a handle older than the log is judged
// discontinuous.
const maxLosses = 256

// ownership is one read lease this task holds on its job's guard or
// bridge, and the key ranges it lets the task use. Only deadline changes
// after it is installed.
type ownership struct {
	value lease.Value
	// owned are the ranges the task may use: under the guard, those the
	// guard's generation assigns it; under the bridge from f to t, those
	// both assign it. Sorted and merged.
	owned []assign.Slice
	// token is the fencing token of the keys it covers: the generation at
	// which the task's ownership of them began, as far as this lease can
	// tell (the guard's generation; the bridge's from).
	token uint64
	// deadline is when the task stops using the lease, in nanoseconds of
	// the Slicelet's lease clock (Slicelet.since); renewed is when the
	// request that last granted or renewed it was sent.
	deadline, renewed atomic.Int64
	// ttl is the lifetime the manager last granted, which may be less
	// than the one asked for (Config.LeaseTTL): renewals are paced by it.
	ttl atomic.Int64
	// handles counts the outstanding handles per handleBuckets-th of the
	// key space: a drain waits for the buckets a loss touches, so a handle
	// on a kept key holds it up only when the two share a bucket.
	handles [handleBuckets]atomic.Int32
	// draining is set while the task waits for handles before giving
	// ranges up; a Release then wakes it.
	draining atomic.Bool
	// giving is set, and stays set, once a drain of some of its ranges
	// has begun: a handle taken under it from then on may come after the
	// drain counted the handles, so HeldFor promises it nothing.
	giving atomic.Bool
	wake   chan struct{}
}

// newOwnership returns a lease not yet installed; extend sets its
// deadline.
func newOwnership(v lease.Value, owned []assign.Slice) *ownership {
	o := &ownership{value: v, owned: owned, token: v.From, wake: make(chan struct{}, 1)}
	o.deadline.Store(math.MaxInt64)
	return o
}

// handleBuckets is how finely handle counts split the key space.
const handleBuckets = 1024

// bucket is k's handle bucket.
func bucket(k assign.SliceKey) int { return int(uint64(k) >> (63 - 10)) }

// find returns the index of the owned range holding k, or -1.
func (o *ownership) find(k assign.SliceKey) int {
	if o == nil {
		return -1
	}
	// The last range starting at or before k.
	lo, hi := 0, len(o.owned)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if o.owned[m].Start <= k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 || k >= o.owned[lo-1].End {
		return -1
	}
	return lo - 1
}

// strongView is what strong-mode lookups read, swapped atomically.
type strongView struct {
	guard, bridge *ownership
}

// loss is a set of ranges this task stopped owning, numbered in order.
type loss struct {
	seq    uint64
	all    bool // every key
	ranges []assign.Slice
}

// strongState is a strong-mode Slicelet's lease state.
type strongState struct {
	clock *leaseclock.Clock // what lease deadlines are counted on; see since
	view  atomic.Pointer[strongView]
	kick  chan struct{} // a new assignment arrived

	// lossSeq is the number of the newest loss; handles remember it.
	lossSeq atomic.Uint64
	// promised is the latest end of what Handle.HeldFor answered, on the
	// lease clock: the task gives its leases up when it stops only once
	// it has passed or the handles are released.
	promised atomic.Int64
	// changes wakes AwaitHandle on any change of the view, of a lease's
	// validity or of the newest assignment.
	changes broadcast

	mu     sync.Mutex
	losses []loss                        // the newest maxLosses losses, oldest first
	recent map[uint64]*assign.Assignment // generation → assignment, newest few
	inc    string                        // their store incarnation

	client     slicerv1connect.LeaseServiceClient
	clientAddr string

	// instance names this process of the task to the lease manager, drawn
	// at random when the Slicelet is built: a read is refused while
	// another process of the task (a restart while this one was paused or
	// cut off) holds a live one, and a release by this one leaves the
	// other's read alone.
	instance string
}

func (s *Slicelet) strongMode() bool { return s.cfg.Consistency == assign.Strong }

// since is the Slicelet's lease clock, in nanoseconds: monotonic, and
// counting the time the host spent suspended, so that a lease does not
// outlive its deadline across a suspend (package leaseclock).
func (s *Slicelet) since() int64 { return s.strong.clock.Now() }

// valid reports whether o may be used now.
func (s *Slicelet) valid(o *ownership) bool {
	return o != nil && s.since() < o.deadline.Load()
}

// remember keeps a for the leases: called for every assignment installed.
func (st *strongState) remember(a *assign.Assignment) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if a.Incarnation != st.inc {
		clear(st.recent)
		st.inc = a.Incarnation
	}
	st.recent[a.Generation] = a
	if len(st.recent) > recentAssignments {
		oldest := a.Generation
		for g := range st.recent {
			oldest = min(oldest, g)
		}
		delete(st.recent, oldest)
	}
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// incarnation is the store incarnation of the assignments kept.
func (st *strongState) incarnation() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.inc
}

func (st *strongState) assignment(gen uint64) *assign.Assignment {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.recent[gen]
}

func (st *strongState) newest() uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var g uint64
	for gen := range st.recent {
		g = max(g, gen)
	}
	return g
}

// lose records that the task stopped owning ranges, so that handles taken
// before report discontinuity.
func (st *strongState) lose(ranges []assign.Slice) {
	if len(ranges) > 0 {
		st.record(loss{ranges: ranges})
	}
}

// promise records that a HeldFor answered until end (lease clock).
func (st *strongState) promise(end int64) {
	for {
		cur := st.promised.Load()
		if end <= cur || st.promised.CompareAndSwap(cur, end) {
			return
		}
	}
}

// loseAll records that the task stopped owning every key.
func (st *strongState) loseAll() { st.record(loss{all: true}) }

func (st *strongState) record(l loss) {
	st.mu.Lock()
	defer st.mu.Unlock()
	seq := st.lossSeq.Load() + 1
	l.seq = seq
	st.losses = append(st.losses, l)
	if len(st.losses) > maxLosses {
		st.losses = slices.Delete(st.losses, 0, len(st.losses)-maxLosses)
	}
	st.lossSeq.Store(seq)
}

// lostSince reports whether k was in a loss after seq, or whether the log
// no longer reaches back to seq.
func (st *strongState) lostSince(seq uint64, k assign.SliceKey) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.losses) == 0 || st.losses[0].seq > seq+1 {
		return len(st.losses) > 0
	}
	for _, l := range st.losses {
		if l.seq <= seq {
			continue
		}
		if l.all {
			return true
		}
		for _, r := range l.ranges {
			if r.Start <= k && k < r.End {
				return true
			}
		}
	}
	return false
}

// strongLoop keeps this task's guard and bridge leases until ctx ends, then
// releases them.
func (s *Slicelet) strongLoop(ctx context.Context) {
	defer s.releaseLeases()
	defer s.keepPromises()
	for {
		wait := s.strongStep(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.strong.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// leaseClient returns a LeaseService client for the job's preferred
// Assigner; with an etcd store any Assigner serves every lease.
func (s *Slicelet) leaseClient() (slicerv1connect.LeaseServiceClient, string, bool) {
	p, ok := s.assigner()
	if !ok || p.RPCAddr == "" {
		return nil, "", false
	}
	st := &s.strong
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.client == nil || st.clientAddr != p.Name+"@"+p.RPCAddr {
		hc, url := s.assignerClient(p)
		st.client = slicerv1connect.NewLeaseServiceClient(hc, url)
		st.clientAddr = p.Name + "@" + p.RPCAddr
	}
	return st.client, p.RPCAddr, true
}

// read sends one ReadLease; v nil only asks for the state. It returns the
// response and when the request was sent.
func (s *Slicelet) read(ctx context.Context, client slicerv1connect.LeaseServiceClient, kind lease.Kind, v *lease.Value) (*slicerv1.ReadLeaseResponse, int64, error) {
	req := &slicerv1.ReadLeaseRequest{Job: s.cfg.Job, Task: s.cfg.Task, Kind: kindProto(kind), TtlMs: uint32(s.cfg.LeaseTTL.Milliseconds()),
		Instance: s.strong.instance}
	if v != nil {
		req.Value = &slicerv1.LeaseValue{FromGeneration: v.From, ToGeneration: v.To}
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL)
	defer cancel()
	sent := s.since()
	resp, err := client.ReadLease(rctx, connect.NewRequest(req))
	if err != nil {
		return nil, sent, err
	}
	return resp.Msg, sent, nil
}

func kindProto(k lease.Kind) slicerv1.LeaseKind {
	if k == lease.Bridge {
		return slicerv1.LeaseKind_LEASE_KIND_BRIDGE
	}
	return slicerv1.LeaseKind_LEASE_KIND_GUARD
}

func stateOf(p *slicerv1.LeaseState) lease.State {
	return lease.State{Set: p.GetSet(), Recalled: p.GetRecalled(),
		Value: lease.Value{From: p.GetValue().GetFromGeneration(), To: p.GetValue().GetToGeneration()}}
}

// extend moves o's deadline to a renewal sent at sent for ttl. A renewal
// sent after the deadline had passed may follow a gap in which the lease
// had lapsed: the task's ownership of o's ranges starts again, and
// handles taken before it are no longer continuous.
func (s *Slicelet) extend(o *ownership, sent int64, ttlMs uint32) {
	ttl := time.Duration(ttlMs) * time.Millisecond
	deadline := sent + int64(ttl) - int64(float64(ttl)*s.cfg.ClockMargin)
	lapsed := sent >= o.deadline.Load()
	if lapsed {
		s.strong.lose(o.owned)
	}
	o.deadline.Store(deadline)
	o.renewed.Store(sent)
	o.ttl.Store(int64(ttl))
	if lapsed {
		s.strong.changes.notify() // valid again
	}
}

// due reports whether o's renewal is due: a third of the TTL has passed
// since the last one was sent.
func (s *Slicelet) due(o *ownership) bool {
	return s.since()-o.renewed.Load() >= int64(s.renewEvery(o))
}

// renewEvery is how often o is renewed: a third of the TTL granted, which
// the Assigner may cap below the one asked for.
func (s *Slicelet) renewEvery(o *ownership) time.Duration {
	ttl := s.cfg.LeaseTTL
	if g := time.Duration(o.ttl.Load()); g > 0 {
		ttl = min(ttl, g)
	}
	return ttl / 3
}

// maxFollowSteps bounds the lease steps one strongStep takes: a
// transition needs at most a renewal, a bridge taken, the guard released
// and the next guard read.
const maxFollowSteps = 8

// held is what the task holds, as guard.Follow takes it.
func (s *Slicelet) held(v *strongView) guard.Held {
	var h guard.Held
	if v.guard != nil {
		h.Guard, h.GuardValid, h.GuardDue = v.guard.value, s.valid(v.guard), s.due(v.guard)
	}
	if v.bridge != nil {
		h.Bridge, h.BridgeValid, h.BridgeDue = v.bridge.value, s.valid(v.bridge), s.due(v.bridge)
	}
	return h
}

// strongStep renews what the task holds and takes the next lease of a
// transition, following the protocol of package lease/guard, and returns
// how long to wait before the next step.
func (s *Slicelet) strongStep(ctx context.Context) time.Duration {
	renew := s.cfg.LeaseTTL / 3
	select {
	case <-s.joined:
	default:
		return transitionPoll
	}
	client, addr, ok := s.leaseClient()
	if !ok {
		return transitionPoll
	}
	st := &s.strong
	v := st.view.Load()
	fail := func(what string, err error) time.Duration {
		if api.Refusal(err) == api.RefusalOtherProcess {
			// Another process of this task holds a live read: the
			// task was restarted while this one was paused or cut off
			// (then this one's reads have ended at the manager, and it
			// stops using every lease now), or this is the restart and
			// waits for the other's read to be released or to expire.
			if cur := st.view.Load(); cur.guard != nil || cur.bridge != nil {
				s.dropAll()
			}
			if ctx.Err() == nil {
				s.log.Warn("slicelet: "+what+" refused: another process of this task holds the lease; this one owns no key until that read ends",
					"assigner", addr, "err", err)
			}
			return renew
		}
		s.notMember(err)
		if ctx.Err() == nil {
			s.log.Warn("slicelet: "+what+" failed; the task stops using its leases at their deadlines", "assigner", addr, "err", err)
		}
		return transitionPoll * 5
	}

	// The leases' state, with the guard renewed if that is due.
	var resp *slicerv1.ReadLeaseResponse
	var err error
	if v.guard != nil && s.due(v.guard) {
		var sent int64
		resp, sent, err = s.read(ctx, client, lease.Guard, &v.guard.value)
		if err != nil {
			return fail("renewing the guard", err)
		}
		if resp.GetGranted() {
			s.extend(v.guard, sent, resp.GetTtlMs())
		}
	} else if resp, _, err = s.read(ctx, client, lease.Guard, nil); err != nil {
		return fail("reading the leases' state", err)
	}
	if !resp.GetStrong() {
		s.log.Error("slicelet: this Slicelet is in strong mode but its job is not configured strong; it owns no key until it is (slicerd job set JOB --consistency strong)")
		s.dropAll()
		return renew
	}
	if inc := resp.GetIncarnation(); inc != "" && inc != st.incarnation() {
		// The leases name generations of another store than the
		// assignments this task has (the store was recreated, or the
		// task's stream lags behind the change): none of them can be
		// used until the assignments of that store arrive.
		if v.guard != nil || v.bridge != nil {
			s.log.Warn("slicelet: the lease manager serves another store incarnation than this task's assignments; the task stops using its leases until the assignments of that store arrive",
				"leases", inc, "assignments", st.incarnation())
			s.releaseLeases()
		}
		return transitionPoll
	}
	g, b := stateOf(resp.GetGuard()), stateOf(resp.GetBridge())
	have := func(gen uint64) bool { return st.assignment(gen) != nil }

steps:
	for range maxFollowSteps {
		v = st.view.Load()
		step := guard.Follow(s.held(v), g, b, have)
		switch step.Op {
		case guard.Idle:
			break steps
		case guard.DropGuard:
			// The guard moved on: the manager let this task's read end.
			var kept []assign.Slice
			if v.bridge != nil {
				kept = v.bridge.owned
			}
			s.setView(nil, v.bridge, subtract(v.guard.owned, kept))
		case guard.DropBridge:
			// The bridge was replaced, or the guard passed its target.
			var kept []assign.Slice
			if v.guard != nil && s.valid(v.guard) {
				kept = v.guard.owned
			}
			s.setView(v.guard, nil, subtract(v.bridge.owned, kept))
			if b.Value == v.bridge.value {
				s.unread(ctx, client, lease.Bridge, v.bridge.value)
			}
		case guard.RenewGuard, guard.RenewBridge:
			kind, o := lease.Guard, v.guard
			if step.Op == guard.RenewBridge {
				kind, o = lease.Bridge, v.bridge
			}
			r, sent, err := s.read(ctx, client, kind, &o.value)
			if err != nil {
				return fail("renewing the "+kind.String(), err)
			}
			if r.GetGranted() {
				s.extend(o, sent, r.GetTtlMs())
			}
			g, b = stateOf(r.GetGuard()), stateOf(r.GetBridge())
		case guard.TakeBridge:
			from, to := st.assignment(step.Value.From), st.assignment(step.Value.To)
			if from == nil || to == nil {
				break steps // pushed out of the newest few meanwhile
			}
			r, sent, err := s.read(ctx, client, lease.Bridge, &step.Value)
			if err != nil {
				return fail("reading the bridge", err)
			}
			g, b = stateOf(r.GetGuard()), stateOf(r.GetBridge())
			if !r.GetGranted() {
				continue
			}
			o := newOwnership(step.Value, intersect(ownedRanges(from, s.cfg.Task), ownedRanges(to, s.cfg.Task)))
			s.extend(o, sent, r.GetTtlMs())
			s.setView(v.guard, o, nil)
			s.log.Debug("slicelet: bridge read", "from", step.Value.From, "to", step.Value.To, "kept_ranges", len(o.owned))
		case guard.ReleaseGuard:
			// The bridge from the guard's generation is held: wait for
			// the handles on the keys it does not cover, stop owning
			// them and give the guard up, so that its recall need not
			// wait for the read to expire.
			lost := subtract(v.guard.owned, v.bridge.owned)
			s.drainHandles(v.guard, lost)
			s.setView(nil, v.bridge, lost)
			s.unread(ctx, client, lease.Guard, v.guard.value)
			s.log.Debug("slicelet: guard released for the bridge", "lost_ranges", len(lost))
		case guard.ReadGuard:
			a := st.assignment(step.Value.From)
			if a == nil {
				break steps
			}
			r, sent, err := s.read(ctx, client, lease.Guard, &step.Value)
			if err != nil {
				return fail("reading the guard", err)
			}
			g, b = stateOf(r.GetGuard()), stateOf(r.GetBridge())
			if !r.GetGranted() {
				continue
			}
			o := newOwnership(step.Value, ownedRanges(a, s.cfg.Task))
			s.extend(o, sent, r.GetTtlMs())
			// The guard replaces the bridge at once: it covers every key
			// the bridge did, with a newer token.
			var dropped []assign.Slice
			if v.bridge != nil {
				dropped = subtract(v.bridge.owned, o.owned)
				// Keys the bridge covered and the guard does not leave
				// once their handles are released, as in any move.
				s.drainHandles(v.bridge, dropped)
			}
			s.setView(o, nil, dropped)
			if v.bridge != nil {
				s.unread(ctx, client, lease.Bridge, v.bridge.value)
			}
			s.log.Debug("slicelet: guard read", "generation", step.Value.From, "ranges", len(o.owned))
		}
	}

	// Poll fast while a transition waits on this task.
	v = st.view.Load()
	for _, o := range [2]*ownership{v.guard, v.bridge} {
		if o != nil {
			renew = min(renew, s.renewEvery(o))
		}
	}
	switch {
	case v.guard == nil:
		return transitionPoll
	case g.Recalled || (b.Set && !b.Recalled && v.bridge == nil && b.Value.From == v.guard.value.From):
		return transitionPoll
	case st.newest() > v.guard.value.From:
		return transitionPoll
	}
	return renew
}

// drainHandles waits, up to ReleaseWait, until no handle taken under o is
// outstanding on the ranges about to be lost, as a slab release waits for
// its items' reference counts.
func (s *Slicelet) drainHandles(o *ownership, lost []assign.Slice) {
	if len(lost) == 0 {
		return
	}
	// giving before the handles are counted: a handle counted after the
	// first count below may be missed, and its HeldFor sees giving.
	o.giving.Store(true)
	if busy := s.awaitHandles(o, lost, s.cfg.ReleaseWait); busy > 0 {
		s.log.Warn("slicelet: handles still outstanding on keys leaving this task; giving the keys up anyway", "handles", busy, "waited", s.cfg.ReleaseWait)
	}
}

// awaitHandles waits, up to wait, until no handle taken under o is
// outstanding on ranges, and returns how many still are.
func (s *Slicelet) awaitHandles(o *ownership, ranges []assign.Slice, wait time.Duration) (busy int) {
	o.draining.Store(true)
	defer o.draining.Store(false)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		busy = 0
		for _, r := range ranges {
			for b := bucket(r.Start); b <= bucket(r.End-1); b++ {
				busy += int(o.handles[b].Load())
			}
		}
		if busy == 0 {
			return 0
		}
		select {
		case <-o.wake:
		case <-timer.C:
			return busy
		}
	}
}

// keepPromises waits, when the task stops, until the handles outstanding
// under its leases are released or the last HeldFor answered has passed,
// whichever comes first: only then may it give the leases up. The leases
// are not renewed meanwhile; HeldFor never outlasts them.
func (s *Slicelet) keepPromises() {
	v := s.strong.view.Load()
	if v == nil {
		return
	}
	// No promise from here on: the application still takes handles while
	// Run stops, and a promise made after the latest one was read would
	// outlast the leases.
	for _, o := range [2]*ownership{v.guard, v.bridge} {
		if o != nil {
			o.giving.Store(true)
		}
	}
	for _, o := range [2]*ownership{v.guard, v.bridge} {
		if o == nil {
			continue
		}
		// Read again after each wait: a HeldFor that saw giving unset
		// may record its promise after an earlier read.
		for {
			left := time.Duration(s.strong.promised.Load() - s.since())
			if left <= 0 {
				break
			}
			if s.awaitHandles(o, o.owned, left) == 0 {
				break
			}
			if s.strong.promised.Load() <= s.since() {
				s.log.Warn("slicelet: stopping with handles outstanding; their HeldFor has passed")
				break
			}
		}
	}
}

// setView installs guard and bridge, recording lost, and the ranges of any
// lease it replaces that had lapsed, as no longer owned.
func (s *Slicelet) setView(guard, bridge *ownership, lost []assign.Slice) {
	if old := s.strong.view.Load(); old != nil {
		for _, o := range []*ownership{old.guard, old.bridge} {
			if o != nil && o != guard && o != bridge && !s.valid(o) {
				lost = append(slices.Clip(lost), o.owned...)
			}
		}
	}
	s.strong.lose(lost)
	s.strong.view.Store(&strongView{guard: guard, bridge: bridge})
	s.strong.changes.notify()
}

// dropAll stops owning every key.
func (s *Slicelet) dropAll() {
	s.strong.loseAll()
	s.strong.view.Store(&strongView{})
	s.strong.changes.notify()
}

// unread releases the task's read of kind at v. The release names v: one
// that reaches the manager late (held up in the network, or by a paused
// Assigner, after this call gave up on it) leaves alone a read the task
// took since at another value.
func (s *Slicelet) unread(ctx context.Context, client slicerv1connect.LeaseServiceClient, kind lease.Kind, v lease.Value) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL)
	defer cancel()
	_, err := client.ReleaseLease(rctx, connect.NewRequest(&slicerv1.ReleaseLeaseRequest{Job: s.cfg.Job, Task: s.cfg.Task, Kind: kindProto(kind),
		Value: &slicerv1.LeaseValue{FromGeneration: v.From, ToGeneration: v.To}, Instance: s.strong.instance}))
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		s.log.Debug("slicelet: releasing a lease failed; it expires instead", "kind", kind.String(), "err", err)
	}
}

// releaseLeases gives up both leases when the Slicelet stops, after
// dropping them from the view.
func (s *Slicelet) releaseLeases() {
	v := s.strong.view.Load()
	s.dropAll()
	client, _, ok := s.leaseClient()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaseTTL)
	defer cancel()
	if v.guard != nil {
		s.unread(ctx, client, lease.Guard, v.guard.value)
	}
	if v.bridge != nil {
		s.unread(ctx, client, lease.Bridge, v.bridge.value)
	}
}
