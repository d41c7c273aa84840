package assign

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMakeBeforeBreak: the intermediate assignment serves every key by its
// next tasks and its live current ones, moves every key once (its churn
// from cur is next's, the step to next churns nothing), and is nil when
// no live task loses keys.
func TestMakeBeforeBreak(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 51))
	tasks := testTasks(6)
	cur := scattered(rng, tasks, 20, 1)
	load := powerLoad(rng, 500, 1.3)
	next, d := mustDecide(t, NewWeightedMove(), cur, tasks, load, DefaultConfig())
	if !d.Changed {
		t.Fatal("test setup: the decision moved nothing")
	}
	mid, gaining := MakeBeforeBreak(cur, next, tasks)
	if mid == nil || len(gaining) == 0 {
		t.Fatal("nil for a decision that moves keys between live tasks")
	}
	if err := mid.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []SliceKey{0, KeySpaceEnd / 3, KeySpaceEnd - 1} {
		got := mid.Slices[mid.Find(k)].Tasks
		for _, want := range [][]string{next.Slices[next.Find(k)].Tasks, cur.Slices[cur.Find(k)].Tasks} {
			for _, task := range want {
				if !slices.Contains(got, task) {
					t.Errorf("key %#x: %s serves it before or after, but not in between (%v)", k, task, got)
				}
			}
		}
	}
	if c1, c2 := Churn(cur, mid), Churn(mid, next); c1 != Churn(cur, next) || c2 != 0 {
		t.Errorf("churn %g then %g; want %g then 0", c1, c2, Churn(cur, next))
	}
	// Only a departed task loses keys: nothing to make first.
	live := tasks[1:]
	gone, _ := mustDecide(t, membershipAlg{}, cur, live, nil, DefaultConfig())
	if mid, _ := MakeBeforeBreak(cur, gone, live); mid != nil {
		t.Errorf("an intermediate step for keys whose task is gone")
	}
}

func TestHandoffDeadlineValidated(t *testing.T) {
	for _, c := range []Config{
		{MinRedundancy: 1, MaxRedundancy: 1, HandoffDeadlineMS: -1},
		{MinRedundancy: 1, MaxRedundancy: 1, HandoffDeadlineMS: MaxHandoffDeadlineMS + 1},
		{MinRedundancy: 1, MaxRedundancy: 1, HandoffDeadlineMS: 100, Consistency: Strong},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

// FuzzMakeBeforeBreak checks the two-step move on random pairs of
// assignments and live sets: the first step validates, serves every key by
// its next tasks and its live current ones and by nothing else, churns as
// much as the whole move, and the second step churns nothing.
func FuzzMakeBeforeBreak(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(3), uint8(0))
	f.Add(uint64(7), uint8(2), uint8(1), uint8(1))
	f.Add(uint64(99), uint8(9), uint8(4), uint8(6))
	f.Fuzz(func(t *testing.T, seed uint64, ntasks, redundancy, dead uint8) {
		n := 2 + int(ntasks%10)
		r := 1 + int(redundancy)%n
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		tasks := testTasks(n)
		cur := scattered(rng, tasks, 1+rng.IntN(20), r)
		next := scattered(rng, tasks, 1+rng.IntN(20), r)
		next.Generation = cur.Generation + 1
		live := slices.Clone(tasks)
		for range int(dead) % n {
			i := rng.IntN(len(live))
			live = slices.Delete(live, i, i+1)
		}
		mid, gaining := MakeBeforeBreak(cur, next, live)
		if mid == nil {
			// Then no live task of cur loses a key.
			for _, s := range cur.Slices {
				for _, task := range s.Tasks {
					if slices.ContainsFunc(live, func(l Task) bool { return l.Name == task }) {
						for k := s.Start; k < s.End; k += max((s.End-s.Start)/4, 1) {
							if !slices.Contains(next.Slices[next.Find(k)].Tasks, task) {
								t.Fatalf("nil, but live %s loses key %#x", task, k)
							}
						}
					}
				}
			}
			return
		}
		if err := mid.Validate(); err != nil {
			t.Fatal(err)
		}
		if !slices.IsSorted(gaining) {
			t.Fatalf("gaining %v not sorted", gaining)
		}
		for _, s := range mid.Slices {
			for _, k := range []SliceKey{s.Start, s.End - 1} {
				want := slices.Clone(next.Slices[next.Find(k)].Tasks)
				for _, task := range cur.Slices[cur.Find(k)].Tasks {
					if slices.ContainsFunc(live, func(l Task) bool { return l.Name == task }) && !slices.Contains(want, task) {
						want = append(want, task)
					}
				}
				slices.Sort(want)
				if !slices.Equal(s.Tasks, want) {
					t.Fatalf("key %#x: %v, want %v", k, s.Tasks, want)
				}
			}
		}
		if c1, c2 := Churn(cur, mid), Churn(mid, next); c1 != Churn(cur, next) || c2 != 0 {
			t.Fatalf("churn %g then %g; want %g then 0", c1, c2, Churn(cur, next))
		}
	})
}

// TestMakeBeforeBreakMovedTask: a task that came back at another address
// lost what its old instance held, as a failed task does: the first step
// does not keep it beside the gaining tasks at the address it no longer
// has, and where it loses every key (it was drained meanwhile) there is
// nothing to make first.
func TestMakeBeforeBreakMovedTask(t *testing.T) {
	tasks := testTasks(3)
	cur, err := Initial("j", tasks, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	live := slices.Clone(tasks)
	live[1].Addr = "10.9.9.9:80"
	live[1].Draining = true
	next, _ := mustDecide(t, membershipAlg{}, cur, live, nil, DefaultConfig())
	if _, ok := next.TaskIndex(live[1].Name); ok {
		t.Fatal("test setup: the drained task kept keys")
	}
	mid, _ := MakeBeforeBreak(cur, next, live)
	if mid == nil {
		return
	}
	for _, task := range mid.Tasks {
		if i := slices.IndexFunc(live, func(l Task) bool { return l.Name == task.Name }); i < 0 || live[i].Addr != task.Addr {
			t.Errorf("the first step lists %s at %s, an address it no longer has", task.Name, task.Addr)
		}
	}
}
