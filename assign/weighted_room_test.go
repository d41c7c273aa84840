package assign

import (
	"slices"
	"strings"
	"testing"
)

// roomJob is a job no single move can balance, in groups of four tasks.
// In each, task 0 (capacity 2) serves hot key X alone, 1.15 times the
// job's utilisation; task 1 (capacity 2) serves keys Y and Z and is the
// only task that could take half of X, but not without ending hotter
// than task 0; tasks 2 and 3 (capacity 1) are too small for a share of
// any of the three. The way out is a swap: task 1 takes a replica of X
// and gives shares of Y and Z to task 0. Each group has twelve equal
// slices, and each key is a single slice key in the middle of one; with
// withBytes, X, Y and Z hold a byte each.
func roomJob(groups int, withBytes bool) (*Assignment, []Task, Load) {
	tasks := testTasks(4 * groups)
	owners := []int{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}
	loads := []float64{12, 0, 0, 6, 4, 0, 2.3, 2.3, 0, 2.3, 2.3, 0}
	w := KeySpaceEnd / SliceKey(12*groups)
	prev := &Assignment{Job: "j", Generation: 1, Tasks: slices.Clone(tasks)}
	var load Load
	for g := range groups {
		tasks[4*g].Capacity, tasks[4*g+1].Capacity = 2, 2
		for i, o := range owners {
			j := 12*g + i
			s := Slice{Start: SliceKey(j) * w, End: SliceKey(j+1) * w, Tasks: []string{tasks[4*g+o].Name}}
			if j == 12*groups-1 {
				s.End = KeySpaceEnd
			}
			prev.Slices = append(prev.Slices, s)
			if loads[i] > 0 {
				e := LoadEntry{Start: s.Start + w/2, End: s.Start + w/2 + 1, Load: loads[i]}
				if withBytes && i <= 4 {
					e.Bytes = 1
				}
				load = append(load, e)
			}
		}
	}
	return prev, tasks, load
}

// roomConfig isolates phase 4: the slice counts neither merge nor split
// twelve slices of four tasks, and the churn budget is the key space.
func roomConfig() Config {
	return Config{MinRedundancy: 1, MaxRedundancy: 2, MinSlicesPerTask: 3, MaxSlicesPerTask: 3, MoveChurn: 1}
}

// twelfth returns the tasks serving the i-th twelfth of the key space.
func twelfth(a *Assignment, i int) []string {
	return a.Slices[a.Find(SliceKey(i)*(KeySpaceEnd/12))].Tasks
}

// When the only task with room for a share of the hottest task's hot key
// would end hotter than it, phase 4 swaps: that task takes a replica of
// the hot key and gives shares of its own keys to the hottest task.
func TestWeightedMoveSwapsToMakeRoom(t *testing.T) {
	prev, tasks, load := roomJob(1, false)
	before := ImbalanceWith(prev, load, tasks)
	next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, roomConfig())
	after := ImbalanceWith(next, load, tasks)
	if before < 1.15 || after > 1.1 {
		t.Errorf("utilisation max/mean %.3f -> %.3f; want from above 1.15 to at most 1.1\nmoves: %+v", before, after, d.Moves)
	}
	if x := twelfth(next, 0); !slices.Equal(x, []string{tasks[0].Name, tasks[1].Name}) {
		t.Errorf("hot key X served by %v; want tasks 0 and 1", x)
	}
	gave := 0
	for _, m := range d.Moves {
		if m.To == tasks[0].Name && strings.Contains(m.Reason, "makes room") {
			gave++
		}
	}
	if gave == 0 {
		t.Errorf("no move gives task 0 load to make room on task 1\nmoves: %+v", d.Moves)
	}
}

// The swap keeps what single moves keep: a task without room for the
// state, or cordoned, takes nothing; an operator's pin keeps its keys.
func TestWeightedMoveSwapKeepsConstraints(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		prev, tasks, load := roomJob(1, true)
		for i := range tasks {
			tasks[i].MemoryLimit = 10
		}
		tasks[0].MemoryLimit = 1 // room for X alone
		next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, roomConfig())
		checkWithinLimits(t, "after the decision", next, load, tasks)
		for _, i := range []int{3, 4} {
			if slices.Contains(twelfth(next, i), tasks[0].Name) {
				t.Errorf("task 0, full, serves slice %d\nmoves: %+v", i, d.Moves)
			}
		}
	})
	t.Run("cordoned", func(t *testing.T) {
		prev, tasks, load := roomJob(1, false)
		tasks[0].Cordoned = true
		next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, roomConfig())
		for i := 3; i < 12; i++ { // the slices of the other tasks
			if slices.Contains(twelfth(next, i), tasks[0].Name) {
				t.Errorf("cordoned task 0 took slice %d\nmoves: %+v", i, d.Moves)
			}
		}
	})
	t.Run("pinned", func(t *testing.T) {
		prev, tasks, load := roomJob(1, false)
		cfg := roomConfig()
		w := KeySpaceEnd / 12
		cfg.Pins = []Pin{{Start: 3 * w, End: 5 * w, Task: tasks[1].Name}}
		next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg)
		for _, i := range []int{3, 4} {
			if !slices.Contains(twelfth(next, i), tasks[1].Name) {
				t.Errorf("slice %d, pinned to task 1, served by %v\nmoves: %+v", i, twelfth(next, i), d.Moves)
			}
		}
		// A replica of a pinned slice keeps the pin, so the swap is still open.
		if after := ImbalanceWith(next, load, tasks); after > 1.1 {
			t.Errorf("utilisation max/mean %.3f with Y and Z pinned; want at most 1.1\nmoves: %+v", after, d.Moves)
		}
	})
}
