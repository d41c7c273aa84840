package loadshift

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// PowerLaw samples ranks 0..n-1 where rank r has weight 1/(r+1)^exponent.
// It is immutable and safe to share.
type PowerLaw struct {
	cdf []float64 // cdf[r] = P(rank <= r); the last is exactly 1
}

// NewPowerLaw returns the sampler of n ranks with the given exponent.
func NewPowerLaw(n int, exponent float64) (*PowerLaw, error) {
	if n < 1 {
		return nil, fmt.Errorf("loadshift: power law over %d keys; use at least 1 key", n)
	}
	if !(exponent >= 0) || math.IsInf(exponent, 0) {
		return nil, fmt.Errorf("loadshift: power-law exponent %g; use a finite exponent >= 0 (1.5 in the paper)", exponent)
	}
	p := &PowerLaw{cdf: make([]float64, n)}
	sum := 0.0
	for r := range n {
		sum += math.Pow(float64(r+1), -exponent)
		p.cdf[r] = sum
	}
	for r := range p.cdf {
		p.cdf[r] /= sum
	}
	p.cdf[n-1] = 1
	return p, nil
}

// Share returns the fraction of all load that rank r carries.
func (p *PowerLaw) Share(r int) float64 {
	if r == 0 {
		return p.cdf[0]
	}
	return p.cdf[r] - p.cdf[r-1]
}

// Len is the number of ranks.
func (p *PowerLaw) Len() int { return len(p.cdf) }

// Sample draws a rank.
func (p *PowerLaw) Sample(rng *rand.Rand) int {
	u := rng.Float64()
	r := sort.SearchFloat64s(p.cdf, u)
	// u == cdf[r] exactly belongs to rank r; SearchFloat64s finds the
	// first cdf >= u, which is that rank. u < 1 keeps r in range.
	return min(r, len(p.cdf)-1)
}
