package assign

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestSignificantGain(t *testing.T) {
	for _, tc := range []struct {
		before, after, events float64
		want                  bool
	}{
		{1.20, 1.00, 0, true},      // no count: the floor only
		{1.005, 1.0, 0, false},     // under the floor
		{1.20, 1.00, 170, false},   // 3 × 1.2/√170 = 0.276 > 0.2: noise
		{1.50, 1.00, 170, true},    // a real hot spot
		{1.20, 1.00, 100000, true}, // plenty of requests: 0.011
		{1.02, 1.00, 1e9, true},    // the floor, not the noise, decides
	} {
		if got := SignificantGain(tc.before, tc.after, tc.events); got != tc.want {
			t.Errorf("SignificantGain(%v, %v, %v) = %v, want %v", tc.before, tc.after, tc.events, got, tc.want)
		}
	}
}

// Three tasks of exactly equal request rates, each window's counts drawn
// at random: the measured imbalance wanders, and the gate lets almost no
// window's "fix" through, at the demo's rate and at a hundred times it.
func TestSignificantGainIgnoresSamplingNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, perTask := range []float64{170, 17000} {
		committed := 0
		const windows = 2000
		for range windows {
			counts := make([]float64, 3)
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
			before := counts[hot] / (sum / 3)
			// The best any decision could claim: perfectly even.
			if SignificantGain(before, 1, counts[hot]) {
				committed++
			}
		}
		if committed > windows/100 {
			t.Errorf("%v requests per task and window: %d of %d windows of pure noise would commit", perTask, committed, windows)
		}
	}
}

// poisson draws a Poisson count of mean m (normal approximation, m large).
func poisson(rng *rand.Rand, m float64) float64 {
	return max(0, m+rng.NormFloat64()*math.Sqrt(m))
}
