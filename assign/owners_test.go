package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// OwnedIn gives exactly what Owned gives for the assignments indexed: for every task of the current or the previous assignment and
// one of neither, with the two sharing some tasks, of few and of many
// tasks, one to three tasks a slice, lists shared or not, loads finer and
// coarser than the slices, and with either assignment missing.
func TestOwnerIndexCutsAsOwned(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for round := range 80 {
		tasks := testTasks([]int{2, 16, 17, 60}[round%4])
		cur := scattered(rng, tasks, 1+rng.IntN(12), 1+rng.IntN(3))
		// The previous assignment shares half of the tasks, by name.
		prevTasks := append(slices.Clone(tasks[len(tasks)/2:]), testTasks(len(tasks) + len(tasks)/2)[len(tasks):]...)
		prev := scattered(rng, prevTasks, 1+rng.IntN(12), 1+rng.IntN(2))
		for _, a := range []*Assignment{cur, prev} {
			for i := 1; i < len(a.Slices); i++ {
				if rng.IntN(3) == 0 {
					a.Slices[i].Tasks = a.Slices[i-1].Tasks
				}
			}
		}
		pairs := [][]*Assignment{{cur, prev}, {cur, nil}, {nil, prev}, {cur}}
		as := pairs[round%len(pairs)]
		var idx []*OwnerIndex
		for _, a := range as {
			if a != nil {
				idx = append(idx, NewOwnerIndex(a))
			} else {
				idx = append(idx, nil)
			}
		}
		report := withBytes(rng, powerLoad(rng, 1+rng.IntN(4*len(cur.Slices)), 1.5), 1e3)
		for _, task := range append(prevTasks, tasks[0], Task{Name: "t99999"}) {
			want := report.Owned(task.Name, as...)
			if got := report.OwnedIn(task.Name, idx...); !slices.Equal(got, want) {
				t.Fatalf("round %d, task %s: OwnedIn = %v, want %v", round, task.Name, got, want)
			}
		}
	}
}

// An index's TaskLoads, TaskBytes and Hottest equal TaskLoads, TaskBytes
// and Hottest to the last bit, with and without bytes: few and many tasks, one to three a slice, lists shared or
// not, slices with no load, a slice naming a task the assignment does not
// list, loads finer and coarser than the slices, capacities.
func TestOwnerIndexTaskLoadsAsTaskLoads(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for round := range 120 {
		tasks := testTasks([]int{1, 2, 16, 17, 60}[round%5])
		a := scattered(rng, tasks, 1+rng.IntN(12), 1+rng.IntN(3))
		for i := 1; i < len(a.Slices); i++ {
			if rng.IntN(3) == 0 {
				a.Slices[i].Tasks = a.Slices[i-1].Tasks
			}
		}
		if round%7 == 0 {
			i := rng.IntN(len(a.Slices))
			a.Slices[i].Tasks = append(slices.Clone(a.Slices[i].Tasks), "zz-unlisted")
		}
		load := powerLoad(rng, 1+rng.IntN(4*len(a.Slices)), 1.5)
		if round%2 == 0 {
			load = withBytes(rng, load, 1e3)
		}
		if round%3 == 0 { // slices with no load among the others
			load = slices.DeleteFunc(load, func(LoadEntry) bool { return rng.IntN(3) == 0 })
		}
		live := slices.Clone(tasks)
		for i := range live {
			live[i].Capacity = float64(1 + rng.IntN(3))
		}
		idx := NewOwnerIndex(a)
		want, got := TaskLoads(a, load), idx.TaskLoads(load)
		for i := range want {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				t.Fatalf("round %d: task %d's load from the index is %v, want %v", round, i, got[i], want[i])
			}
		}
		wantB, gotB := TaskBytes(a, load), idx.TaskBytes(load)
		for i := range wantB {
			if math.Float64bits(gotB[i]) != math.Float64bits(wantB[i]) {
				t.Fatalf("round %d: task %d's bytes from the index are %v, want %v", round, i, gotB[i], wantB[i])
			}
		}
		wi, wb := Hottest(a, load, live)
		if gi, gb := idx.Hottest(load, live); gi != wi || math.Float64bits(gb) != math.Float64bits(wb) {
			t.Fatalf("round %d: Hottest from the index %d, %v, want %d, %v", round, gi, gb, wi, wb)
		}
	}
}

// BenchmarkOwned cuts one task's report (its own slices' load) to its
// keys in a job of n tasks holding about 100 slices each, as an Assigner
// does with every load report: Owned reads every slice of the current and
// the previous assignment; OwnedIn reads the task's (cut), from indexes
// built once per assignment (index: one assignment's, timed apart).
//
//	go test -run '^$' -bench Owned -count 6 ./assign/
func BenchmarkOwned(b *testing.B) {
	for _, n := range []int{100, 10000} {
		rng, tasks, prev, load := benchJob(n)
		cur := stored(scattered(rng, tasks, 100, 1)) // as the Assigner holds it
		task := tasks[n/2].Name
		report := load.Owned(task, cur)
		b.Run(fmt.Sprintf("tasks=%d/scan", n), func(b *testing.B) {
			for b.Loop() {
				report.Owned(task, cur, prev)
			}
		})
		b.Run(fmt.Sprintf("tasks=%d/index", n), func(b *testing.B) {
			for b.Loop() {
				NewOwnerIndex(cur)
			}
		})
		idx := []*OwnerIndex{NewOwnerIndex(cur), NewOwnerIndex(prev)}
		b.Run(fmt.Sprintf("tasks=%d/cut", n), func(b *testing.B) {
			for b.Loop() {
				report.OwnedIn(task, idx...)
			}
		})
	}
}

// taskIDs gives every slice's task indexes whether its list is shared
// with other slices (met again, it is not looked up) or its own, and -1
// for a name the assignment does not list.
func TestTaskIDsOfSharedLists(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	for _, r := range []int{1, 2, 3} {
		a := stored(scattered(rng, testTasks(500), 200, r))
		// A list naming a task the assignment does not, met twice, and a
		// list that is a prefix of another.
		odd := []string{a.Tasks[3].Name, "zz-unknown"}
		a.Slices[10].Tasks, a.Slices[90_000].Tasks = odd, odd
		a.Slices[11].Tasks = odd[:1]
		own := a.Clone()
		for i := range own.Slices {
			own.Slices[i].Tasks = slices.Clone(a.Slices[i].Tasks)
		}
		for _, b := range []*Assignment{a, own} {
			idsOf := b.taskIDs()
			for i := range b.Slices {
				got := idsOf(&b.Slices[i])
				var want []int32
				for _, name := range b.Slices[i].Tasks {
					k, ok := b.TaskIndex(name)
					if !ok {
						k = -1
					}
					want = append(want, int32(k))
				}
				if !slices.Equal(got, want) {
					t.Fatalf("r=%d, slice %d (%v): indexes %v, want %v", r, i, b.Slices[i].Tasks, got, want)
				}
			}
		}
	}
}
