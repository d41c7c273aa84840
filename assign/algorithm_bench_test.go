package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// benchAlgorithm times one decision of alg for n tasks holding 50 to 150
// slices each under a power-law load, and reports the 99th percentile.
func benchAlgorithm(b *testing.B, alg Algorithm, n int) { benchAlgorithmCaps(b, alg, n, nil) }

// benchAlgorithmCaps is benchAlgorithm with task i of capacity
// caps[i%len(caps)] (nil: all 1).
func benchAlgorithmCaps(b *testing.B, alg Algorithm, n int, caps []float64) {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	tasks := testTasks(n)
	prev := scattered(rng, tasks, 50+rng.IntN(101), 1)
	load := powerLoad(rng, len(prev.Slices), 1.5)
	for i := range tasks {
		if len(caps) > 0 {
			tasks[i].Capacity = caps[i%len(caps)]
		}
	}
	cfg := DefaultConfig()
	var times []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, _, err := alg.Decide("j", prev, tasks, load, cfg); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms")
}

func BenchmarkWeightedMove(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithm(b, NewWeightedMove(), n) })
	}
}

// BenchmarkWeightedMoveCapacities is BenchmarkWeightedMove with tasks of
// capacities 1, 2 and 4 in turn: phase 4 compares a receiver per capacity.
func BenchmarkWeightedMoveCapacities(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithmCaps(b, NewWeightedMove(), n, []float64{1, 2, 4}) })
	}
}

func BenchmarkConsistentHash(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithm(b, NewConsistentHash(), n) })
	}
}
