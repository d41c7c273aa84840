package slicelet

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
)

func newStrongOffline(t testing.TB, task string) *Slicelet {
	t.Helper()
	s, err := New(Config{Job: "j", Task: task, Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"},
		Consistency: assign.Strong, ReleaseWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// twoHalves gives [0, mid) to a and [mid, end) to b.
func twoHalves(gen uint64, a, b string) *assign.Assignment {
	mid := assign.KeySpaceEnd / 2
	return &assign.Assignment{Job: "j", Generation: gen,
		Tasks:  []assign.Task{{Name: a, Addr: a + ":1"}, {Name: b, Addr: b + ":1"}},
		Slices: []assign.Slice{{Start: 0, End: mid, Tasks: []string{a}}, {Start: mid, End: assign.KeySpaceEnd, Tasks: []string{b}}}}
}

// keyIn finds a key whose slice key is in [lo, hi).
func keyIn(t testing.TB, lo, hi assign.SliceKey) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if h := assign.HashString(k); lo <= h && h < hi {
			return k
		}
		if i > 1e6 {
			t.Fatal("no key found")
		}
	}
}

// grant installs a lease as the lease loop would after a read sent now.
func grant(s *Slicelet, v lease.Value, owned []assign.Slice, ttl time.Duration) *ownership {
	o := newOwnership(v, owned)
	s.extend(o, s.since(), uint32(ttl.Milliseconds()))
	return o
}

// Without a lease nothing is owned; under the guard the guard's keys are,
// with its generation as their token, until the lease's deadline.
func TestHandleUnderGuard(t *testing.T) {
	s := newStrongOffline(t, "a")
	a1 := twoHalves(1, "a", "b")
	mid := assign.KeySpaceEnd / 2
	mine, theirs := keyIn(t, 0, mid), keyIn(t, mid, assign.KeySpaceEnd)
	s.install(nil, a1)
	if s.Owns([]byte(mine)) || s.HandleString(mine).Owned() {
		t.Fatal("a key is owned before any lease")
	}
	guard := grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour)
	s.setView(guard, nil, nil)
	h := s.HandleString(mine)
	if !h.Owned() || h.Token() != 1 || !h.IsAssignedContinuously() {
		t.Fatalf("handle under the guard: owned %v token %d continuous %v", h.Owned(), h.Token(), h.IsAssignedContinuously())
	}
	if s.HandleString(theirs).Owned() || s.OwnsString(theirs) {
		t.Fatal("another task's key is owned")
	}
	// The deadline passes (a pause past the lease): nothing is owned.
	guard.deadline.Store(s.since())
	if h.IsAssignedContinuously() || s.OwnsString(mine) || s.HandleString(mine).Owned() {
		t.Fatal("the key is still owned past the lease's deadline")
	}
	// A renewal sent after the deadline: owned again, but the pause broke
	// every earlier handle's continuity.
	s.extend(guard, s.since(), uint32(time.Hour.Milliseconds()))
	if !s.OwnsString(mine) {
		t.Fatal("not owned after the renewal")
	}
	if h.IsAssignedContinuously() {
		t.Fatal("a handle taken before the lapse is still continuous")
	}
	h.Release()
	h2 := s.HandleString(mine)
	if !h2.IsAssignedContinuously() {
		t.Fatal("a handle taken after the renewal is not continuous")
	}
	h2.Release()
	for b := range guard.handles {
		if n := guard.handles[b].Load(); n != 0 {
			t.Fatalf("%d handles outstanding in bucket %d after every release", n, b)
		}
	}
}

// Across guard 1 → bridge 1→2 → guard 2 the keys kept stay continuously
// owned; a key that moves away is lost when the bridge is taken, and the
// one that arrives is owned only under guard 2, with token 2.
func TestHandleAcrossBridge(t *testing.T) {
	s := newStrongOffline(t, "a")
	a1, a2 := twoHalves(1, "a", "b"), twoHalves(2, "b", "a") // the halves swap...
	q := assign.KeySpaceEnd / 4
	a2.Slices = []assign.Slice{{Start: 0, End: q, Tasks: []string{"a"}}, {Start: q, End: assign.KeySpaceEnd, Tasks: []string{"b"}}}
	kept, leaving := keyIn(t, 0, q), keyIn(t, q, assign.KeySpaceEnd/2)
	s.install(nil, a1)
	g1 := grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour)
	s.setView(g1, nil, nil)
	hKept, hLeaving := s.HandleString(kept), s.HandleString(leaving)

	bridge := grant(s, lease.Value{From: 1, To: 2}, intersect(ownedRanges(a1, "a"), ownedRanges(a2, "a")), time.Hour)
	lost := subtract(g1.owned, bridge.owned)
	drained := background(func() { s.drainHandles(g1, lost) })
	stillWaiting(t, drained, "the guard was given up while a handle on a leaving key was outstanding")
	hLeaving.Release()
	<-drained
	s.setView(nil, bridge, lost)
	if !hKept.IsAssignedContinuously() || hLeaving.IsAssignedContinuously() || s.OwnsString(leaving) {
		t.Fatalf("under the bridge: kept continuous %v, leaving continuous %v, leaving owned %v",
			hKept.IsAssignedContinuously(), hLeaving.IsAssignedContinuously(), s.OwnsString(leaving))
	}
	if h := s.HandleString(kept); h.Token() != 1 {
		t.Errorf("a kept key's token under the bridge is %d, want 1 (its owner has not changed)", h.Token())
	}
	g2 := grant(s, lease.GuardValue(2), ownedRanges(a2, "a"), time.Hour)
	s.setView(g2, nil, subtract(bridge.owned, g2.owned))
	if !hKept.IsAssignedContinuously() {
		t.Fatal("a kept key lost continuity when the new guard came")
	}
	if h := s.HandleString(kept); h.Token() != 2 {
		t.Errorf("token under guard 2 is %d, want 2", h.Token())
	}
	hKept.Release()
}

// Taking, checking and releasing a handle does not allocate, in either
// mode.
func TestHandleAllocs(t *testing.T) {
	s := newStrongOffline(t, "a")
	a1 := twoHalves(1, "a", "b")
	s.install(nil, a1)
	s.setView(grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour), nil, nil)
	key := []byte(keyIn(t, 0, assign.KeySpaceEnd/2))
	if n := testing.AllocsPerRun(100, func() {
		h := s.Handle(key)
		_ = h.IsAssignedContinuously()
		h.Release()
	}); n != 0 {
		t.Errorf("a strong handle allocates %v times", n)
	}
	aff := newOffline(t, "a")
	aff.install(nil, a1)
	if n := testing.AllocsPerRun(100, func() {
		h := aff.Handle(key)
		_ = h.IsAssignedContinuously()
		h.Release()
		_ = aff.IsAffinitizedKey(key)
	}); n != 0 {
		t.Errorf("an affinity handle or lookup allocates %v times", n)
	}
}

func benchStrong(b *testing.B) (*Slicelet, [][]byte) {
	a, names, keys := benchAssignment()
	s := newStrongOffline(b, names[0])
	s.install(nil, a)
	s.setView(grant(s, lease.GuardValue(1), ownedRanges(a, names[0]), time.Hour), nil, nil)
	return s, keys
}

// BenchmarkHandle: take a handle on a key, check its continuity and
// release it, in strong mode, with 100 tasks × 100 slices.
func BenchmarkHandle(b *testing.B) {
	s, keys := benchStrong(b)
	benchLookups(b, keys, func(key []byte) bool {
		h := s.Handle(key)
		ok := h.IsAssignedContinuously()
		h.Release()
		return ok
	})
}

// BenchmarkOwns: strong mode's ownership lookup.
func BenchmarkOwns(b *testing.B) {
	s, keys := benchStrong(b)
	benchLookups(b, keys, s.Owns)
}

// HeldFor promises continuity only where a drain must still wait for the
// handle. A drain of the guard's leaving keys runs giving, the handle
// count, and the loss; a handle taken at each point between them gets a
// promise (before the drain begins), or none (once it has begun: the
// count may already have passed it), and a promise made is kept: the
// drain waits for the handle until its ReleaseWait, and the promise is
// never longer than that or than the lease.
func TestHeldForAtEveryStepOfADrain(t *testing.T) {
	a1 := twoHalves(1, "a", "b")
	q := assign.KeySpaceEnd / 4
	a2 := twoHalves(2, "a", "b")
	a2.Slices[0].End, a2.Slices[1].Start = q, q // a keeps [0, q), loses [q, mid)
	leaving, kept := keyIn(t, q, assign.KeySpaceEnd/2), keyIn(t, 0, q)
	setup := func(t *testing.T) (*Slicelet, *ownership, *ownership, []assign.Slice) {
		s := newStrongOffline(t, "a")
		s.install(nil, a1)
		g1 := grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour)
		s.setView(g1, nil, nil)
		bridge := grant(s, lease.Value{From: 1, To: 2}, intersect(ownedRanges(a1, "a"), ownedRanges(a2, "a")), time.Hour)
		s.setView(g1, bridge, nil)
		return s, g1, bridge, subtract(g1.owned, bridge.owned)
	}

	t.Run("before the drain", func(t *testing.T) {
		s, g1, _, lost := setup(t)
		h := s.HandleString(leaving)
		d := h.HeldFor()
		if d <= 0 || d > s.cfg.ReleaseWait || d > h.ValidFor() {
			t.Fatalf("HeldFor %v before any drain; want (0, min(ReleaseWait %v, ValidFor %v)]", d, s.cfg.ReleaseWait, h.ValidFor())
		}
		drained := background(func() { s.drainHandles(g1, lost) })
		stillWaiting(t, drained, "the drain gave the key up while a handle holding a promise was outstanding")
		if !h.IsAssignedContinuously() {
			t.Fatal("the key left within the promise")
		}
		h.Release()
		<-drained
	})
	t.Run("once the drain began", func(t *testing.T) {
		s, g1, _, _ := setup(t)
		g1.giving.Store(true) // drainHandles' first step; its count may already have run
		if h := s.HandleString(leaving); !h.Owned() || h.HeldFor() != 0 {
			t.Fatalf("a handle taken during the drain: owned %v, HeldFor %v; want owned with no promise", h.Owned(), h.HeldFor())
		}
		// A kept key under the draining guard gets no promise either
		// (conservative); under the bridge alone it would.
		if h := s.HandleString(kept); h.HeldFor() != 0 {
			t.Fatalf("a kept key's handle under the draining guard: HeldFor %v", h.HeldFor())
		}
	})
	t.Run("after the drain counted none", func(t *testing.T) {
		s, g1, _, lost := setup(t)
		s.drainHandles(g1, lost) // no handle: returns at once, giving stays set
		h := s.HandleString(leaving)
		if d := h.HeldFor(); d != 0 {
			t.Fatalf("HeldFor %v between the drain and the loss", d)
		}
		s.setView(nil, s.strong.view.Load().bridge, lost)
		if h.IsAssignedContinuously() {
			t.Fatal("a handle taken before the loss is continuous after it")
		}
	})
	t.Run("after the loss", func(t *testing.T) {
		s, g1, bridge, lost := setup(t)
		s.drainHandles(g1, lost)
		s.setView(nil, bridge, lost)
		if h := s.HandleString(leaving); h.Owned() || h.HeldFor() != 0 {
			t.Fatalf("a key lost: owned %v, HeldFor %v", h.Owned(), h.HeldFor())
		}
		if h := s.HandleString(kept); h.HeldFor() <= 0 {
			t.Fatal("a kept key under the bridge has no promise")
		}
	})
	t.Run("a lapsed lease", func(t *testing.T) {
		s, g1, bridge, _ := setup(t)
		h := s.HandleString(leaving)
		g1.deadline.Store(s.since())
		bridge.deadline.Store(s.since())
		if d := h.HeldFor(); d != 0 {
			t.Fatalf("HeldFor %v past the lease's deadline", d)
		}
	})
	t.Run("the lease ends first", func(t *testing.T) {
		s, g1, _, _ := setup(t)
		g1.deadline.Store(s.since() + int64(50*time.Millisecond))
		h := s.HandleString(leaving)
		if d := h.HeldFor(); d <= 0 || d > 50*time.Millisecond {
			t.Fatalf("HeldFor %v with 50ms of lease left", d)
		}
	})
}

// A Slicelet that stops gives its leases up only once the handles it
// promised are released or their promises have passed.
func TestStopKeepsPromises(t *testing.T) {
	s := newStrongOffline(t, "a")
	a1 := twoHalves(1, "a", "b")
	s.install(nil, a1)
	g1 := grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour)
	s.setView(g1, nil, nil)
	mine := keyIn(t, 0, assign.KeySpaceEnd/2)

	// No promise outstanding: at once.
	s.keepPromises()

	// A stopped Slicelet promises nothing more: the rest on a new one.
	s = newStrongOffline(t, "a")
	s.install(nil, a1)
	s.setView(grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour), nil, nil)
	if h := s.HandleString(mine); h.HeldFor() <= 0 {
		t.Fatal("no promise before the stop")
	} else {
		h.Release()
	}
	h := s.HandleString(mine)
	if h.HeldFor() <= 0 {
		t.Fatal("no promise")
	}
	stopped := background(func() { s.keepPromises() })
	stillWaiting(t, stopped, "the stop did not wait for a promised handle")
	h.Release()
	<-stopped

	// A promise that has passed holds the stop no longer.
	s = newStrongOffline(t, "a")
	s.cfg.ReleaseWait = 30 * time.Millisecond
	s.install(nil, a1)
	s.setView(grant(s, lease.GuardValue(1), ownedRanges(a1, "a"), time.Hour), nil, nil)
	h = s.HandleString(mine)
	if d := h.HeldFor(); d <= 0 || d > 30*time.Millisecond {
		t.Fatalf("HeldFor %v with a 30ms ReleaseWait", d)
	}
	s.keepPromises() // returns once the promise has passed
	if left := s.strong.promised.Load() - s.since(); left > 0 {
		t.Fatalf("the stop returned %v before the promise passed", time.Duration(left))
	}
	h.Release()
}

// Handles taken, promised and checked from several goroutines while the
// keys move back and forth under guard → bridge → drain → loss → guard
// cycles with a short ReleaseWait: a handle checked before its promise
// has passed is always continuous.
func TestHeldForUnderMoves(t *testing.T) {
	s := newStrongOffline(t, "a")
	s.cfg.ReleaseWait = 2 * time.Millisecond
	q := assign.KeySpaceEnd / 4
	wide, narrow := twoHalves(1, "a", "b"), twoHalves(2, "a", "b")
	narrow.Slices[0].End, narrow.Slices[1].Start = q, q
	s.install(nil, wide)
	gen := uint64(1)
	g := grant(s, lease.GuardValue(gen), ownedRanges(wide, "a"), time.Hour)
	s.setView(g, nil, nil)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = keyIn(t, q+assign.SliceKey(i)*(q/64), q+assign.SliceKey(i+1)*(q/64)) // all in the moving quarter
	}

	stop := make(chan struct{})
	var checked, promised, broken atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h := s.HandleString(keys[i%len(keys)])
				t0 := s.since()
				d := h.HeldFor()
				if d > 0 {
					promised.Add(1)
					for range i % 7 * 200 { // some work
						_ = s.since()
					}
					// Ask first, then read the clock: the answer was
					// given within the promise if the clock still is.
					continuous := h.IsAssignedContinuously()
					if s.since() < t0+int64(d) {
						checked.Add(1)
						if !continuous {
							broken.Add(1)
						}
					}
				}
				h.Release()
			}
		}()
	}
	// The moving quarter leaves and comes back, 200 times.
	for range 100 {
		for _, next := range []*assign.Assignment{narrow, wide} {
			cur := wide
			if next == wide {
				cur = narrow
			}
			from := gen
			gen++
			a := *next
			a.Generation = gen
			s.strong.remember(&a)
			bridge := grant(s, lease.Value{From: from, To: gen}, intersect(ownedRanges(cur, "a"), ownedRanges(&a, "a")), time.Hour)
			s.setView(g, bridge, nil)
			lost := subtract(g.owned, bridge.owned)
			s.drainHandles(g, lost)
			s.setView(nil, bridge, lost)
			g = grant(s, lease.GuardValue(gen), ownedRanges(&a, "a"), time.Hour)
			s.drainHandles(bridge, subtract(bridge.owned, g.owned))
			s.setView(g, nil, subtract(bridge.owned, g.owned))
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d handles promised, %d checked within their promise, %d of them not continuous", promised.Load(), checked.Load(), broken.Load())
	if broken.Load() != 0 {
		t.Fatalf("%d handles lost their key within HeldFor", broken.Load())
	}
	if checked.Load() == 0 {
		t.Fatal("no handle was checked within its promise: the test proves nothing")
	}
}

// background runs f in a goroutine and returns a channel closed when it
// returns.
func background(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// stillWaiting fails the test with msg if done is closed within a short
// while: what runs in the background must still be waiting. A slow
// machine only makes the check weaker, never fail wrongly.
func stillWaiting(t *testing.T, done <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal(msg)
	case <-time.After(20 * time.Millisecond):
	}
}
