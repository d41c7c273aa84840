package slicelet

import (
	"time"

	"github.com/slicerd/slicerd/assign"
)

// Handle is a task's claim on one key for the span of a request or a
// session (Slicer §2.2, after Centrifuge). Take it when work on the key
// starts (Slicelet.Handle), check IsAssignedContinuously before making the
// result visible, pass Token to the storage the work writes to, and
// Release it when done. Checking ownership at the start and at the end is
// not enough, since the key may have left this task and come back in
// between; a Handle tells.
//
// Handles count: a key leaving this task waits, up to Config.ReleaseWait,
// for the handles on it to be released before the task gives it up, as a
// slab release waits for its items' reference counts. A Handle is a small
// value; Release it exactly once, and not through copies.
type Handle struct {
	s     *Slicelet
	o     *ownership // the lease it was taken under; nil: not owned
	i     int        // the handle bucket of o counting it; -1 in affinity mode
	key   assign.SliceKey
	token uint64
	seq   uint64
}

// Handle takes a handle on key. In strong mode (Config.Consistency) the
// key is owned only while a valid guard or bridge lease covers it; in
// affinity mode, while the current assignment gives it to this task, with
// no guarantee of exclusivity. It does not allocate.
func (s *Slicelet) Handle(key []byte) Handle { return s.handle(assign.HashKey(key)) }

// HandleString is Handle for a string key.
func (s *Slicelet) HandleString(key string) Handle { return s.handle(assign.HashString(key)) }

func (s *Slicelet) handle(k assign.SliceKey) Handle {
	h := Handle{s: s, key: k}
	if !s.strongMode() {
		if v := s.view.Load(); v != nil && v.mine[v.table.Lookup(k)] {
			h.token = v.table.Assignment().Generation
			h.i = -1
		}
		return h
	}
	// The loss count first: a loss recorded after it is seen by
	// IsAssignedContinuously, whatever view is read below.
	h.seq = s.strong.lossSeq.Load()
	v := s.strong.view.Load()
	for _, o := range [2]*ownership{v.guard, v.bridge} {
		if o.find(k) >= 0 && s.valid(o) {
			b := bucket(k)
			o.handles[b].Add(1)
			h.o, h.i, h.token = o, b, o.token
			return h
		}
	}
	return h
}

// Owned reports whether the key was this task's when the handle was taken.
func (h Handle) Owned() bool { return h.o != nil || h.i == -1 }

// Token is the key's fencing token when the handle was taken: in strong
// mode it grows whenever the key's ownership changes hands (it is the
// generation at which this task's ownership began, as far as its leases
// tell), so storage that remembers the highest token written for a key
// and refuses lower ones rejects a former owner's late write. 0 when not
// owned. Tokens compare only within one store incarnation. In affinity
// mode it is the assignment's generation, and promises nothing.
func (h Handle) Token() uint64 { return h.token }

// IsAssignedContinuously reports whether the key has been this task's
// without a break since the handle was taken, under a valid lease, and
// still is: in strong mode, no other task can have believed it owned the
// key meanwhile. A process paused past its lease (a stop signal, a long
// GC) gets false until it holds a new lease, and false for every handle
// taken before the pause. In affinity mode it reports whether the current
// assignment still gives the key to this task.
func (h Handle) IsAssignedContinuously() bool {
	s := h.s
	if s == nil || !h.Owned() {
		return false
	}
	if !s.strongMode() {
		v := s.view.Load()
		return v != nil && v.mine[v.table.Lookup(h.key)]
	}
	v := s.strong.view.Load()
	covered := false
	for _, o := range [2]*ownership{v.guard, v.bridge} {
		if o.find(h.key) >= 0 && s.valid(o) {
			covered = true
			break
		}
	}
	if !covered {
		return false
	}
	return s.strong.lossSeq.Load() == h.seq || !s.strong.lostSince(h.seq, h.key)
}

// ValidFor is how much longer the lease the handle was taken under lets
// the task use the key, as of now: renewals extend it, so asking again
// later may give more. Work that must end while the task owns the key
// (a write a newer owner must not overlap) ends within it, counted on a
// monotonic clock from before the call. 0 when the key is not owned or
// the lease has run out; in affinity mode, where no lease bounds
// ownership, 0 as well.
func (h Handle) ValidFor() time.Duration {
	if h.s == nil || h.o == nil {
		return 0
	}
	return time.Duration(max(0, h.o.deadline.Load()-h.s.since()))
}

// HeldFor is how long from now, at least, the key stays this task's
// without a break while the handle is held: work on the key that ends
// within it, counted on a monotonic clock from before the call, may take
// IsAssignedContinuously as true without asking — the answer a process
// on the other side of a local API gets in the same round trip as its
// handle. It is the lesser of ValidFor and Config.ReleaseWait (a key
// leaving the task waits that long for the handles on it), and 0 when the
// key is not owned or no longer continuously, once the drain of its lease
// has begun (the handle may have come after the drain counted the
// handles), and in affinity mode.
//
// The Slicelet keeps the promise when it stops: it gives its leases up
// only once the handles are released or every HeldFor it answered has
// passed. Two things end it early, as they end every guarantee of strong
// mode: the job set out of strong mode, and its store recreated (another
// incarnation).
func (h Handle) HeldFor() time.Duration {
	s := h.s
	if s == nil || h.o == nil {
		return 0
	}
	// The promise counts from before the drain check: a drain that starts
	// after the check counts this handle and waits ReleaseWait from a
	// later instant, so a promise of at most ReleaseWait from now ends
	// first. Read after the check, now could fall after the drain began
	// (the caller's goroutine paused between the two), and the promise
	// outlast the wait by that pause.
	now := s.since()
	if h.o.giving.Load() || !h.IsAssignedContinuously() {
		return 0
	}
	d := min(time.Duration(h.o.deadline.Load()-now), s.cfg.ReleaseWait)
	if d <= 0 {
		return 0
	}
	s.strong.promise(now + int64(d))
	return d
}

// Release gives the handle up.
func (h Handle) Release() {
	if h.o == nil {
		return
	}
	h.o.handles[h.i].Add(-1)
	if h.o.draining.Load() {
		select {
		case h.o.wake <- struct{}{}:
		default:
		}
	}
}

// OwnsString is Owns for a string key.
func (s *Slicelet) OwnsString(key string) bool { return s.owns(assign.HashString(key)) }

// Owns reports whether this task may serve key now: in strong mode,
// whether a valid guard or bridge lease covers it; in affinity mode,
// IsAffinitizedKey. It does not allocate.
func (s *Slicelet) Owns(key []byte) bool {
	return s.owns(assign.HashKey(key))
}

func (s *Slicelet) owns(k assign.SliceKey) bool {
	if !s.strongMode() {
		v := s.view.Load()
		return v != nil && v.mine[v.table.Lookup(k)]
	}
	v := s.strong.view.Load()
	for _, o := range [2]*ownership{v.guard, v.bridge} {
		if o.find(k) >= 0 && s.valid(o) {
			return true
		}
	}
	return false
}

// Consistency is the mode the Slicelet runs in (Config.Consistency):
// assign.Strong or assign.Affinity.
func (s *Slicelet) Consistency() assign.Consistency {
	if s.strongMode() {
		return assign.Strong
	}
	return assign.Affinity
}
