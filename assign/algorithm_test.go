package assign

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestAlgorithmByName(t *testing.T) {
	for _, name := range AlgorithmNames() {
		a, err := AlgorithmByName(name)
		if err != nil {
			t.Fatalf("AlgorithmByName(%q): %v", name, err)
		}
		if a.Name() != name {
			t.Errorf("AlgorithmByName(%q).Name() = %q", name, a.Name())
		}
	}
	if _, err := AlgorithmByName("round-robin"); !errors.Is(err, ErrUnknownAlgorithm) {
		t.Errorf("unknown name: err = %v, want ErrUnknownAlgorithm", err)
	}
}

func algorithms() []Algorithm {
	return []Algorithm{NewWeightedMove(), NewStatic(), NewConsistentHash()}
}

// TestDecideProperties runs every algorithm through joins, departures and
// load changes and checks each result: valid and covering (mustDecide),
// redundancy within bounds, and the same result for a shuffled task list.
func TestDecideProperties(t *testing.T) {
	for _, alg := range algorithms() {
		for _, r := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/r%d", alg.Name(), r), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(r), 3))
				cfg := Config{MinRedundancy: r, MaxRedundancy: r + 1}
				all := testTasks(12)
				live := slices.Clone(all[:6])
				var prev *Assignment
				for step := range 12 {
					switch step % 4 {
					case 1:
						live = append(live, all[6+step/4])
					case 3:
						i := rng.IntN(len(live))
						live = slices.Delete(live, i, i+1)
					}
					var load Load
					if step%3 != 0 {
						load = powerLoad(rng, 500, 1.2)
					}
					next, d := mustDecide(t, alg, prev, live, load, cfg)
					want := min(r, len(live))
					for _, s := range next.Slices {
						if len(s.Tasks) < want || len(s.Tasks) > cfg.MaxRedundancy {
							t.Fatalf("step %d: slice %v has %d tasks, want [%d, %d]", step, s, len(s.Tasks), want, cfg.MaxRedundancy)
						}
						for _, name := range s.Tasks {
							if !slices.ContainsFunc(live, func(x Task) bool { return x.Name == name }) {
								t.Fatalf("step %d: slice names %q, which is not live", step, name)
							}
						}
					}
					shuffled := slices.Clone(live)
					rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
					again, d2 := mustDecide(t, alg, prev, shuffled, load, cfg)
					if !Equal(next, again) || !slices.Equal(d.Moves, d2.Moves) || d.Churn != d2.Churn {
						t.Fatalf("step %d: a shuffled task list gave another decision", step)
					}
					if prev != nil && d.Churn != Churn(prev, next) {
						t.Fatalf("step %d: Decision.Churn %g, Churn %g", step, d.Churn, Churn(prev, next))
					}
					prev = next
				}
			})
		}
	}
}

func TestDecideRejects(t *testing.T) {
	tasks := testTasks(3)
	prev, err := Initial("j", tasks, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range algorithms() {
		if _, _, err := alg.Decide("j", prev, nil, nil, DefaultConfig()); !errors.Is(err, ErrNoTasks) {
			t.Errorf("%s: no tasks: %v", alg.Name(), err)
		}
		if _, _, err := alg.Decide("other", prev, tasks, nil, DefaultConfig()); !errors.Is(err, ErrInvalidAssignment) {
			t.Errorf("%s: wrong job: %v", alg.Name(), err)
		}
		if _, _, err := alg.Decide("j", prev, tasks, Load{{Start: 0, End: 1, Load: -1}}, DefaultConfig()); !errors.Is(err, ErrInvalidLoad) {
			t.Errorf("%s: bad load: %v", alg.Name(), err)
		}
		if _, _, err := alg.Decide("j", prev, tasks, nil, Config{MinRedundancy: 2, MaxRedundancy: 1}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: bad config: %v", alg.Name(), err)
		}
	}
}

func TestStaticKeepsAssignment(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tasks := testTasks(7)
	cfg := Config{MinRedundancy: 2, MaxRedundancy: 2}
	a, _ := mustDecide(t, NewStatic(), nil, tasks, nil, cfg)
	for range 5 {
		next, d := mustDecide(t, NewStatic(), a, tasks, powerLoad(rng, 100, 1.1), cfg)
		if d.Changed || d.Churn != 0 || len(d.Moves) != 0 || !Equal(a, next) {
			t.Fatalf("static moved keys with unchanged tasks: %+v", d)
		}
		a = next
	}
}

func TestConsistentHashAdaptsToLoad(t *testing.T) {
	tasks := testTasks(8)
	cfg := DefaultConfig()
	a, _ := mustDecide(t, NewConsistentHash(), nil, tasks, nil, cfg)
	// With no load the ring is read back exactly: no churn.
	same, d := mustDecide(t, NewConsistentHash(), a, tasks, nil, cfg)
	if d.Changed || !Equal(a, same) {
		t.Fatalf("consistent hashing moved keys with no load and the same tasks (churn %g)", d.Churn)
	}
	// All load on the keys of the first task: it must lose keys.
	var load Load
	for _, s := range a.Slices {
		if slices.Contains(s.Tasks, tasks[0].Name) {
			load = append(load, LoadEntry{Start: s.Start, End: s.End, Load: 1})
		}
	}
	width := func(a *Assignment, name string) (w uint64) {
		for _, s := range a.Slices {
			if slices.Contains(s.Tasks, name) {
				w += s.Width()
			}
		}
		return w
	}
	next, d := mustDecide(t, NewConsistentHash(), a, tasks, load, cfg)
	if !d.Changed || width(next, tasks[0].Name) >= width(a, tasks[0].Name) {
		t.Fatalf("the hot task kept its keys: %d -> %d", width(a, tasks[0].Name), width(next, tasks[0].Name))
	}
	if Imbalance(next, load) >= Imbalance(a, load) {
		t.Errorf("imbalance %g -> %g", Imbalance(a, load), Imbalance(next, load))
	}
}
