package assign

import (
	"math/rand/v2"
	"testing"
)

// MaxSlices stops splits below the per-task ceiling, however hot the
// load, and brings an assignment above it down by merging.
func TestWeightedMoveMaxSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 29))
	tasks := testTasks(10)
	load := powerLoad(rng, 5000, 1.3)
	for i := range load {
		load[i].Load *= 1e9 // a forged, huge load splits as far as it may
	}
	grow := func(cfg Config) int {
		a, _ := mustDecide(t, NewWeightedMove(), nil, tasks, load, cfg)
		for range 10 {
			a, _ = mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
		}
		return len(a.Slices)
	}
	const limit = 300
	if n := grow(Config{MinRedundancy: 1, MaxRedundancy: 1}); n <= limit {
		t.Fatalf("without MaxSlices the job grew to only %d slices; the load does not exercise the cap of %d", n, limit)
	}
	if n := grow(Config{MinRedundancy: 1, MaxRedundancy: 1, MaxSlices: limit}); n > limit {
		t.Errorf("with MaxSlices %d the job grew to %d slices", limit, n)
	}

	// An assignment stored above the cap is still decided on, and only
	// shrinks.
	cold := powerLoad(rng, 5000, 1.3)
	a := scattered(rng, tasks, 100, 1)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 1, MaxSlices: limit}
	start := len(a.Slices)
	for step := range 20 {
		next, _ := mustDecide(t, NewWeightedMove(), a, tasks, cold, cfg)
		if len(next.Slices) > len(a.Slices) {
			t.Fatalf("step %d: %d slices above the cap of %d grew to %d", step, len(a.Slices), limit, len(next.Slices))
		}
		a = next
	}
	if len(a.Slices) >= start {
		t.Errorf("from %d slices above the cap of %d: merging never reduced the count", start, limit)
	}
}

func TestConfigValidateMaxSlices(t *testing.T) {
	for _, n := range []int{-1, MaxSlicesLimit + 1} {
		if err := (Config{MinRedundancy: 1, MaxRedundancy: 1, MaxSlices: n}).Validate(); err == nil {
			t.Errorf("MaxSlices %d: Validate passed", n)
		}
	}
	if err := (Config{MinRedundancy: 1, MaxRedundancy: 1, MaxSlices: 1}).Validate(); err != nil {
		t.Errorf("MaxSlices 1: %v", err)
	}
}
