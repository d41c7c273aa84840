package subset

import (
	"math"
	"slices"
)

// Func is a subsetting algorithm: the k backends (indices 0..n-1) of
// frontend number frontend, in preference order.
type Func func(frontend uint64, n, k int) []int

// Algorithm names a subsetting algorithm for measurements.
type Algorithm struct {
	Name   string
	Subset Func
}

// Algorithms returns the algorithms this package implements, Rocksteadier
// first and then the baselines.
func Algorithms() []Algorithm {
	return []Algorithm{
		{"rocksteadier", Rocksteadier},
		{"ringsteady", Ringsteady},
		{"deterministic", Deterministic},
		{"random", Random},
	}
}

// Scenario is a frontend job of Frontends tasks numbered 0..Frontends-1,
// each connecting to SubsetSize of Backends backends.
type Scenario struct {
	Frontends, Backends, SubsetSize int
}

// Properties are the measured behaviours of one algorithm in one scenario.
// Churn is the fraction of the scenario's M·k connections that a change
// makes frontends drop (each one dropped is replaced by a new one, except
// where the subset shrinks).
type Properties struct {
	// Utilization is the achievable utilization: the most connections any
	// backend would have under an ideal assignment, ceil(M·k/N), divided
	// by the most any backend has. 1 is ideal; a backend provisioned for
	// the busiest one is this fraction used on average.
	Utilization float64
	// Diversity is the number of distinct subsets (as sets) divided by the
	// most there could be, min(M, C(N, k)). 1 is ideal.
	Diversity float64
	// FrontendChurn is the churn of the existing frontends when one
	// frontend is added (read backwards: when the last one is removed).
	// 0 is ideal.
	FrontendChurn float64
	// BackendAddChurn is the churn when backend N is appended. The new
	// backend's fair share, 1/(N+1) of the connections, is the least any
	// balanced algorithm must move.
	BackendAddChurn float64
	// BackendAddWorst is the most connections one frontend drops when
	// backend N is appended.
	BackendAddWorst int
	// BackendRemoveChurn is the churn when the last backend (index N-1) is
	// removed. Its connections, about 1/N of them, have to move.
	BackendRemoveChurn float64
	// BackendRemoveMiddleChurn is the churn when backend N/2 is removed
	// instead, so that every higher index shifts down by one: what removing
	// a name from the middle of a sorted list does.
	BackendRemoveMiddleChurn float64
	// SubsetSizeChurn is the churn when the subset size grows from k to
	// k+1. 0 is ideal.
	SubsetSizeChurn float64
	// Spread is the mean, over frontends, of the largest number of the
	// frontend's backends within one block of max(1, ⌊N/k⌋) consecutive
	// indices: how many of its connections a rolling restart of that many
	// backends at a time takes down at once. 1 is ideal.
	Spread float64
	// WorstSpread is the same for the worst frontend.
	WorstSpread int
	// Failover is how unevenly a failed backend's connections land on the
	// others when every frontend that used it takes the next backend in its
	// preference order (its subset for k = N) instead: the most extra
	// connections one surviving backend gets, divided by the even share
	// ceil(connections of the failed one / (N-1)). The worst of backends 0,
	// N/2 and N-1 failing. 1 is ideal.
	Failover float64
}

// Measure computes the properties of f in scenario s. It needs
// Backends >= 2 and 1 <= SubsetSize < Backends.
func Measure(f Func, s Scenario) Properties {
	m, n, k := s.Frontends, s.Backends, s.SubsetSize
	conns := float64(m * k)
	base := Subsets(f, m, n, k)
	p := Properties{
		Utilization: Utilization(base, n),
		Diversity:   Diversity(base, n),
	}
	p.FrontendChurn = float64(Churn(base, Subsets(f, m+1, n, k)[:m], nil)) / conns
	added := Subsets(f, m, n+1, k)
	p.BackendAddChurn = float64(Churn(base, added, nil)) / conns
	for i := range base {
		p.BackendAddWorst = max(p.BackendAddWorst, Churn(base[i:i+1], added[i:i+1], nil))
	}
	removed := Subsets(f, m, n-1, k)
	p.BackendRemoveChurn = float64(Churn(base, removed, nil)) / conns
	mid := n / 2
	p.BackendRemoveMiddleChurn = float64(Churn(base, removed, func(i int) int {
		if i >= mid {
			return i + 1
		}
		return i
	})) / conns
	p.SubsetSizeChurn = float64(Churn(base, Subsets(f, m, n, k+1), nil)) / conns
	total := 0
	for _, sub := range base {
		w := SpreadOf(sub, n)
		total += w
		p.WorstSpread = max(p.WorstSpread, w)
	}
	p.Spread = float64(total) / float64(m)
	p.Failover = Failover(f, m, n, k, base)
	return p
}

// Failover returns Properties.Failover for frontends 0..m-1 whose subsets
// are base.
func Failover(f Func, m, n, k int, base [][]int) float64 {
	orders := Subsets(f, m, n, n)
	worst := 0.0
	for _, failed := range []int{0, n / 2, n - 1} {
		extra := make([]int, n)
		lost := 0
		for i, sub := range base {
			if !slices.Contains(sub, failed) {
				continue
			}
			lost++
			for _, b := range orders[i] {
				if b != failed && !slices.Contains(sub, b) {
					extra[b]++
					break
				}
			}
		}
		if lost == 0 {
			continue
		}
		even := (lost + n - 2) / (n - 1)
		worst = max(worst, float64(slices.Max(extra))/float64(even))
	}
	return worst
}

// Subsets returns the subsets of frontends 0..m-1.
func Subsets(f Func, m, n, k int) [][]int {
	out := make([][]int, m)
	for i := range out {
		out[i] = f(uint64(i), n, k)
	}
	return out
}

// Connections returns the number of frontends connected to each backend.
func Connections(subsets [][]int, n int) []int {
	c := make([]int, n)
	for _, s := range subsets {
		for _, b := range s {
			c[b]++
		}
	}
	return c
}

// Utilization returns the achievable utilization of subsets over n
// backends: ceil(total/n) / max connections of a backend.
func Utilization(subsets [][]int, n int) float64 {
	c := Connections(subsets, n)
	total := 0
	for _, x := range c {
		total += x
	}
	hi := slices.Max(c)
	if hi == 0 {
		return 1
	}
	return float64((total+n-1)/n) / float64(hi)
}

// Diversity returns the number of distinct subsets (as sets) divided by
// min(len(subsets), C(n, k)), k being the size of the first subset.
func Diversity(subsets [][]int, n int) float64 {
	if len(subsets) == 0 {
		return 1
	}
	seen := make(map[string]struct{}, len(subsets))
	for _, s := range subsets {
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		key := make([]byte, 0, 4*len(sorted))
		for _, b := range sorted {
			key = append(key, byte(b), byte(b>>8), byte(b>>16), byte(b>>24))
		}
		seen[string(key)] = struct{}{}
	}
	possible := min(float64(len(subsets)), binomial(n, len(subsets[0])))
	return float64(len(seen)) / possible
}

// binomial returns C(n, k) as a float (+Inf past float range).
func binomial(n, k int) float64 {
	r := 1.0
	for i := range k {
		r = r * float64(n-i) / float64(i+1)
	}
	if math.IsInf(r, 0) {
		return math.Inf(1)
	}
	return math.Round(r)
}

// Churn returns how many connections frontends drop going from before to
// after (same frontends, same order): the backends in a frontend's before
// subset that are not in its after subset. rename maps an index of after
// to the index the same backend had before (nil when indices are stable).
func Churn(before, after [][]int, rename func(int) int) int {
	dropped := 0
	for i, old := range before {
		now := make(map[int]bool, len(after[i]))
		for _, b := range after[i] {
			if rename != nil {
				b = rename(b)
			}
			now[b] = true
		}
		for _, b := range old {
			if !now[b] {
				dropped++
			}
		}
	}
	return dropped
}

// SpreadOf returns the largest number of sub's backends within one block
// of max(1, ⌊n/len(sub)⌋) consecutive indices of 0..n-1.
func SpreadOf(sub []int, n int) int {
	if len(sub) == 0 {
		return 0
	}
	w := max(1, n/len(sub))
	sorted := slices.Clone(sub)
	slices.Sort(sorted)
	worst, lo := 0, 0
	for hi, b := range sorted {
		for b-sorted[lo] >= w {
			lo++
		}
		worst = max(worst, hi-lo+1)
	}
	return worst
}

// Grid returns the scenarios the comparison table covers: frontend jobs of
// 3 to 1,000 tasks, backend jobs of 3 to 150 and subset sizes of 2 to 20,
// keeping those where subsetting means something (k <= N-2) and where
// there are more connections than backends (M·k > N), as the article's
// Figure 2 does.
func Grid() []Scenario {
	var out []Scenario
	for _, n := range []int{3, 5, 8, 10, 12, 20, 25, 37, 55, 100, 150} {
		for _, m := range []int{3, 10, 30, 100, 300, 1000} {
			for _, k := range []int{2, 3, 5, 10, 20} {
				if k <= n-2 && m*k > n {
					out = append(out, Scenario{Frontends: m, Backends: n, SubsetSize: k})
				}
			}
		}
	}
	return out
}
