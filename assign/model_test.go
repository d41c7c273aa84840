package assign

import (
	"errors"
	"strings"
	"testing"
)

const half = KeySpaceEnd / 2

func twoSlices() *Assignment {
	return &Assignment{
		Job:        "demo",
		Generation: 1,
		Tasks:      []Task{{Name: "a", Addr: "10.0.0.1:1"}, {Name: "b", Addr: "10.0.0.2:1"}},
		Slices: []Slice{
			{Start: 0, End: half, Tasks: []string{"a"}},
			{Start: half, End: KeySpaceEnd, Tasks: []string{"a", "b"}},
		},
	}
}

func TestValidateAccepts(t *testing.T) {
	if err := twoSlices().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(a *Assignment)
		want   string
	}{
		{"gap", func(a *Assignment) { a.Slices[1].Start = half + 1 }, "gap"},
		{"gap at end", func(a *Assignment) { a.Slices[1].End = KeySpaceEnd - 1 }, "gap"},
		{"overlap", func(a *Assignment) { a.Slices[1].Start = half - 1 }, "overlapping"},
		{"empty slice", func(a *Assignment) {
			a.Slices = []Slice{{0, half, []string{"a"}}, {half, half, []string{"a"}}, {half, KeySpaceEnd, []string{"b"}}}
		}, "empty"},
		{"slice with no task", func(a *Assignment) { a.Slices[0].Tasks = nil }, "has no task"},
		{"unknown task", func(a *Assignment) { a.Slices[0].Tasks = []string{"zed"} }, "unknown task"},
		{"unsorted slice tasks", func(a *Assignment) { a.Slices[1].Tasks = []string{"b", "a"} }, "not sorted"},
		{"duplicate slice task", func(a *Assignment) { a.Slices[1].Tasks = []string{"a", "a"} }, "not sorted or duplicated"},
		{"unsorted task table", func(a *Assignment) { a.Tasks[0], a.Tasks[1] = a.Tasks[1], a.Tasks[0] }, "not sorted"},
		{"invalid task name", func(a *Assignment) { a.Tasks[0].Name = "-a" }, "task 0"},
		{"past end", func(a *Assignment) { a.Slices[1].End = KeySpaceEnd + 1 }, "past the key space end"},
		{"no slices", func(a *Assignment) { a.Slices = nil }, "no slices"},
		{"generation 0", func(a *Assignment) { a.Generation = 0 }, "generation 0"},
		{"bad job name", func(a *Assignment) { a.Job = "Demo" }, "job name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := twoSlices()
			tt.mutate(a)
			err := a.Validate()
			if !errors.Is(err, ErrInvalidAssignment) {
				t.Fatalf("Validate() = %v, want ErrInvalidAssignment", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %q, want it to mention %q", err, tt.want)
			}
		})
	}
	var nilA *Assignment
	if err := nilA.Validate(); !errors.Is(err, ErrInvalidAssignment) {
		t.Errorf("nil.Validate() = %v", err)
	}
}

func TestFind(t *testing.T) {
	a := twoSlices()
	for _, tt := range []struct {
		k    SliceKey
		want int
	}{{0, 0}, {half - 1, 0}, {half, 1}, {KeySpaceEnd - 1, 1}} {
		if got := a.Find(tt.k); got != tt.want {
			t.Errorf("Find(%#x) = %d, want %d", tt.k, got, tt.want)
		}
	}
}

func TestVersionSupersedes(t *testing.T) {
	for _, tt := range []struct {
		next, held Version
		want       bool
		reset      bool
	}{
		{Version{"a", 2}, Version{"a", 1}, true, false},
		{Version{"a", 1}, Version{"a", 1}, false, false},
		{Version{"a", 1}, Version{"a", 2}, false, false},
		// A recreated store starts again at generation 1.
		{Version{"b", 1}, Version{"a", 7}, true, true},
		{Version{"b", 9}, Version{"a", 7}, true, true},
		// Nothing held yet.
		{Version{"a", 1}, Version{}, true, false},
		// A held assignment of unknown incarnation (an old cache file).
		{Version{"a", 1}, Version{"", 7}, true, false},
		// An assignment of unknown incarnation (an old server).
		{Version{"", 8}, Version{"a", 7}, true, false},
		{Version{"", 6}, Version{"a", 7}, false, false},
		{Version{"", 8}, Version{"", 7}, true, false},
	} {
		if got := tt.next.Supersedes(tt.held); got != tt.want {
			t.Errorf("%+v.Supersedes(%+v) = %v, want %v", tt.next, tt.held, got, tt.want)
		}
		if got := tt.next.Reset(tt.held); got != tt.reset {
			t.Errorf("%+v.Reset(%+v) = %v, want %v", tt.next, tt.held, got, tt.reset)
		}
	}
}

// TestSettledWhenEveryTaskDrains: with every live task draining, draining
// gives way (keys keep their tasks), so an assignment over those tasks is
// settled and load may still be weighed; with one task staying, the
// draining ones must lose their keys first.
func TestSettledWhenEveryTaskDrains(t *testing.T) {
	tasks := namedTasks("a", "b")
	a, err := Initial("j", tasks, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !a.Settled(tasks) {
		t.Fatal("an initial assignment over the live tasks is not settled")
	}
	all := Config{Drained: []string{"a", "b"}}.Controls(tasks)
	if !a.Settled(all) {
		t.Error("every task draining: not settled, though no decision moves a key")
	}
	if next, _ := mustDecide(t, membershipAlg{}, a, all, nil, DefaultConfig()); !Equal(next, a) {
		t.Errorf("every task draining: the membership decision moved keys: %v", next.Slices)
	}
	if one := (Config{Drained: []string{"b"}}).Controls(tasks); a.Settled(one) {
		t.Error("b draining, a staying: settled, though b still holds keys")
	}
}
