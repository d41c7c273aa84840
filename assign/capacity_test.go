package assign

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestWeightedMoveBalancesUtilisation: with tasks of capacities 1, 2 and 4
// and a smooth load, repeated decisions bring every task's load divided by
// its capacity near the job's, where a capacity-blind decision leaves the
// large tasks idle; the assignment records no capacity.
func TestWeightedMoveBalancesUtilisation(t *testing.T) {
	tasks := testTasks(8)
	caps := []float64{1, 1, 1, 1, 2, 2, 4, 4}
	for i := range tasks {
		tasks[i].Capacity = caps[i]
	}
	rng := rand.New(rand.NewPCG(7, 7))
	load := powerLoad(rng, 4000, 3) // a light tail: no range dominates
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 1}

	run := func(live []Task) *Assignment {
		var a *Assignment
		for range 30 {
			next, d := mustDecide(t, NewWeightedMove(), a, live, load, cfg)
			if a != nil && !d.Changed {
				break
			}
			a = next
		}
		return a
	}
	aware := run(tasks)
	for _, task := range aware.Tasks {
		if task.Capacity != 0 {
			t.Fatalf("assignment records capacity %v for %s", task.Capacity, task.Name)
		}
	}
	blind := run(testTasks(8))

	got, blindImb := ImbalanceWith(aware, load, tasks), ImbalanceWith(blind, load, tasks)
	t.Logf("utilisation max/mean: capacity-aware %.3f, capacity-blind %.3f", got, blindImb)
	if got > 1.1 {
		t.Errorf("capacity-aware utilisation imbalance %.3f, want at most 1.1", got)
	}
	if blindImb < 1.5 {
		t.Errorf("capacity-blind utilisation imbalance %.3f; the test load no longer tells the two apart", blindImb)
	}
	// The big tasks carry about their share.
	loads := TaskLoads(aware, load)
	var total float64
	for _, l := range loads {
		total += l
	}
	for i, task := range aware.Tasks {
		want := total * caps[i] / 16
		if math.Abs(loads[i]-want) > 0.1*want {
			t.Errorf("%s (capacity %v) carries %.4g, want %.4g ± 10%%", task.Name, caps[i], loads[i], want)
		}
	}
	// With one capacity ImbalanceWith is Imbalance.
	if a, b := ImbalanceWith(blind, load, testTasks(8)), Imbalance(blind, load); a != b {
		t.Errorf("ImbalanceWith(capacity 1) = %v, Imbalance = %v", a, b)
	}
}

// TestCapacityValidated: a capacity outside [MinCapacity, MaxCapacity]
// (other than 0, meaning 1) is refused by every algorithm with
// ErrInvalidCapacity, and an assignment recording one does not validate.
func TestCapacityValidated(t *testing.T) {
	for _, c := range []float64{-1, math.NaN(), math.Inf(1), 1e-4, 1001} {
		live := testTasks(2)
		live[1].Capacity = c
		for _, name := range AlgorithmNames() {
			alg, _ := AlgorithmByName(name)
			if _, _, err := alg.Decide("j", nil, live, nil, DefaultConfig()); !errors.Is(err, ErrInvalidCapacity) {
				t.Errorf("%s with capacity %v: err = %v, want ErrInvalidCapacity", name, c, err)
			}
		}
	}
	for _, c := range []float64{0, MinCapacity, 1, 2.5, MaxCapacity} {
		if err := ValidateCapacity(c); err != nil {
			t.Errorf("ValidateCapacity(%v) = %v", c, err)
		}
	}
	a, err := Initial("j", testTasks(2), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.Tasks[0].Capacity = 2
	if err := a.Validate(); !errors.Is(err, ErrInvalidAssignment) {
		t.Errorf("assignment recording a capacity: Validate = %v, want ErrInvalidAssignment", err)
	}
}
