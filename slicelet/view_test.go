package slicelet

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/slicerd/slicerd/assign"
)

type recorder struct {
	mu    sync.Mutex
	calls [][2][]assign.Slice
}

func (r *recorder) OnChangedSlices(assigned, unassigned []assign.Slice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, [2][]assign.Slice{assigned, unassigned})
}

func (r *recorder) take() [][2][]assign.Slice {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func newOffline(t testing.TB, task string) *Slicelet {
	t.Helper()
	s, err := New(Config{Job: "j", Task: task, Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInstallUpdatesLookupsAndListeners(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	names := []string{"a", "b", "c"}
	s := newOffline(t, "a")
	if s.IsAffinitizedKeyString("k") || s.Assignment() != nil || s.Generation() != 0 {
		t.Fatal("a Slicelet without an assignment owns nothing")
	}
	var early, late recorder
	s.AddListener(&early)

	var prevOwned []assign.Slice
	for gen := uint64(1); gen <= 20; gen++ {
		a := gridAssignment(rng, gen, 30, names)
		s.install(nil, a)
		if gen == 1 {
			select {
			case <-s.Ready():
			default:
				t.Fatal("not ready after the first assignment")
			}
		}
		if s.Assignment() != a || s.Generation() != gen {
			t.Fatalf("Assignment() is not generation %d", gen)
		}
		for i := range 300 {
			key := "key-" + strconv.Itoa(i)
			if got, want := s.IsAffinitizedKeyString(key), owns(a, "a", assign.HashString(key)); got != want {
				t.Fatalf("gen %d: IsAffinitizedKeyString(%q) = %v, want %v", gen, key, got, want)
			}
			if s.IsAffinitizedKey([]byte(key)) != s.IsAffinitizedKeyString(key) {
				t.Fatalf("byte and string lookups disagree on %q", key)
			}
		}
		owned := ownedRanges(a, "a")
		wantA, wantU := diffRanges(prevOwned, owned)
		calls := early.take()
		switch {
		case len(wantA) == 0 && len(wantU) == 0:
			if len(calls) != 0 {
				t.Fatalf("gen %d: listener called without a change: %v", gen, calls)
			}
		case len(calls) != 1 || !rangesEqual(calls[0][0], wantA) || !rangesEqual(calls[0][1], wantU):
			t.Fatalf("gen %d: listener calls %v, want one with %v, %v", gen, calls, wantA, wantU)
		}
		prevOwned = owned
		if gen == 10 {
			// A late listener first gets everything currently owned.
			s.AddListener(&late)
			if calls := late.take(); len(calls) != 1 || !rangesEqual(calls[0][0], owned) || calls[0][1] != nil {
				t.Fatalf("late listener got %v, want the current ranges %v", calls, owned)
			}
		}
	}
	if len(late.take()) == 0 {
		t.Fatal("late listener saw no later change")
	}
}

func TestNewValidates(t *testing.T) {
	good := Config{Job: "j", Task: "t-0", Addr: "10.0.0.1:80", Join: []string{"127.0.0.1:7946"}}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"bad job":  func(c *Config) { c.Job = "J J" },
		"bad task": func(c *Config) { c.Task = "" },
		"no addr":  func(c *Config) { c.Addr = "" },
		"bad addr": func(c *Config) { c.Addr = "nohostport" },
		"no join":  func(c *Config) { c.Join = nil },
	} {
		c := good
		c.Join = slices.Clone(good.Join)
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
}

func TestIsAffinitizedKeyDoesNotAllocate(t *testing.T) {
	s := newOffline(t, "a")
	s.install(nil, gridAssignment(rand.New(rand.NewPCG(1, 1)), 1, 100, []string{"a", "b"}))
	key := []byte("user:1")
	var n int
	if allocs := testing.AllocsPerRun(1000, func() {
		if s.IsAffinitizedKey(key) {
			n++
		}
		if s.IsAffinitizedKeyString("user:2") {
			n++
		}
	}); allocs != 0 {
		t.Fatalf("IsAffinitizedKey allocates %v times per call", allocs)
	}
}

// benchAssignment is an assignment of 10,000 equal slices over 100 tasks,
// each slice to a random one, and 1,024 keys to look up.
func benchAssignment() (a *assign.Assignment, names []string, keys [][]byte) {
	names = make([]string, 100)
	for i := range names {
		names[i] = "task-" + strconv.Itoa(100+i)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	a = &assign.Assignment{Job: "j", Generation: 1}
	for _, n := range names {
		a.Tasks = append(a.Tasks, assign.Task{Name: n, Addr: n + ":1"})
	}
	const n = 10000
	unit := assign.KeySpaceEnd / n
	for i := range n {
		s := assign.Slice{Start: assign.SliceKey(i) * unit, End: assign.SliceKey(i+1) * unit, Tasks: []string{names[rng.IntN(len(names))]}}
		if i == n-1 {
			s.End = assign.KeySpaceEnd
		}
		a.Slices = append(a.Slices, s)
	}
	keys = make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("user:" + strconv.Itoa(i*7919))
	}
	return a, names, keys
}

// benchLookups runs owns over the keys in turn.
func benchLookups(b *testing.B, keys [][]byte, owns func([]byte) bool) {
	b.ReportAllocs()
	hits, i := 0, 0
	for b.Loop() {
		if owns(keys[i&1023]) {
			hits++
		}
		i++
	}
	_ = hits
}

// BenchmarkIsAffinitizedKey checks ownership in an assignment of 10,000
// slices over 100 tasks.
func BenchmarkIsAffinitizedKey(b *testing.B) {
	a, names, keys := benchAssignment()
	s := newOffline(b, names[0])
	s.install(nil, a)
	benchLookups(b, keys, s.IsAffinitizedKey)
}

// BenchmarkIsAffinitizedKeyMetrics is BenchmarkIsAffinitizedKey with
// metrics on, which counts every lookup.
func BenchmarkIsAffinitizedKeyMetrics(b *testing.B) {
	a, names, keys := benchAssignment()
	s := newOffline(b, names[0])
	s.metrics = newSliceletMetrics(s)
	s.install(nil, a)
	benchLookups(b, keys, s.IsAffinitizedKey)
}
