package assign

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func namedTasks(names ...string) []Task {
	ts := make([]Task, len(names))
	for i, n := range names {
		ts[i] = Task{Name: n, Addr: "10.0.0." + fmt.Sprint(i+1) + ":7000"}
	}
	return ts
}

func TestInitial(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 50} {
		for _, r := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("n=%d/r=%d", n, r), func(t *testing.T) {
				live := make([]Task, n)
				for i := range live {
					// Reverse order: Initial must sort.
					live[i] = Task{Name: fmt.Sprintf("t%02d", n-i), Addr: fmt.Sprintf("h%d:1", i)}
				}
				cfg := Config{MinRedundancy: r, MaxRedundancy: 3}
				a, err := Initial("demo", live, cfg)
				if err != nil {
					t.Fatal(err)
				}
				checkAssignment(t, a, live, cfg)
				wantSlices := n
				if r >= n {
					wantSlices = 1 // every range has every task: one slice
				}
				if a.Generation != 1 || len(a.Slices) != wantSlices {
					t.Fatalf("generation %d, %d slices; want 1 and %d", a.Generation, len(a.Slices), wantSlices)
				}
				w := KeySpaceEnd / SliceKey(n)
				if wantSlices == 1 {
					w = KeySpaceEnd
				}
				for i, s := range a.Slices[:len(a.Slices)-1] {
					if s.Width() != w {
						t.Errorf("slice %d width %#x, want %#x", i, s.Width(), w)
					}
				}
				loads := widths(a)
				for _, task := range a.Tasks {
					if want := SliceKey(min(r, len(a.Slices))) * w; loads[task.Name] < want || loads[task.Name]-want >= SliceKey(n) {
						t.Errorf("task %s serves width %#x, want %#x (+ remainder)", task.Name, loads[task.Name], want)
					}
				}
				if !slices.IsSortedFunc(live, func(a, b Task) int { return -compareName(a, b) }) {
					t.Error("Initial reordered its input")
				}
			})
		}
	}
}

func compareName(a, b Task) int {
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}

func TestInitialRejects(t *testing.T) {
	ok := namedTasks("a", "b")
	for _, tt := range []struct {
		name  string
		job   string
		tasks []Task
		cfg   Config
		want  error
	}{
		{"bad job", "Bad Job", ok, DefaultConfig(), ErrInvalidName},
		{"no tasks", "demo", nil, DefaultConfig(), ErrNoTasks},
		{"bad task name", "demo", namedTasks("a", "b c"), DefaultConfig(), ErrInvalidName},
		{"duplicate task", "demo", namedTasks("a", "b", "a"), DefaultConfig(), ErrInvalidName},
		{"long address", "demo", []Task{{Name: "a", Addr: string(make([]byte, MaxTaskAddrLen+1))}}, DefaultConfig(), ErrInvalidAddr},
		{"bad config", "demo", ok, Config{MinRedundancy: 2, MaxRedundancy: 1}, ErrInvalidConfig},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Initial(tt.job, tt.tasks, tt.cfg); !errors.Is(err, tt.want) {
				t.Fatalf("Initial() = %v, want %v", err, tt.want)
			}
		})
	}
}
