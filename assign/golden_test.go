package assign

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/decisions.golden from the current code")

// goldenCase is one deterministic decision whose full output is pinned.
type goldenCase struct {
	name string
	run  func() (string, error)
}

// digest is hashDecision of a valid result.
func digest(a *Assignment, d Decision, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if err := a.Validate(); err != nil {
		return "", fmt.Errorf("invalid result: %w", err)
	}
	return hashDecision(a, d), nil
}

// goldenCases covers WeightedMove over several seeds, job sizes,
// redundancies, load shapes (none, power-law ranges, hot keys, both) and
// membership changes (none, departures, joins, both), each decided twice in
// a row so the second decision starts from a refined assignment; and
// Rebalance over the same membership changes.
func goldenCases() []goldenCase {
	var cases []goldenCase
	for _, n := range []int{10, 100, 1000} {
		perTask := map[int]int{10: 40, 100: 12, 1000: 3}[n]
		for _, seed := range []uint64{1, 2, 3} {
			for _, r := range []int{1, 3, 10} {
				cfg := Config{MinRedundancy: r, MaxRedundancy: r}
				if seed%2 == 1 {
					cfg = Config{MinRedundancy: 1, MaxRedundancy: r}
				}
				if n >= 100 {
					// Fewer slices per task keep the large cases quick.
					cfg.MinSlicesPerTask, cfg.MaxSlicesPerTask = 8, 16
				}
				all := testTasks(n + n/5 + 1)
				tasks := all[:n]
				memberships := []struct {
					name string
					live []Task
				}{
					{"same", tasks},
					{"departed", departAll(tasks, seed)},
					{"joined", all},
					{"both", departAll(all, seed+7)},
				}
				loads := []struct {
					name string
					load func(rng *rand.Rand, slices int) Load
				}{
					{"none", func(*rand.Rand, int) Load { return nil }},
					{"power", func(rng *rand.Rand, s int) Load { return powerLoad(rng, s, 1.5) }},
					{"hot", func(rng *rand.Rand, s int) Load { return pointLoad(rng, 50+s/10, 1.2) }},
					{"both", func(rng *rand.Rand, s int) Load {
						return MergeLoads(powerLoad(rng, s/3+1, 1.1), pointLoad(rng, 20, 1.5))
					}},
				}
				for _, m := range memberships {
					for _, l := range loads {
						name := fmt.Sprintf("n=%d/seed=%d/r=%d/%s/%s", n, seed, r, m.name, l.name)
						cases = append(cases, goldenCase{name: "weighted/" + name, run: func() (string, error) {
							rng := rand.New(rand.NewPCG(seed, uint64(n*100+r)))
							prev := scattered(rng, tasks, perTask, r)
							load := l.load(rng, len(prev.Slices))
							next, d, err := NewWeightedMove().Decide("j", prev, m.live, load, cfg)
							first, err := digest(next, d, err)
							if err != nil {
								return "", err
							}
							// A second window under the same load starts
							// from the refined, partly replicated result.
							second, err := digest(NewWeightedMove().Decide("j", next, m.live, load, cfg))
							return first + "+" + second[:16], err
						}})
					}
					name := fmt.Sprintf("n=%d/seed=%d/r=%d/%s", n, seed, r, m.name)
					cases = append(cases, goldenCase{name: "rebalance/" + name, run: func() (string, error) {
						rng := rand.New(rand.NewPCG(seed, uint64(n*100+r)))
						prev := scattered(rng, tasks, perTask, r)
						return digest(Rebalance(prev, m.live, cfg))
					}})
				}
			}
		}
		// First decisions: no previous assignment, and none of its tasks live.
		for _, seed := range []uint64{1, 2} {
			tasks := testTasks(2 * n)
			cases = append(cases, goldenCase{name: fmt.Sprintf("weighted/n=%d/seed=%d/first", n, seed), run: func() (string, error) {
				rng := rand.New(rand.NewPCG(seed, uint64(n)))
				return digest(NewWeightedMove().Decide("j", nil, tasks[:n], pointLoad(rng, 200, 1.3), Config{MinRedundancy: 1, MaxRedundancy: 3}))
			}})
			cases = append(cases, goldenCase{name: fmt.Sprintf("weighted/n=%d/seed=%d/nolive", n, seed), run: func() (string, error) {
				rng := rand.New(rand.NewPCG(seed, uint64(n)))
				prev := scattered(rng, tasks[:n], 5, 2)
				return digest(NewWeightedMove().Decide("j", prev, tasks[n:], powerLoad(rng, 500, 1.5), Config{MinRedundancy: 2, MaxRedundancy: 2}))
			}})
		}
	}
	return cases
}

// departAll drops about a fifth of tasks, chosen by seed.
func departAll(tasks []Task, seed uint64) []Task {
	rng := rand.New(rand.NewPCG(seed, 99))
	var out []Task
	for _, t := range tasks {
		if rng.IntN(5) != 0 {
			out = append(out, t)
		}
	}
	return out
}

// hashDecision is a digest of everything a decision returns.
func hashDecision(a *Assignment, d Decision) string {
	h := sha256.New()
	writeAssignment(h, a)
	fmt.Fprintf(h, "changed=%t churn=%x moves=%d\n", d.Changed, math.Float64bits(d.Churn), len(d.Moves))
	for _, m := range d.Moves {
		fmt.Fprintf(h, "%d %x %x %q %q %q\n", m.Kind, m.Start, m.End, m.From, m.To, m.Reason)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeAssignment(h hash.Hash, a *Assignment) {
	fmt.Fprintf(h, "job=%q gen=%d tasks=%d slices=%d\n", a.Job, a.Generation, len(a.Tasks), len(a.Slices))
	for _, t := range a.Tasks {
		fmt.Fprintf(h, "%q %q\n", t.Name, t.Addr)
	}
	for _, s := range a.Slices {
		fmt.Fprintf(h, "%x %x %q\n", s.Start, s.End, s.Tasks)
	}
}

// TestDecisionsGolden pins the full output of WeightedMove and Rebalance
// over deterministic inputs, so that changes made for speed cannot change
// a decision. Regenerate with -update-golden only when a decision is meant
// to change.
//
// Its cases are jobs too small for the parts that run on goroutines of
// their own (inParts): one goroutine's computation, which the race
// detector only slows tenfold (four minutes of CI). It runs
// without the detector, in scripts/test.sh's pass of its own.
func TestDecisionsGolden(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without the race detector (scripts/test.sh): one goroutine's computation, ten times slower under it")
	}
	path := filepath.Join("testdata", "decisions.golden")
	got := map[string]string{}
	var order []string
	for _, c := range goldenCases() {
		sum, err := c.run()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got[c.name] = sum
		order = append(order, c.name)
	}
	if *updateGolden {
		var b strings.Builder
		for _, name := range order {
			fmt.Fprintf(&b, "%s %s\n", name, got[name])
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v; generate it with go test -run TestDecisionsGolden -update-golden", err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, sum, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		want[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Errorf("%s has %d cases, the test %d", path, len(want), len(got))
	}
	for _, name := range order {
		if want[name] != got[name] {
			t.Errorf("%s: decision changed (digest %s, want %s)", name, got[name][:12], want[name])
		}
	}
}
