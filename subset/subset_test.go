package subset

import (
	"math"
	"slices"
	"testing"
)

// Subsets are part of the contract between clients: every client of a
// fleet must compute the same ones. These pinned values catch any change
// of the lots, the shuffles, the ring or the generator.
func TestRocksteadierPinned(t *testing.T) {
	for _, c := range []struct {
		frontend uint64
		n, k     int
		want     []int
	}{
		{13, 55, 10, []int{10, 50, 35, 0, 44, 22, 11, 33, 2, 45}},
		{19, 55, 10, []int{14, 39, 3, 40, 27, 17, 36, 9, 49, 24}},
	} {
		if got := Rocksteadier(c.frontend, c.n, c.k); !slices.Equal(got, c.want) {
			t.Errorf("Rocksteadier(%d, %d, %d) = %v, want %v", c.frontend, c.n, c.k, got, c.want)
		}
	}
}

func TestLotPermutations(t *testing.T) {
	for r, f := range lotRowFrontend {
		if lotStartRow[f] != uint8(r) {
			t.Fatalf("lotStartRow is not the inverse of lotRowFrontend at row %d", r)
		}
	}
}

// The article's Figure 4c: with six evenly spaced backends, frontend 1
// sees them in the order 1, 5, 3, 0, 4, 2.
func TestRingsteadyFigure(t *testing.T) {
	if got, want := Ringsteady(1, 6, 6), []int{1, 5, 3, 0, 4, 2}; !slices.Equal(got, want) {
		t.Fatalf("Ringsteady(1, 6, 6) = %v, want %v", got, want)
	}
}

func TestEdgeCases(t *testing.T) {
	for _, a := range Algorithms() {
		for _, c := range [][2]int{{0, 3}, {-1, 3}, {5, 0}, {5, -2}} {
			if got := a.Subset(7, c[0], c[1]); got != nil {
				t.Errorf("%s(7, %d, %d) = %v, want nil", a.Name, c[0], c[1], got)
			}
		}
		for _, n := range []int{1, 2, 9, 10, 11, 55, 700} {
			for _, f := range []uint64{0, 3, 12345, math.MaxUint64} {
				all := a.Subset(f, n, n+5)
				if len(all) != n {
					t.Fatalf("%s(%d, %d, %d) has %d entries, want all %d", a.Name, f, n, n+5, len(all), n)
				}
				sorted := slices.Sorted(slices.Values(all))
				for i, b := range sorted {
					if b != i {
						t.Fatalf("%s(%d, %d, k>n) = %v, not a permutation of 0..%d", a.Name, f, n, all, n-1)
					}
				}
			}
		}
	}
}

// Growing the subset only adds connections: each subset is a prefix of
// the next larger one. Deterministic subsetting is the exception.
func TestPrefixInSubsetSize(t *testing.T) {
	for _, a := range Algorithms() {
		if a.Name == "deterministic" {
			continue
		}
		for _, n := range []int{3, 10, 17, 55, 130} {
			for f := range uint64(40) {
				all := a.Subset(f, n, n)
				for k := 1; k < n; k++ {
					if got := a.Subset(f, n, k); !slices.Equal(got, all[:k]) {
						t.Fatalf("%s(%d, %d, %d) = %v, not a prefix of %v", a.Name, f, n, k, got, all)
					}
				}
			}
		}
	}
}

// With N = 10·B backends and k = B, every frontend reads one row across
// all lots: one backend from each lot.
func TestOneBackendPerLot(t *testing.T) {
	for b := 1; b <= 12; b++ {
		n := b * LotSize
		for f := range uint64(50) {
			lots := map[int]bool{}
			for _, x := range Rocksteadier(f, n, b) {
				lots[x/LotSize] = true
			}
			if len(lots) != b {
				t.Fatalf("Rocksteadier(%d, %d, %d) reaches %d lots, want %d", f, n, b, len(lots), b)
			}
		}
	}
}

// Ideal balance where the article's construction gives it. The LotSize
// frontends of a complete lot start on every row once, so over N = 10·B
// backends (no padding) each covers every backend floor(k/B) times and the
// first k mod B lots of its lot order once more. Hence:
//   - k a multiple of B and M a multiple of LotSize: ideal.
//   - M = N: the B frontend lots start at B different lots whenever the
//     ring's start ranks ceil(vdc(f)·B), f < B, differ, which holds for
//     B ≤ 10 and for every power of two: ideal.
func TestRocksteadierIdealBalance(t *testing.T) {
	for b := 1; b <= 12; b++ {
		n := b * LotSize
		for k := b; k < n; k += b {
			for m := LotSize; m <= 200; m += LotSize {
				if u := Utilization(Subsets(Rocksteadier, m, n, k), n); u != 1 {
					t.Errorf("M=%d N=%d k=%d: utilization %.3f, want 1", m, n, k, u)
				}
			}
		}
	}
	for _, b := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 32, 64} {
		n := b * LotSize
		for k := 1; k < n; k++ {
			if n > 100 && k > 12 && k%7 != 0 {
				continue // a sample of the larger cases keeps the test quick
			}
			if u := Utilization(Subsets(Rocksteadier, n, n, k), n); u != 1 {
				t.Errorf("M=N=%d k=%d: utilization %.3f, want 1", n, k, u)
			}
		}
	}
}

// Classic deterministic subsetting is ideal when k divides N and M fills
// whole rounds, and leaves out backends round-robin: with N=10, k=4 the
// first round avoids 0 and 1, the second 2 and 3.
func TestDeterministic(t *testing.T) {
	for _, c := range [][2]int{{12, 3}, {20, 5}, {30, 10}} {
		n, k := c[0], c[1]
		m := 7 * n / k
		if u := Utilization(Subsets(Deterministic, m, n, k), n); u != 1 {
			t.Errorf("M=%d N=%d k=%d: utilization %.3f, want 1", m, n, k, u)
		}
	}
	for f, avoid := range [][]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 5}} {
		for _, b := range Deterministic(uint64(f), 10, 4) {
			if slices.Contains(avoid, b) {
				t.Errorf("Deterministic(%d, 10, 4) uses left-over backend %d", f, b)
			}
		}
	}
}

// Coordinating frontends by number balances connections better than
// choosing at random, scenario by scenario and on average.
func TestRocksteadierBeatsRandomOnBalance(t *testing.T) {
	var rock, rnd float64
	worse := 0
	grid := Grid()
	for _, s := range grid {
		r := Utilization(Subsets(Rocksteadier, s.Frontends, s.Backends, s.SubsetSize), s.Backends)
		x := Utilization(Subsets(Random, s.Frontends, s.Backends, s.SubsetSize), s.Backends)
		rock += r
		rnd += x
		if r < x {
			worse++
			t.Logf("M=%d N=%d k=%d: rocksteadier %.3f < random %.3f", s.Frontends, s.Backends, s.SubsetSize, r, x)
		}
	}
	rock /= float64(len(grid))
	rnd /= float64(len(grid))
	if rock < rnd+0.15 {
		t.Errorf("mean utilization: rocksteadier %.3f, random %.3f; want rocksteadier ahead by 0.15", rock, rnd)
	}
	if worse > len(grid)/20 {
		t.Errorf("rocksteadier balances worse than random in %d of %d scenarios, want at most 5%%", worse, len(grid))
	}
}

// No algorithm here has frontend churn: a subset depends on the frontend's
// number, N and k only, never on how many frontends there are.
func TestNoFrontendChurn(t *testing.T) {
	s := Scenario{Frontends: 37, Backends: 23, SubsetSize: 4}
	for _, a := range Algorithms() {
		if c := Measure(a.Subset, s).FrontendChurn; c != 0 {
			t.Errorf("%s: frontend churn %.3f, want 0", a.Name, c)
		}
	}
}

// Adding one backend (appending index N) moves only about the new
// backend's fair share of connections, M·k/(N+1).
//
// While the number of lots stays the same (N not a multiple of LotSize)
// the lot orders and shuffles are unchanged: a padding cell of the last
// lot becomes real, and a frontend whose reading passes that cell takes
// the new backend in place of its last one. So each frontend drops at most
// one connection and the connections moved are exactly the new backend's,
// which balance bounds near the fair share: we allow 1.5 times
// ceil(M·k/(N+1)), plus one per frontend lot for scenarios too small to
// average out.
//
// When N is a multiple of LotSize a lot opens and the lot ring is
// rescaled, which can shift a frontend lot's order by one lot and insert
// the new lot into it: a frontend drops at most two connections, and the
// total may exceed the fair share, up to 1/k of all connections. Both are
// asserted.
func TestAddBackendMovesFairShare(t *testing.T) {
	for n := 2; n <= 130; n++ {
		for _, k := range []int{1, 2, 3, 5, 10, 20} {
			if k >= n {
				continue
			}
			for _, m := range []int{1, 7, 10, 33, 100, 250} {
				before := Subsets(Rocksteadier, m, n, k)
				after := Subsets(Rocksteadier, m, n+1, k)
				moved, perFrontend := 0, 0
				for i := range before {
					c := Churn(before[i:i+1], after[i:i+1], nil)
					moved += c
					perFrontend = max(perFrontend, c)
				}
				limit := 1
				if n%LotSize == 0 {
					limit = 2
				}
				if perFrontend > limit {
					t.Errorf("M=%d N=%d→%d k=%d: a frontend drops %d connections, want at most %d", m, n, n+1, k, perFrontend, limit)
				}
				if n%LotSize == 0 {
					if moved > m {
						t.Errorf("M=%d N=%d→%d k=%d (new lot): %d connections moved, want at most one per frontend, %d", m, n, n+1, k, moved, m)
					}
					continue
				}
				if got := Connections(after, n+1)[n]; moved != got {
					t.Errorf("M=%d N=%d→%d k=%d: %d connections moved but the new backend has %d", m, n, n+1, k, moved, got)
				}
				fair := math.Ceil(float64(m*k) / float64(n+1))
				if bound := int(1.5*fair) + (m+LotSize-1)/LotSize; moved > bound {
					t.Errorf("M=%d N=%d→%d k=%d: %d connections moved, want at most %d (fair share %.0f)", m, n, n+1, k, moved, bound, fair)
				}
			}
		}
	}
}

// Removing the last backend moves its connections and, within a lot,
// nothing else: the subsets are those of adding it, read backwards.
func TestRemoveLastBackend(t *testing.T) {
	for _, s := range Grid() {
		if (s.Backends-1)%LotSize == 0 {
			continue // removing it closes a lot
		}
		before := Subsets(Rocksteadier, s.Frontends, s.Backends, s.SubsetSize)
		after := Subsets(Rocksteadier, s.Frontends, s.Backends-1, s.SubsetSize)
		if moved, had := Churn(before, after, nil), Connections(before, s.Backends)[s.Backends-1]; moved != had {
			t.Errorf("%+v: removing the last backend moved %d connections, it had %d", s, moved, had)
		}
	}
}

// Rocksteadier moves far fewer connections than the baselines that
// reshuffle on every change of N.
func TestRocksteadierChurnBelowBaselines(t *testing.T) {
	var rock, det, rnd float64
	for _, s := range Grid() {
		for _, c := range []struct {
			f   Func
			sum *float64
		}{{Rocksteadier, &rock}, {Deterministic, &det}, {Random, &rnd}} {
			before := Subsets(c.f, s.Frontends, s.Backends, s.SubsetSize)
			after := Subsets(c.f, s.Frontends, s.Backends+1, s.SubsetSize)
			*c.sum += float64(Churn(before, after, nil)) / float64(s.Frontends*s.SubsetSize)
		}
	}
	if rock*4 > det || rock*4 > rnd {
		t.Errorf("summed add-backend churn: rocksteadier %.2f, deterministic %.2f, random %.2f; want rocksteadier under a quarter of both", rock, det, rnd)
	}
}

func TestMeasureHelpers(t *testing.T) {
	subsets := [][]int{{0, 1}, {1, 2}, {1, 0}}
	if got := Connections(subsets, 4); !slices.Equal(got, []int{2, 3, 1, 0}) {
		t.Errorf("Connections = %v", got)
	}
	// 6 connections over 4 backends: ideal max 2, actual max 3.
	if got := Utilization(subsets, 4); got != 2.0/3 {
		t.Errorf("Utilization = %v, want 2/3", got)
	}
	// Two distinct sets out of min(3, C(4,2)=6).
	if got := Diversity(subsets, 4); got != 2.0/3 {
		t.Errorf("Diversity = %v, want 2/3", got)
	}
	if got := Churn(subsets, [][]int{{0, 3}, {1, 2}, {2, 3}}, nil); got != 3 {
		t.Errorf("Churn = %d, want 3", got)
	}
	// Blocks of ⌊10/3⌋ = 3 indices: {4, 5, 6} holds all three.
	if got := SpreadOf([]int{4, 5, 6}, 10); got != 3 {
		t.Errorf("SpreadOf = %d, want 3", got)
	}
	if got := SpreadOf([]int{0, 3, 6}, 10); got != 1 {
		t.Errorf("SpreadOf = %d, want 1", got)
	}
}

// When a backend fails and its frontends each take the next backend in
// their preference order, Rocksteadier's frontends scatter over the
// survivors about as well as random subsetting's do, and far better than
// Ringsteady's, whose frontends with the same start all move to the same
// next backend.
func TestFailoverSpreads(t *testing.T) {
	var rock, ring, rnd float64
	grid := Grid()
	for _, s := range grid {
		m, n, k := s.Frontends, s.Backends, s.SubsetSize
		rock += Failover(Rocksteadier, m, n, k, Subsets(Rocksteadier, m, n, k))
		ring += Failover(Ringsteady, m, n, k, Subsets(Ringsteady, m, n, k))
		rnd += Failover(Random, m, n, k, Subsets(Random, m, n, k))
	}
	g := float64(len(grid))
	rock, ring, rnd = rock/g, ring/g, rnd/g
	if rock > rnd || rock*1.5 > ring {
		t.Errorf("mean failover concentration: rocksteadier %.2f, random %.2f, ringsteady %.2f; want rocksteadier at most random's and under 2/3 of ringsteady's", rock, rnd, ring)
	}
}
