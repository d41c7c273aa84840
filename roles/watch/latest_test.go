package watch

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles/auth"
)

// Large assignments keep fewer bases: their slices, in all, stay within
// deltaBaseSlices, and the previous generation is always kept. A base
// dropped is no longer held at all.
func TestLatestBoundsItsBases(t *testing.T) {
	l := New()
	slicesPer := deltaBaseSlices / 3
	var prev *assign.Assignment
	var freed atomic.Int64 // generations the collector freed
	for g := uint64(1); g <= deltaBases; g++ {
		a := &assign.Assignment{Job: "kv", Generation: g, Incarnation: "i", Tasks: []assign.Task{{Name: "a", Addr: "a:1"}}}
		w := assign.KeySpaceEnd / assign.SliceKey(slicesPer)
		for i := range slicesPer {
			end := assign.SliceKey(i+1) * w
			if i == slicesPer-1 {
				end = assign.KeySpaceEnd
			}
			a.Slices = append(a.Slices, assign.Slice{Start: assign.SliceKey(i) * w, End: end, Tasks: []string{"a"}})
		}
		runtime.AddCleanup(a, func(struct{}) { freed.Add(1) }, struct{}{})
		l.Publish(a, time.Time{})
		prev = a
	}
	s := l.get()
	if len(s.bases) != 3 || s.bases[len(s.bases)-1].Generation != prev.Generation-1 {
		t.Fatalf("kept %d bases, the newest generation %d; want the 3 latest", len(s.bases), s.bases[len(s.bases)-1].Generation)
	}
	prev, s = nil, nil
	want := int64(deltaBases - 4) // all but the current one and 3 bases
	testwait.For(t, "the dropped bases to be freed", func() bool {
		runtime.GC()
		return freed.Load() >= want
	})
	if n := freed.Load(); n != want {
		t.Fatalf("%d generations freed, want %d", n, want)
	}
	runtime.KeepAlive(l)
}

// A latest sends a delta only from a generation it keeps, and only when
// the delta is smaller than the full assignment.
func TestLatestDeltaChoice(t *testing.T) {
	l := New()
	tasks := []assign.Task{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}}
	mk := func(gen uint64, owners ...string) *assign.Assignment {
		a := &assign.Assignment{Job: "kv", Generation: gen, Incarnation: "i", Tasks: tasks}
		w := assign.KeySpaceEnd / assign.SliceKey(len(owners))
		for i, o := range owners {
			end := assign.SliceKey(i+1) * w
			if i == len(owners)-1 {
				end = assign.KeySpaceEnd
			}
			a.Slices = append(a.Slices, assign.Slice{Start: assign.SliceKey(i) * w, End: end, Tasks: []string{o}})
		}
		return a
	}
	owners := make([]string, 100)
	for i := range owners {
		owners[i] = []string{"a", "b"}[i%2]
	}
	var gens []*assign.Assignment
	for g := uint64(1); g <= deltaBases+3; g++ {
		owners[g] = []string{"a", "b"}[(g+1)%2] // one slice moves per generation
		gens = append(gens, mk(g, owners...))
		l.Publish(gens[len(gens)-1], time.Time{})
	}
	s := l.get()
	last := gens[len(gens)-1]
	for _, base := range gens[:len(gens)-1] {
		d := s.delta(base.Version())
		kept := last.Generation-base.Generation <= deltaBases
		if (d != nil) != kept {
			t.Errorf("from generation %d of %d: delta %v; want one only from the %d latest", base.Generation, last.Generation, d != nil, deltaBases)
			continue
		}
		if d == nil {
			continue
		}
		got, err := api.ApplyDelta(base, d.Delta())
		if err != nil || !reflect.DeepEqual(got, last) {
			t.Errorf("from generation %d: %v", base.Generation, err)
		}
		if s.delta(base.Version()) != d {
			t.Errorf("from generation %d: the delta was made again", base.Generation)
		}
	}
	if d := s.delta(assign.Version{Incarnation: "other", Generation: last.Generation - 1}); d != nil {
		t.Error("a delta for another incarnation")
	}
	if d := s.delta(assign.Version{}); d != nil {
		t.Error("a delta for a subscriber that holds nothing")
	}
	// Every slice and task changes: the delta is the assignment and more.
	flipped := make([]string, len(owners))
	for i, o := range owners {
		flipped[i] = map[string]string{"a": "b", "b": "a"}[o]
	}
	all := mk(last.Generation+1, flipped...)
	all.Tasks = []assign.Task{{Name: "a", Addr: "a:2"}, {Name: "b", Addr: "b:2"}}
	l.Publish(all, time.Time{})
	if d := l.get().delta(last.Version()); d != nil {
		t.Error("a delta no smaller than the assignment")
	}
}

// A latest rewound to an earlier generation (its store went back) serves
// that one, and keeps no delta base from before: the generations it held
// may differ from the store's of the same numbers.
func TestLatestRewind(t *testing.T) {
	l := New()
	tasks := []assign.Task{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}}
	mk := func(gen uint64, owner string) *assign.Assignment {
		return &assign.Assignment{Job: "kv", Generation: gen, Incarnation: "i", Tasks: tasks,
			Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{owner}}}}
	}
	for g := uint64(1); g <= 3; g++ {
		l.Publish(mk(g, "a"), time.Time{})
	}
	stored := mk(1, "b")
	l.Rewind(stored)
	if l.Current() != stored || l.Previous() != nil {
		t.Fatalf("after the rewind: current %v, previous %v; want the store's generation 1 and nothing before", l.Current(), l.Previous())
	}
	next := mk(4, "a")
	if !l.Publish(next, time.Time{}) {
		t.Fatal("the generation after the rewind was not published")
	}
	s := l.get()
	if d := s.delta(assign.Version{Incarnation: "i", Generation: 3}); d != nil {
		t.Error("a delta from a generation held before the rewind")
	}
	d := s.delta(stored.Version())
	if d == nil {
		t.Fatal("no delta from the rewound generation")
	}
	if got, err := api.ApplyDelta(stored, d.Delta()); err != nil || !reflect.DeepEqual(got, next) {
		t.Errorf("from the rewound generation: %v", err)
	}
}

// pacedStreams runs n streams of l, each calling send for every new
// generation, until the test ends.
func pacedStreams(t *testing.T, l *Latest, n int, send func(*Message) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		l.pacers.Wait()
		l.senders.Wait()
	})
	for i := range n {
		known := l.Current().Version()
		wg.Go(func() { _ = l.Stream(ctx, nil, Subscription{Known: known, Group: strconv.Itoa(i % 10)}, send) })
	}
	testwait.For(t, "every stream to subscribe", func() bool { return l.Subscribers() == n })
}

func pacedAssignment(gen uint64) *assign.Assignment {
	return &assign.Assignment{Job: "kv", Generation: gen, Incarnation: "i", Tasks: []assign.Task{{Name: "a", Addr: "a:1"}},
		Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{"a"}}}}
}

// A change to many streams is sent by at most roundWorkers senders at a
// time while their sends finish, and still reaches every one.
func TestPacedWakeUpBoundsSendsInFlight(t *testing.T) {
	const n = 8 * roundWorkers
	l := New()
	l.Publish(pacedAssignment(1), time.Time{})
	var inSend, most, sent atomic.Int64
	pacedStreams(t, l, n, func(*Message) error {
		now := inSend.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		time.Sleep(100 * time.Microsecond) // a send that takes a while, so that sends overlap
		inSend.Add(-1)
		sent.Add(1)
		return nil
	})
	l.Publish(pacedAssignment(2), time.Time{})
	testwait.For(t, "every stream to send generation 2", func() bool { return sent.Load() == n })
	if m := most.Load(); m > roundWorkers {
		t.Errorf("%d sends at once; a round has %d workers", m, roundWorkers)
	}
}

// Streams whose sends never finish (stalled subscribers) do not keep the
// others from their update: the round replaces a stuck worker after
// paceStall.
func TestPacedWakeUpGoesPastStalledSends(t *testing.T) {
	const n = 12 * roundWorkers
	l := New()
	l.Publish(pacedAssignment(1), time.Time{})
	release := make(chan struct{})
	var sent atomic.Int64
	pacedStreams(t, l, n, func(*Message) error {
		sent.Add(1)
		<-release // stuck until the test ends
		return nil
	})
	t.Cleanup(func() { close(release) }) // runs before pacedStreams' cleanup
	l.Publish(pacedAssignment(2), time.Time{})
	testwait.For(t, "every stream to start sending generation 2", func() bool { return sent.Load() == n })
}

// end stops a round under way and waits for its supervisor, and every
// stream, woken at once, ends with the error once its send in progress
// returns.
func TestEndStopsPacing(t *testing.T) {
	const n = 12 * roundWorkers
	l := New()
	l.Publish(pacedAssignment(1), time.Time{})
	release := make(chan struct{})
	var sent atomic.Int64
	pacedStreams(t, l, n, func(*Message) error {
		sent.Add(1)
		<-release
		return nil
	})
	l.Publish(pacedAssignment(2), time.Time{})
	testwait.For(t, "the first streams to start sending generation 2", func() bool { return sent.Load() >= roundWorkers })
	done := make(chan struct{})
	go func() {
		l.End(errors.New("job deleted"))
		close(done)
	}()
	select {
	case <-done: // end returned with the pacer stopped, while senders are still stuck
	case <-time.After(30 * time.Second):
		t.Fatal("end did not return while a pacing round was under way")
	}
	if n := l.running.Load(); n != 0 {
		t.Errorf("%d pacing goroutines still running after end", n)
	}
	close(release)
	testwait.For(t, "every stream to end", func() bool {
		l.subMu.Lock()
		defer l.subMu.Unlock()
		return len(l.subs) == 0
	})
}

// TestPublishStampsEveryMessageOnce: the commit time is in the message
// shared by every stream and in the deltas made from it, and each is still
// encoded once whatever the number of streams.
func TestPublishStampsEveryMessageOnce(t *testing.T) {
	l := New()
	// Sixteen slices, of which generation 2 moves one: its delta is
	// smaller than the full assignment.
	tasks := []assign.Task{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}}
	a1 := &assign.Assignment{Job: "kv", Generation: 1, Incarnation: "i", Tasks: tasks}
	width := assign.KeySpaceEnd / 16
	for i := range assign.SliceKey(16) {
		end := (i + 1) * width
		if i == 15 {
			end = assign.KeySpaceEnd
		}
		a1.Slices = append(a1.Slices, assign.Slice{Start: i * width, End: end, Tasks: []string{"a"}})
	}
	a2 := &assign.Assignment{Job: "kv", Generation: 2, Incarnation: "i", Tasks: tasks, Slices: slices.Clone(a1.Slices)}
	a2.Slices[3].Tasks = []string{"b"}
	t1, t2 := time.Unix(100, 1), time.Unix(200, 2)
	l.Publish(a1, t1)
	if s := l.get(); s.msg.CommittedUnixNano() != t1.UnixNano() || s.msg.update {
		t.Fatalf("first publish: commit time %d, update %v; want %d, false", s.msg.CommittedUnixNano(), s.msg.update, t1.UnixNano())
	}
	l.Publish(a2, t2)
	s := l.get()
	if s.msg.CommittedUnixNano() != t2.UnixNano() || !s.msg.update || !s.msg.committedAt.Equal(t2) {
		t.Fatalf("second publish: commit time %d (%v), update %v; want %d, true", s.msg.CommittedUnixNano(), s.msg.committedAt, s.msg.update, t2.UnixNano())
	}
	d := s.delta(a1.Version())
	if d == nil {
		t.Fatal("no delta from generation 1")
	}
	if d.CommittedUnixNano() != t2.UnixNano() || !d.committedAt.Equal(t2) || !d.update {
		t.Errorf("delta: commit time %d, update %v; want %d, true", d.CommittedUnixNano(), d.update, t2.UnixNano())
	}
	for range 3 {
		if _, err := s.msg.encoded(); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.encodes.Load(); n != 1 {
		t.Errorf("%d encodings of generation 2's full message for several sends, want 1", n)
	}
	// An old Assigner's message, without the field, publishes with no
	// commit time.
	l.Publish(pacedAssignment(3), time.Time{})
	if s := l.get(); s.msg.CommittedUnixNano() != 0 || !s.msg.committedAt.IsZero() {
		t.Errorf("unknown commit time published as %d (%v), want 0", s.msg.CommittedUnixNano(), s.msg.committedAt)
	}
}

// A round takes the relays' streams before any other, whichever groups
// they are in and whenever they subscribed.
func TestRoundTakesRelaysFirst(t *testing.T) {
	l := New()
	unsubscribe := map[int]func(){}
	relay := func(i int) bool { return i%100 == 50 }
	for i := range 300 {
		sub, unsub := l.subscribe(Subscription{Group: strconv.Itoa(i % 7), Relay: relay(i)}, nil)
		sub.mu.Unlock()
		unsubscribe[i] = unsub
	}
	check := func(relays int) {
		t.Helper()
		order := l.roundOrder()
		if len(order) != l.Subscribers() || l.Relays() != relays {
			t.Fatalf("a round of %d streams, %d relays; %d subscribed, %d relays", len(order), relays, l.Subscribers(), l.Relays())
		}
		seen := map[*subscriber]bool{}
		for i, sub := range order {
			if seen[sub] {
				t.Fatalf("stream %d of the round taken twice", i)
			}
			seen[sub] = true
			if sub.relay != (i < relays) {
				t.Fatalf("stream %d of the round: relay %v; want the %d relays first", i, sub.relay, relays)
			}
		}
	}
	check(3)
	unsubscribe[150]()
	unsubscribe[151]()
	check(2)
	for i, unsub := range unsubscribe {
		if i != 150 && i != 151 {
			unsub()
		}
	}
	check(0)
}

// A watch call is a relay's only when it says so and its caller may say
// so (auth.MayRelay).
func TestSubscriptionTrustsOnlyRelaysItMay(t *testing.T) {
	dist := identity.Principal{IDs: []identity.ID{{Role: identity.Distributor, Node: "d1"}}}
	task := identity.Principal{IDs: []identity.ID{{Role: identity.Task, Job: "kv", Task: "t0"}}}
	for _, tc := range []struct {
		name   string
		caller auth.Caller
		asks   bool
		want   bool
	}{
		{"a Distributor that asks", auth.Caller{Enforce: true, Principal: dist, Direct: dist}, true, true},
		{"a Distributor that does not", auth.Caller{Enforce: true, Principal: dist, Direct: dist}, false, false},
		{"a task that asks", auth.Caller{Enforce: true, Principal: task, Direct: task}, true, false},
		{"anyone, unauthenticated", auth.Caller{}, true, true},
	} {
		req := connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: 4, KnownIncarnation: "i", DeltaVersion: api.DeltaVersion, Relay: tc.asks})
		s := subscription(auth.WithCaller(context.Background(), tc.caller), req)
		want := Subscription{Known: assign.Version{Incarnation: "i", Generation: 4}, Deltas: true, Relay: tc.want}
		if s != want {
			t.Errorf("%s: %+v, want %+v", tc.name, s, want)
		}
	}
}
