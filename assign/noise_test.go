package assign

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestSignificantGain(t *testing.T) {
	for _, tc := range []struct {
		before, after float64
		e             Evidence
		want          bool
	}{
		{1.20, 1.00, Evidence{}, true},                       // no count: the floor only
		{1.005, 1.0, Evidence{}, false},                      // under the floor
		{1.20, 1.00, Evidence{170, 1. / 3, 3}, false},        // 4.15 × √(1.2 × 2/3 / 170) = 0.285 > 0.2: noise
		{1.50, 1.00, Evidence{170, 1. / 3, 3}, true},         // a real hot spot: 0.318 < 0.5
		{1.20, 1.00, Evidence{100000, 1. / 3, 3}, true},      // plenty of requests: 0.011
		{1.02, 1.00, Evidence{1e9, 1. / 3, 3}, true},         // the floor, not the noise, decides
		{2.00, 1.00, Evidence{24, 1. / 2, 2}, true},          // every one of 24 requests on one of two tasks: 0.83 < 1
		{2.00, 1.00, Evidence{8, 1. / 2, 2}, false},          // 8 of 8 on one of two tasks happens by chance: 1.43 > 1
		{1.40, 1.30, Evidence{170, 0, 3}, false},             // share unknown: as if the hottest held a vanishing share
		{1.20, 1.00, Evidence{170, 1, 3}, false},             // a share out of range is unknown too
		{1.20, 1.00, Evidence{math.Inf(1), 1. / 3, 3}, true}, // the floor
	} {
		if got := SignificantGain(tc.before, tc.after, tc.e); got != tc.want {
			t.Errorf("SignificantGain(%v, %v, %+v) = %v, want %v", tc.before, tc.after, tc.e, got, tc.want)
		}
	}
}

// Tasks of exactly equal request rates, each window's counts drawn at
// random: the measured imbalance wanders, and the gate lets almost no
// window's "fix" through, for few tasks and many, at the demo's rate and
// at a hundred times it.
func TestSignificantGainIgnoresSamplingNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tasks := range []int{2, 3, 10, 100, 1000} {
		for _, perTask := range []float64{30, 170, 17000} {
			committed := 0
			const windows = 2000
			for range windows {
				counts := make([]float64, tasks)
				for i := range counts {
					counts[i] = poisson(rng, perTask)
				}
				hot, sum := 0, 0.0
				for i, c := range counts {
					sum += c
					if c > counts[hot] {
						hot = i
					}
				}
				before := counts[hot] / (sum / float64(tasks))
				// The best any decision could claim: perfectly even.
				if SignificantGain(before, 1, Evidence{Events: counts[hot], Share: 1 / float64(tasks), Tasks: tasks}) {
					committed++
				}
			}
			if committed > windows/100 {
				t.Errorf("%d tasks, %v requests per task and window: %d of %d windows of pure noise would commit", tasks, perTask, committed, windows)
			}
		}
	}
}

// A job whose load all lands on one task is rebalanced however few
// requests it sees, once they are more than chance could put on one
// task: two tasks and every request on the first, from 4 to 64 a window.
func TestSignificantGainOnExtremeSkew(t *testing.T) {
	first := 0
	for n := 4.0; n <= 64; n++ {
		if SignificantGain(2, 1, Evidence{Events: n, Share: 0.5, Tasks: 2}) {
			first = int(n)
			break
		}
	}
	// 2^-(n-1) is the chance that n requests of an even job all land on
	// one of two tasks: under 0.01% from n = 15.
	if first == 0 || first > 20 {
		t.Errorf("two tasks with every request on one: significant from %d requests a window (0: never up to 64), want at most 20", first)
	}
}

// poisson draws a Poisson count of mean m (normal approximation, m large).
func poisson(rng *rand.Rand, m float64) float64 {
	return max(0, m+rng.NormFloat64()*math.Sqrt(m))
}

func TestNoiseSigmas(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 3.89}, {1, 3.89}, {2, 4.06}, {3, 4.15}, {100, 4.89}, {10000, 5.73}} {
		if got := NoiseSigmas(tc.n); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("NoiseSigmas(%d) = %.3f, want %.2f", tc.n, got, tc.want)
		}
	}
}
