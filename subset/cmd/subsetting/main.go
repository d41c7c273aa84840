// Command subsetting prints the tables of docs/subsetting.md: Rocksteadier
// subsetting against Ringsteady, deterministic and random subsetting over a
// grid of frontend counts, backend counts and subset sizes. The output is
// markdown and deterministic.
//
//	go run ./subset/cmd/subsetting
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/slicerd/slicerd/subset"
)

func main() {
	w := bufio.NewWriter(os.Stdout)
	report(w)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "subsetting:", err)
		os.Exit(1)
	}
}

type result struct {
	s subset.Scenario
	p subset.Properties
}

// stat collects values for a mean and a worst case.
type stat struct {
	sum, lo, hi float64
	n           int
}

func (s *stat) add(v float64) {
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	if s.n == 0 || v > s.hi {
		s.hi = v
	}
	s.sum += v
	s.n++
}

func (s stat) mean() float64 { return s.sum / float64(max(1, s.n)) }

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

func report(w *bufio.Writer) {
	algs := subset.Algorithms()
	grid := subset.Grid()
	results := make([][]result, len(algs))
	for i, a := range algs {
		for _, s := range grid {
			results[i] = append(results[i], result{s, subset.Measure(a.Subset, s)})
		}
	}

	fmt.Fprintf(w, "Grid: %d scenarios, M ∈ {3, 10, 30, 100, 300, 1000} frontends, N ∈ {3, 5, 8, 10, 12, 20, 25, 37, 55, 100, 150} backends, k ∈ {2, 3, 5, 10, 20}, with k ≤ N−2 and M·k > N. Lot size L = %d.\n\n", len(grid), subset.LotSize)

	fmt.Fprintln(w, "### Summary over the grid (mean / worst)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| algorithm | utilization | diversity | add backend N | remove backend N−1 | remove backend N/2 (renumbers) | k → k+1 | add a frontend | spread | failover |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	var minAdd, minRemove stat
	for _, r := range results[0] {
		minAdd.add(1 / float64(r.s.Backends+1))
		minRemove.add(1 / float64(r.s.Backends))
	}
	for i, a := range algs {
		var u, d, add, rm, mid, ks, fe, sp, fo stat
		worstSpread := 0
		for _, r := range results[i] {
			u.add(r.p.Utilization)
			d.add(r.p.Diversity)
			add.add(r.p.BackendAddChurn)
			rm.add(r.p.BackendRemoveChurn)
			mid.add(r.p.BackendRemoveMiddleChurn)
			ks.add(r.p.SubsetSizeChurn)
			fe.add(r.p.FrontendChurn)
			sp.add(r.p.Spread)
			fo.add(r.p.Failover)
			worstSpread = max(worstSpread, r.p.WorstSpread)
		}
		fmt.Fprintf(w, "| %s | %.3f / %.3f | %.3f / %.3f | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s | %.2f / %d | %.2f / %.2f |\n",
			a.Name, u.mean(), u.lo, d.mean(), d.lo, pct(add.mean()), pct(add.hi), pct(rm.mean()), pct(rm.hi),
			pct(mid.mean()), pct(mid.hi), pct(ks.mean()), pct(ks.hi), pct(fe.mean()), pct(fe.hi), sp.mean(), worstSpread, fo.mean(), fo.hi)
	}
	fmt.Fprintf(w, "| *least possible* | 1 | 1 | %s / %s | %s / %s | %s / %s | 0%% | 0%% | 1 | 1 |\n\n",
		pct(minAdd.mean()), pct(minAdd.hi), pct(minRemove.mean()), pct(minRemove.hi), pct(minRemove.mean()), pct(minRemove.hi))

	fmt.Fprintln(w, "### Connection balance by frontends per backend (achievable utilization, mean / worst)")
	fmt.Fprintln(w)
	buckets := []struct {
		name   string
		lo, hi float64
	}{{"M/N < 1", 0, 1}, {"1 ≤ M/N < 4", 1, 4}, {"4 ≤ M/N < 16", 4, 16}, {"M/N ≥ 16", 16, 1e18}}
	fmt.Fprint(w, "| M/N | scenarios |")
	for _, a := range algs {
		fmt.Fprintf(w, " %s |", a.Name)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("---|", len(algs)))
	for _, b := range buckets {
		var cells []string
		count := 0
		for i := range algs {
			var u stat
			for _, r := range results[i] {
				ratio := float64(r.s.Frontends) / float64(r.s.Backends)
				if ratio >= b.lo && ratio < b.hi {
					u.add(r.p.Utilization)
				}
			}
			count = u.n
			cells = append(cells, fmt.Sprintf("%.3f / %.3f", u.mean(), u.lo))
		}
		fmt.Fprintf(w, "| %s | %d |", b.name, count)
		for _, c := range cells {
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### Adding one backend: within the last lot or opening a new lot")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| algorithm | N before | scenarios | connections moved (mean / worst) | least possible (mean) | most moved by one frontend |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for i, a := range algs {
		for _, newLot := range []bool{false, true} {
			var moved, least stat
			worst := 0
			for _, r := range results[i] {
				if (r.s.Backends%subset.LotSize == 0) != newLot {
					continue
				}
				moved.add(r.p.BackendAddChurn)
				least.add(1 / float64(r.s.Backends+1))
				worst = max(worst, r.p.BackendAddWorst)
			}
			where := "not a multiple of L"
			if newLot {
				where = "a multiple of L"
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s / %s | %s | %d |\n", a.Name, where, moved.n, pct(moved.mean()), pct(moved.hi), pct(least.mean()), worst)
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "### Selected scenarios")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| M | N | k | algorithm | utilization | diversity | add backend | remove last | remove middle | k → k+1 | spread (mean / worst) | failover |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range []subset.Scenario{
		{Frontends: 100, Backends: 5, SubsetSize: 2},
		{Frontends: 1000, Backends: 12, SubsetSize: 3},
		{Frontends: 300, Backends: 20, SubsetSize: 3},
		{Frontends: 100, Backends: 10, SubsetSize: 4},
		{Frontends: 50, Backends: 55, SubsetSize: 10},
		{Frontends: 1000, Backends: 100, SubsetSize: 10},
	} {
		for _, a := range algs {
			p := subset.Measure(a.Subset, s)
			fmt.Fprintf(w, "| %d | %d | %d | %s | %.3f | %.3f | %s | %s | %s | %s | %.2f / %d | %.2f |\n",
				s.Frontends, s.Backends, s.SubsetSize, a.Name, p.Utilization, p.Diversity,
				pct(p.BackendAddChurn), pct(p.BackendRemoveChurn), pct(p.BackendRemoveMiddleChurn),
				pct(p.SubsetSizeChurn), p.Spread, p.WorstSpread, p.Failover)
		}
	}
}
