package assign

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func mustMembership(t *testing.T, prev *Assignment, live []Task, cfg Config) (*Assignment, Decision) {
	t.Helper()
	next, d, err := Membership("j", prev, live, nil, cfg)
	if err != nil {
		t.Fatalf("Membership: %v", err)
	}
	if err := next.Validate(); err != nil {
		t.Fatalf("Membership: invalid result: %v", err)
	}
	return next, d
}

// keepsBounds reports whether every slice boundary of prev is one of next:
// nothing was merged.
func keepsBounds(prev, next *Assignment) bool {
	for _, s := range prev.Slices {
		if next.Slices[next.Find(s.Start)].Start != s.Start {
			return false
		}
	}
	return true
}

// With the same live tasks and configuration, a finely split assignment
// is kept as it is: no move, no merge, only the next generation.
func TestMembershipUnchangedKeepsAssignment(t *testing.T) {
	tasks := testTasks(5)
	for _, r := range []int{1, 2} {
		cfg := Config{MinRedundancy: r, MaxRedundancy: r}
		prev := scattered(rand.New(rand.NewPCG(3, uint64(r))), tasks, 40, r)
		next, d := mustMembership(t, prev, tasks, cfg)
		if d.Changed || len(d.Moves) != 0 || d.Churn != 0 {
			t.Errorf("r=%d: decision %+v with %d moves, want unchanged", r, d.Changed, len(d.Moves))
		}
		want := prev.Clone()
		want.Generation++
		if !Equal(next, want) {
			t.Errorf("r=%d: %d slices became %d; want prev under generation %d", r, len(prev.Slices), len(next.Slices), want.Generation)
		}
	}
}

// A departed task's keys, and only those, move; a joiner takes its fair
// share, and only it gains keys. Slices are split but never merged.
func TestMembershipMovesOnlyWhatItMust(t *testing.T) {
	tasks := testTasks(6)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 1}
	prev := scattered(rand.New(rand.NewPCG(5, 5)), tasks, 30, 1)

	gone := tasks[2].Name
	live := slices.Delete(slices.Clone(tasks), 2, 3)
	died, d := mustMembership(t, prev, live, cfg)
	overlaps(prev.Slices, died.Slices, func(ps, ns *Slice, lo, hi SliceKey) {
		if !slices.Equal(ps.Tasks, ns.Tasks) && !slices.Contains(ps.Tasks, gone) {
			t.Fatalf("[%#x, %#x) moved from %v to %v though %s did not serve it", lo, hi, ps.Tasks, ns.Tasks, gone)
		}
	})
	if share := taskShare(prev, gone); d.Churn != share {
		t.Errorf("churn %v, want the departed task's share %v", d.Churn, share)
	}
	if !keepsBounds(prev, died) {
		t.Error("a departure merged slices")
	}

	joiner := Task{Name: "t99999", Addr: "10.0.9.9:80"}
	joined, d := mustMembership(t, died, append(slices.Clone(live), joiner), cfg)
	overlaps(died.Slices, joined.Slices, func(ps, ns *Slice, lo, hi SliceKey) {
		if !slices.Equal(ps.Tasks, ns.Tasks) && !slices.Equal(ns.Tasks, []string{joiner.Name}) {
			t.Fatalf("[%#x, %#x) moved from %v to %v, not to the joiner", lo, hi, ps.Tasks, ns.Tasks)
		}
	})
	fair := 1 / float64(len(live)+1)
	if s := taskShare(joined, joiner.Name); s < fair-1e-9 || s > fair+1e-9 {
		t.Errorf("the joiner holds %v of the key space, want its fair share %v", s, fair)
	}
	if d.Churn > fair+1e-9 {
		t.Errorf("churn %v above the joiner's fair share %v", d.Churn, fair)
	}
	if !keepsBounds(died, joined) {
		t.Error("a join merged slices")
	}
}

// A change of redundancy adds or drops replicas and moves nothing else.
func TestMembershipAppliesRedundancy(t *testing.T) {
	tasks := testTasks(4)
	prev := scattered(rand.New(rand.NewPCG(7, 7)), tasks, 10, 1)
	next, d := mustMembership(t, prev, tasks, Config{MinRedundancy: 2, MaxRedundancy: 2})
	for _, s := range next.Slices {
		if len(s.Tasks) != 2 {
			t.Fatalf("slice %v has %d tasks, want 2", s, len(s.Tasks))
		}
	}
	overlaps(prev.Slices, next.Slices, func(ps, ns *Slice, lo, hi SliceKey) {
		if !subset(ps.Tasks, ns.Tasks) {
			t.Fatalf("[%#x, %#x) lost a task: %v -> %v", lo, hi, ps.Tasks, ns.Tasks)
		}
	})
	if d.Churn == 0 || !keepsBounds(prev, next) {
		t.Errorf("churn %v, bounds kept %v; want replicas added in place", d.Churn, keepsBounds(prev, next))
	}
}

// A job's first decision, and one where no task of prev is live, split the
// key space evenly, as Initial does.
func TestMembershipEvenSplit(t *testing.T) {
	tasks := testTasks(3)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 1}
	want, err := Initial("j", tasks, cfg)
	if err != nil {
		t.Fatal(err)
	}
	first, d := mustMembership(t, nil, tasks, cfg)
	if !Equal(first, want) || d.Churn != 1 {
		t.Errorf("first decision %v churn %v, want %v churn 1", first.Slices, d.Churn, want.Slices)
	}
	others := testTasks(6)[3:]
	fresh, _ := mustMembership(t, first, others, cfg)
	if got := taskNames(fresh); !slices.Equal(got, []string{others[0].Name, others[1].Name, others[2].Name}) || len(fresh.Slices) != 3 {
		t.Errorf("with no task of prev live: tasks %v, %d slices; want an even split over %v", got, len(fresh.Slices), others)
	}
}

func taskShare(a *Assignment, task string) float64 {
	var w uint64
	for _, s := range a.Slices {
		if slices.Contains(s.Tasks, task) {
			w += s.Width()
		}
	}
	return float64(w) / float64(KeySpaceEnd)
}

func taskNames(a *Assignment) []string {
	names := make([]string, len(a.Tasks))
	for i, t := range a.Tasks {
		names[i] = t.Name
	}
	return names
}
