package slicelet

import (
	"strconv"
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
	drained := make(chan struct{})
	go func() {
		s.drainHandles(g1, lost)
		close(drained)
	}()
	select {
	case <-drained:
		t.Fatal("the guard was given up while a handle on a leaving key was outstanding")
	case <-time.After(20 * time.Millisecond): // the drain must still be waiting; no timing claim
	}
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
