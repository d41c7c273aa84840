package assign

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// served returns the slice-key width each task of a serves, by name.
func served(a *Assignment) map[string]uint64 {
	out := make(map[string]uint64)
	for _, s := range a.Slices {
		for _, t := range s.Tasks {
			out[t] += s.End - s.Start
		}
	}
	return out
}

// keysOf returns the ranges task serves in a, merged.
func keysOf(a *Assignment, task string) []Slice {
	var out []Slice
	for _, s := range a.Slices {
		if !slices.Contains(s.Tasks, task) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End == s.Start {
			out[n-1].End = s.End
			continue
		}
		out = append(out, Slice{Start: s.Start, End: s.End})
	}
	return out
}

// covers reports whether every key of inner is in outer (both merged,
// sorted ranges).
func covers(outer, inner []Slice) bool {
	for _, r := range inner {
		ok := false
		for _, o := range outer {
			if o.Start <= r.Start && r.End <= o.End {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestDrainingTaskGivesUpItsSlices: every algorithm that drains takes all
// of a draining task's keys off it in one decision, moves nothing else
// (weighted-move and membership), keeps every slice at its redundancy, and
// leaves the task out of the assignment.
func TestDrainingTaskGivesUpItsSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	tasks := testTasks(10)
	prev := scattered(rng, tasks, 20, 2)
	live := slices.Clone(tasks)
	live[3].Draining = true
	cfg := Config{MinRedundancy: 2, MaxRedundancy: 2}
	share := float64(served(prev)[tasks[3].Name]) / float64(KeySpaceEnd)
	for _, alg := range []Algorithm{NewWeightedMove(), membershipAlg{}, NewStatic(), NewConsistentHash()} {
		next, d := mustDecide(t, alg, prev, live, nil, cfg)
		if _, ok := next.TaskIndex(tasks[3].Name); ok {
			t.Errorf("%s: the draining task is still in the assignment", alg.Name())
		}
		for _, s := range next.Slices {
			if len(s.Tasks) != 2 {
				t.Fatalf("%s: slice [%#x, %#x) has %d tasks, want 2", alg.Name(), s.Start, s.End, len(s.Tasks))
			}
		}
		if alg.Name() == AlgorithmWeightedMove || alg.Name() == "membership" {
			if d.Churn > share*1.0001 {
				t.Errorf("%s: churn %.4f, more than the draining task's share %.4f", alg.Name(), d.Churn, share)
			}
		}
	}
}

// membershipAlg runs Membership as an Algorithm, for table tests.
type membershipAlg struct{}

func (membershipAlg) Name() string { return "membership" }
func (membershipAlg) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	return Membership(job, prev, live, load, cfg)
}

// TestCordonedTaskTakesNothingNew: while t1 is cordoned, neither a task
// leaving, nor a joiner, nor load-driven decisions under shifting load give
// it a key it did not serve; it keeps serving (most of) what it had, and a
// cordoned joiner is given nothing.
func TestCordonedTaskTakesNothingNew(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 22))
	tasks := testTasks(6)
	prev := scattered(rng, tasks, 30, 1)
	live := slices.Clone(tasks)
	live[1].Cordoned = true
	before := keysOf(prev, tasks[1].Name)
	cfg := DefaultConfig()

	// t4 leaves.
	left := slices.Delete(slices.Clone(live), 4, 5)
	a, _ := mustDecide(t, membershipAlg{}, prev, left, nil, cfg)
	if !covers(before, keysOf(a, tasks[1].Name)) {
		t.Errorf("after a task left, the cordoned task serves keys it did not")
	}
	// A cordoned joiner.
	joiner := Task{Name: "t99999", Addr: "10.9.9.9:80", Cordoned: true}
	b, _ := mustDecide(t, membershipAlg{}, a, append(slices.Clone(left), joiner), nil, cfg)
	if _, ok := b.TaskIndex(joiner.Name); ok {
		t.Errorf("a cordoned joiner was given keys")
	}
	// Load-driven decisions under a load whose hot spot moves.
	for i := range 8 {
		load := withBytes(rng, powerLoad(rng, 500, 1.2), 0)
		next, _ := mustDecide(t, NewWeightedMove(), b, left, load, cfg)
		if !covers(before, keysOf(next, tasks[1].Name)) {
			t.Fatalf("decision %d gave the cordoned task keys it did not serve", i+1)
		}
		b = next
	}
	if len(keysOf(b, tasks[1].Name)) == 0 {
		t.Errorf("the cordoned task lost every key; a cordon only stops new ones")
	}
}

// TestControlsGiveWayToOwnership: with every task cordoned, cordons are
// ignored; with every task draining, so is draining: keys keep owners.
// Assignments never record either flag.
func TestControlsGiveWayToOwnership(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 23))
	tasks := testTasks(4)
	prev := scattered(rng, tasks, 10, 1)
	for _, flag := range []string{"cordoned", "draining", "mixed"} {
		live := slices.Clone(tasks)
		for i := range live {
			switch {
			case flag == "cordoned" || flag == "mixed" && i%2 == 0:
				live[i].Cordoned = true
			default:
				live[i].Draining = true
			}
		}
		for _, alg := range []Algorithm{NewWeightedMove(), membershipAlg{}, NewStatic(), NewConsistentHash()} {
			next, _ := mustDecide(t, alg, prev, live, nil, DefaultConfig())
			for _, task := range next.Tasks {
				if task.Cordoned || task.Draining {
					t.Fatalf("%s, all %s: the assignment records a flag: %+v", alg.Name(), flag, task)
				}
			}
			if flag == "mixed" {
				// The cordons give way; the draining tasks still drain.
				for _, task := range next.Tasks {
					if i := slices.IndexFunc(live, func(l Task) bool { return l.Name == task.Name }); live[i].Draining {
						t.Errorf("%s, mixed: draining task %s kept keys", alg.Name(), task.Name)
					}
				}
			}
		}
	}
	a, err := Initial("j", testTasks(2), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []func(*Task){func(t *Task) { t.Cordoned = true }, func(t *Task) { t.Draining = true }} {
		b := a.Clone()
		set(&b.Tasks[0])
		if err := b.Validate(); !errors.Is(err, ErrInvalidAssignment) {
			t.Errorf("an assignment recording a cordon or drain: Validate = %v", err)
		}
	}
}

// TestDrainRespectsMemoryAndCapacity: a draining task's slices go to tasks
// with room, by the same rules as a departed task's.
func TestDrainRespectsMemoryAndCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 24))
	tasks := testTasks(5)
	prev := scattered(rng, tasks, 40, 1)
	load := make(Load, 0, len(prev.Slices))
	for _, s := range prev.Slices {
		load = append(load, LoadEntry{Start: s.Start, End: s.End, Load: 1, Bytes: 1e3})
	}
	held := TaskBytes(prev, load)
	live := slices.Clone(tasks)
	for i := range live {
		live[i].MemoryLimit = 60e3
	}
	live[0].Draining = true
	for _, alg := range []Algorithm{NewWeightedMove(), membershipAlg{}} {
		next, _ := mustDecide(t, alg, prev, live, load, DefaultConfig())
		checkWithinLimits(t, fmt.Sprintf("%s, draining %s (%.0f bytes)", alg.Name(), tasks[0].Name, held[0]), next, load, live)
		if _, ok := next.TaskIndex(tasks[0].Name); ok {
			t.Errorf("%s: the draining task kept keys", alg.Name())
		}
	}
}

// TestDrainingTaskGetsNoReplicaBack: when every task that is not draining
// already serves a slice a draining task also served (the redundancy is
// as high as the tasks staying), the draining task's replica is dropped,
// not given back to it: it ends serving nothing, and every slice keeps the
// tasks that stay.
func TestDrainingTaskGetsNoReplicaBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 25))
	for _, n := range []int{2, 3} {
		tasks := testTasks(n)
		cfg := Config{MinRedundancy: n, MaxRedundancy: n}
		prev, err := Initial("j", tasks, cfg)
		if err != nil {
			t.Fatal(err)
		}
		live := slices.Clone(tasks)
		live[n-1].Draining = true
		for _, load := range []Load{nil, withBytes(rng, powerLoad(rng, 100, 1.5), 0)} {
			for _, alg := range []Algorithm{NewWeightedMove(), membershipAlg{}} {
				next, _ := mustDecide(t, alg, prev, live, load, cfg)
				if _, ok := next.TaskIndex(live[n-1].Name); ok {
					t.Errorf("%d tasks, %s, load %v: the draining task still serves %v", n, alg.Name(), load != nil, keysOf(next, live[n-1].Name))
				}
				for _, s := range next.Slices {
					if len(s.Tasks) != n-1 {
						t.Fatalf("%d tasks, %s: slice [%#x, %#x) has tasks %v, want the %d staying", n, alg.Name(), s.Start, s.End, s.Tasks, n-1)
					}
				}
			}
		}
	}
}
