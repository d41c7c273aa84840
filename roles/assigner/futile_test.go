package assigner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/slicerd/slicerd/assign"
)

// A load-driven decision that futile skips is one that would not have
// been committed: for jobs of every algorithm, with and without
// capacities and memory limits, on loads from even to skewed and reports
// of few to many requests, every decision computed where futile says
// so is not significant. Both outcomes must occur, or the test shows
// nothing.
func TestFutileDecisionsAreNotSignificant(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var skipped, computed int
	for round := range 400 {
		n := 2 + rng.IntN(12)
		live := make([]assign.Task, n)
		for i := range live {
			live[i].Name = fmt.Sprintf("t%02d", i)
			if round%3 == 1 {
				live[i].Capacity = []float64{0, 1, 2, 4}[rng.IntN(4)]
			}
		}
		cfg := assign.DefaultConfig()
		cfg.Algorithm = assign.AlgorithmNames()[round%len(assign.AlgorithmNames())]
		cfg.MaxRedundancy = 1 + rng.IntN(3)
		cur, err := assign.Initial("j", live, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// A few decisions on a skewed load give cur slices of every width.
		for range rng.IntN(3) {
			next, _, err := algorithmOf(cfg).Decide("j", cur, live, randomLoad(rng, 1+rng.IntN(40), 4), cfg)
			if err != nil {
				t.Fatal(err)
			}
			cur = next
		}
		load := randomLoad(rng, 1+rng.IntN(60), []float64{0, 0.05, 0.3, 2}[rng.IntN(4)])
		if round%4 == 3 {
			// Memory limits around each task's even share of the state.
			var state float64
			for i := range load {
				load[i].Bytes = float64(1 + rng.IntN(1000))
				state += load[i].Bytes
			}
			for i := range live {
				live[i].MemoryLimit = state / float64(n) * (0.8 + rng.Float64())
			}
		}
		var e assign.Evidence
		e.Events = []float64{0, 30, 300, 1e4, 1e7}[rng.IntN(5)]
		before := assign.ImbalanceWith(cur, load, live)
		if hot, _ := assign.Hottest(cur, load, live); hot >= 0 && rng.IntN(4) > 0 {
			e.Share, e.Tasks = assign.CapacityShare(cur, live, hot), len(cur.Tasks)
		}
		next, _, err := algorithmOf(cfg).Decide("j", cur, live, load, cfg)
		if err != nil {
			t.Fatal(err)
		}
		after := assign.ImbalanceWith(next, load, live)
		if !futile(cur, load, live, before, e) {
			computed++
			continue
		}
		skipped++
		if significant(cur, next, load, live, before, after, e) {
			t.Errorf("round %d (%s, %d tasks, %+v): skipped as futile, but the decision was significant: imbalance %.4f → %.4f, memory overage %v → %v",
				round, cfg.Algorithm, n, e, before, after,
				assign.MemoryOverage(cur, load, live), assign.MemoryOverage(next, load, live))
		}
	}
	t.Logf("%d decisions skipped as futile, %d computed", skipped, computed)
	if skipped < 40 || computed < 40 {
		t.Errorf("%d decisions skipped and %d computed; the draws must give many of each", skipped, computed)
	}
}

// randomLoad is n entries tiling the key space, each of load 100 times
// e^(skew·N(0,1)): even at skew 0, heavy-tailed as skew grows.
func randomLoad(rng *rand.Rand, n int, skew float64) assign.Load {
	load := make(assign.Load, n)
	for i := range load {
		load[i] = assign.LoadEntry{
			Start: assign.KeySpaceEnd / uint64(n) * uint64(i),
			End:   assign.KeySpaceEnd / uint64(n) * uint64(i+1),
			Load:  100 * math.Exp(skew*rng.NormFloat64()),
		}
	}
	load[n-1].End = assign.KeySpaceEnd
	return load
}
