package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func testTasks(n int) []Task {
	ts := make([]Task, n)
	for i := range ts {
		ts[i] = Task{Name: fmt.Sprintf("t%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)}
	}
	return ts
}

// powerLoad is a load of n equal-width entries whose values follow a
// Pareto distribution of shape alpha: a few hot ranges, a long cold tail.
func powerLoad(rng *rand.Rand, n int, alpha float64) Load {
	l := make(Load, n)
	w := KeySpaceEnd / uint64(n)
	for i := range l {
		l[i] = LoadEntry{Start: uint64(i) * w, End: uint64(i+1) * w, Load: math.Min(1/math.Pow(1-rng.Float64(), 1/alpha), 1e6)}
	}
	l[n-1].End = KeySpaceEnd
	return l
}

// scattered is an assignment of job "j" with perTask slices per task of
// equal width, each on a random task (and the next tasks for redundancy r).
func scattered(rng *rand.Rand, tasks []Task, perTask, r int) *Assignment {
	n := len(tasks)
	s := n * perTask
	w := KeySpaceEnd / uint64(s)
	a := &Assignment{Job: "j", Generation: 1, Tasks: slices.Clone(tasks), Slices: make([]Slice, s)}
	for i := range a.Slices {
		t := rng.IntN(n)
		names := make([]string, 0, r)
		for k := range min(r, n) {
			names = append(names, tasks[(t+k)%n].Name)
		}
		slices.Sort(names)
		a.Slices[i] = Slice{Start: uint64(i) * w, End: uint64(i+1) * w, Tasks: names}
	}
	a.Slices[s-1].End = KeySpaceEnd
	return a
}

func mustDecide(t testing.TB, alg Algorithm, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision) {
	t.Helper()
	next, d, err := alg.Decide("j", prev, live, load, cfg)
	if err != nil {
		t.Fatalf("%s.Decide: %v", alg.Name(), err)
	}
	if err := next.Validate(); err != nil {
		t.Fatalf("%s.Decide: invalid result: %v", alg.Name(), err)
	}
	want := uint64(1)
	if prev != nil {
		want = prev.Generation + 1
	}
	if next.Generation != want {
		t.Fatalf("%s.Decide: generation %d, want %d", alg.Name(), next.Generation, want)
	}
	for _, m := range d.Moves {
		if m.Reason == "" {
			t.Fatalf("%s.Decide: move without a reason: %v", alg.Name(), m)
		}
	}
	return next, d
}

func TestWeightedMoveReducesImbalance(t *testing.T) {
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("redundancy%d", r), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(r)))
			tasks := testTasks(20)
			cfg := Config{MinRedundancy: r, MaxRedundancy: r + 1}
			load := powerLoad(rng, 3000, 1.5)
			a := scattered(rng, tasks, 100, r)
			before := Imbalance(a, load)
			for range 10 {
				next, d := mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
				if after := Imbalance(next, load); after > Imbalance(a, load)+1e-9 {
					t.Fatalf("imbalance rose from %g to %g", Imbalance(a, load), after)
				}
				if d.Churn > cfg.WithDefaults().MoveChurn+cfg.WithDefaults().MergeChurn+0.01 {
					t.Errorf("churn %g above the budgets", d.Churn)
				}
				a = next
			}
			if after := Imbalance(a, load); after >= before {
				t.Errorf("imbalance %g after ten decisions, was %g", after, before)
			} else {
				t.Logf("imbalance %g -> %g, %d slices", before, after, len(a.Slices))
			}
		})
	}
}
