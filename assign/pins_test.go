package assign

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// servedBy reports whether every key of [start, end) is served by task in a.
func servedBy(a *Assignment, start, end SliceKey, task string) bool {
	for i := a.Find(start); i < len(a.Slices) && a.Slices[i].Start < end; i++ {
		if !slices.Contains(a.Slices[i].Tasks, task) {
			return false
		}
	}
	return true
}

// TestPinsHoldUnderLoadAndMembership: a pinned hot key stays on its task
// through load-driven decisions that would move it (its task is the
// hottest), a pinned range spans slices, and membership decisions keep
// both; a pin to a task that is not live has no effect; the moves name the
// operator's reason.
func TestPinsHoldUnderLoadAndMembership(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 31))
	tasks := testTasks(5)
	prev := scattered(rng, tasks, 20, 1)
	hot := HashString("the-hot-key")
	load := powerLoad(rng, 400, 1.5)
	load = MergeLoads(load, Load{{Start: hot, End: hot + 1, Load: 5 * load.Total()}})
	wide := Pin{Start: KeySpaceEnd / 8, End: KeySpaceEnd / 4, Task: tasks[1].Name}
	// The hot key's pin is to a task that does not serve it yet.
	for servedBy(prev, hot, hot+1, tasks[3].Name) {
		tasks[3], tasks[4] = tasks[4], tasks[3]
	}
	cfg := DefaultConfig()
	cfg.Pins = []Pin{{Start: hot, End: hot + 1, Task: tasks[3].Name, Reason: "debugging ticket 42"}, wide}
	if hot < wide.End {
		t.Fatal("test setup: the hot key must come after the wide pin")
	}
	cfg.Pins[0], cfg.Pins[1] = cfg.Pins[1], cfg.Pins[0]
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	a, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg)
	if !servedBy(a, hot, hot+1, tasks[3].Name) || !servedBy(a, wide.Start, wide.End, tasks[1].Name) {
		t.Fatalf("the first decision did not apply the pins")
	}
	if !slices.ContainsFunc(d.Moves, func(m Move) bool { return strings.Contains(m.Reason, "debugging ticket 42") }) {
		t.Errorf("no move names the pin's reason")
	}
	for i := range 5 {
		a, _ = mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
		if !servedBy(a, hot, hot+1, tasks[3].Name) || !servedBy(a, wide.Start, wide.End, tasks[1].Name) {
			t.Fatalf("load decision %d moved pinned keys", i+1)
		}
	}
	left := slices.Delete(slices.Clone(tasks), 0, 1)
	b, _ := mustDecide(t, membershipAlg{}, a, left, load, cfg)
	if !servedBy(b, hot, hot+1, tasks[3].Name) || !servedBy(b, wide.Start, wide.End, tasks[1].Name) {
		t.Errorf("a membership decision moved pinned keys")
	}
	// t3 leaves: its pin is inactive and the key goes elsewhere.
	noT3 := slices.DeleteFunc(slices.Clone(left), func(x Task) bool { return x.Name == tasks[3].Name })
	c, _ := mustDecide(t, membershipAlg{}, b, noT3, load, cfg)
	if servedBy(c, hot, hot+1, tasks[3].Name) {
		t.Errorf("a departed task still serves its pinned key")
	}
}

func TestPinsValidated(t *testing.T) {
	for _, tc := range []struct {
		pins []Pin
		want string
	}{
		{[]Pin{{Start: 5, End: 5, Task: "a"}}, "is empty"},
		{[]Pin{{Start: 0, End: KeySpaceEnd + 1, Task: "a"}}, "past the key space end"},
		{[]Pin{{Start: 0, End: 10, Task: "a"}, {Start: 5, End: 20, Task: "b"}}, "overlaps or precedes"},
		{[]Pin{{Start: 0, End: 10, Task: "a/b"}}, "pin 0"},
		{[]Pin{{Start: 0, End: 10, Task: "a", Reason: strings.Repeat("x", MaxPinReasonLen+1)}}, "reason"},
		{make([]Pin, MaxPins+1), "pins; at most"},
	} {
		cfg := DefaultConfig()
		cfg.Pins = tc.pins
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v...: Validate = %v, want %q", tc.pins[0], err, tc.want)
		}
	}
}

// TestEvenSplitHonoursPinsAndRedundancy: a decision that splits the key
// space afresh (the job's first, or one where no task of the previous
// assignment is live) applies the pins of tasks that are live, and meets
// the minimum redundancy with cordoned tasks when the open ones are too
// few, as any other decision does.
func TestEvenSplitHonoursPinsAndRedundancy(t *testing.T) {
	gone, err := Initial("j", namedTasks("x", "y"), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pinned := DefaultConfig()
	pinned.Pins = []Pin{{Start: KeySpaceEnd / 2, End: KeySpaceEnd/2 + 1000, Task: "a", Reason: "debugging"}}
	cordoned := Config{MinRedundancy: 2, MaxRedundancy: 2, Cordoned: []string{"b"}}
	for _, prev := range []*Assignment{nil, gone} {
		for _, alg := range []Algorithm{NewWeightedMove(), membershipAlg{}} {
			next, _ := mustDecide(t, alg, prev, namedTasks("a", "b", "c"), nil, pinned)
			if p := pinned.Pins[0]; !servedBy(next, p.Start, p.End, p.Task) {
				t.Errorf("%s, previous assignment %v: the pin to a is not applied: %v", alg.Name(), prev != nil, next.Slices)
			}
			next, _ = mustDecide(t, alg, prev, namedTasks("a", "b"), nil, cordoned)
			for _, s := range next.Slices {
				if len(s.Tasks) != 2 {
					t.Errorf("%s, previous assignment %v: slice [%#x, %#x) has tasks %v; min redundancy 2 needs the cordoned b too",
						alg.Name(), prev != nil, s.Start, s.End, s.Tasks)
				}
			}
		}
	}
}

// TestPinBoundsKeptByMerges: a decision without load merges adjacent
// slices served by the same tasks, but not across the bounds of an active
// pin, which the membership phases cut: a membership decision after it,
// with the same tasks and configuration, changes nothing.
func TestPinBoundsKeptByMerges(t *testing.T) {
	tasks := namedTasks("a", "b", "c")
	prev, err := Initial("j", tasks, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	// Inside a's third of the key space: a serves it already.
	cfg.Pins = []Pin{{Start: KeySpaceEnd / 8, End: KeySpaceEnd / 4, Task: "a"}}
	next, _ := mustDecide(t, NewWeightedMove(), prev, tasks, nil, cfg)
	again, d := mustDecide(t, membershipAlg{}, next, tasks, nil, cfg)
	if d.Changed {
		t.Errorf("a membership decision with nothing changed changed %v into %v: %v", next.Slices, again.Slices, d.Moves)
	}
	if !servedBy(next, KeySpaceEnd/8, KeySpaceEnd/4, "a") {
		t.Errorf("the pin is not applied: %v", next.Slices)
	}
}
