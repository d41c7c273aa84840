package assign

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// hottestKey is the entry of l with the most load.
func hottestKey(l Load) LoadEntry {
	return slices.MaxFunc(l, func(a, b LoadEntry) int { return cmp.Compare(a.Load, b.Load) })
}

// With room for more replicas, the hot key's arc is spread over the next
// tasks clockwise and the load evens out; no slice gets more tasks than its
// load calls for.
func TestConsistentHashReplicatesHotArcs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	tasks := testTasks(10)
	load := pointLoad(rng, 100, 1.5)
	start, _ := mustDecide(t, NewConsistentHash(), nil, tasks, nil, DefaultConfig())
	hotKey := hottestKey(load)
	hot := chHotShare * load.Total() / float64(len(tasks))
	if hotKey.Load <= 2*hot {
		t.Fatalf("the hottest key carries %g, not enough to need 3 replicas (%g each)", hotKey.Load, hot)
	}
	imbalance := map[int]float64{}
	for _, most := range []int{1, 3} {
		cfg := Config{MinRedundancy: 1, MaxRedundancy: most}
		a := start
		var sum float64
		for round := range 5 {
			next, d := mustDecide(t, NewConsistentHash(), a, tasks, load, cfg)
			for _, s := range next.Slices {
				if len(s.Tasks) < 1 || len(s.Tasks) > most {
					t.Fatalf("max %d: slice %v has %d tasks", most, s, len(s.Tasks))
				}
				// Some arc of the slice earned its replicas.
				if n := len(s.Tasks); n > 1 && load.In(s.Start, s.End) <= hot*float64(n-1) {
					t.Fatalf("max %d: slice %v carries %g, too little for %d tasks", most, s, load.In(s.Start, s.End), n)
				}
			}
			hs := next.Slices[next.Find(hotKey.Start)]
			if len(hs.Tasks) != most {
				t.Fatalf("max %d round %d: the hottest key's slice has tasks %v, want %d", most, round, hs.Tasks, most)
			}
			for _, m := range d.Moves {
				if most == 1 && m.Reason != chRingChanged {
					t.Fatalf("max 1: move %+v names replication", m)
				}
				if m.Start == hs.Start && m.Kind == AddReplica && m.Reason != chHotArc {
					t.Errorf("max %d: replica of the hot slice recorded as %q", most, m.Reason)
				}
			}
			sum += Imbalance(next, load)
			a = next
		}
		imbalance[most] = sum / 5
	}
	t.Logf("mean imbalance over 5 decisions: max redundancy 1: %.3f, 3: %.3f", imbalance[1], imbalance[3])
	if imbalance[3] >= imbalance[1] {
		t.Errorf("mean imbalance %.3f with max redundancy 3, %.3f with 1; want lower", imbalance[3], imbalance[1])
	}
}

// Without load, or with MaxRedundancy equal to MinRedundancy, no arc gets
// extra replicas; when the load goes away the extras are removed as such.
func TestConsistentHashExtraReplicasNeedLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	tasks := testTasks(8)
	load := pointLoad(rng, 50, 1.5)
	for _, minR := range []int{1, 2} {
		t.Run(fmt.Sprintf("min%d", minR), func(t *testing.T) {
			fixed := Config{MinRedundancy: minR, MaxRedundancy: minR}
			wide := Config{MinRedundancy: minR, MaxRedundancy: minR + 3}
			a, _ := mustDecide(t, NewConsistentHash(), nil, tasks, nil, fixed)
			b, _ := mustDecide(t, NewConsistentHash(), nil, tasks, nil, wide)
			if !Equal(a, b) {
				t.Fatal("with no load, a wider redundancy range changed the ring")
			}
			fixedNext, _ := mustDecide(t, NewConsistentHash(), a, tasks, load, fixed)
			for _, s := range fixedNext.Slices {
				if len(s.Tasks) != minR {
					t.Fatalf("max = min = %d: slice %v has %d tasks", minR, s, len(s.Tasks))
				}
			}
			hotNext, _ := mustDecide(t, NewConsistentHash(), a, tasks, load, wide)
			cooled, d := mustDecide(t, NewConsistentHash(), hotNext, tasks, nil, wide)
			removed := 0
			for _, s := range cooled.Slices {
				if len(s.Tasks) != minR {
					t.Fatalf("no load: slice %v kept %d tasks", s, len(s.Tasks))
				}
			}
			for _, m := range d.Moves {
				if m.Kind == RemoveReplica && m.Reason == chCooledArc {
					removed++
				}
			}
			if removed == 0 {
				t.Errorf("no extra replica was removed as cooled: %v", d.Moves)
			}
		})
	}
}

// The same inputs give the same decision, in any task order.
func TestConsistentHashReplicationDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	tasks := testTasks(12)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 4}
	prev, _ := mustDecide(t, NewConsistentHash(), nil, tasks, nil, cfg)
	for round := range 4 {
		load := pointLoad(rng, 200, 1.3)
		a, da := mustDecide(t, NewConsistentHash(), prev, tasks, load, cfg)
		shuffled := slices.Clone(tasks)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		b, db := mustDecide(t, NewConsistentHash(), prev, shuffled, load, cfg)
		if !Equal(a, b) || !slices.Equal(da.Moves, db.Moves) || da.Churn != db.Churn {
			t.Fatalf("round %d: two decisions on the same inputs differ", round)
		}
		prev = a
	}
}

// The virtual-node counts read back from a ring with replicated hot arcs
// rebuild that same ring: nodes past a task's count that land in an arc
// the task serves as an extra replica are not taken for its own.
func TestConsistentHashReadsBackReplicatedRing(t *testing.T) {
	for _, sc := range []struct{ tasks, most, keys int }{{3, 3, 30}, {10, 3, 100}, {10, 10, 1000}} {
		t.Run(fmt.Sprintf("tasks%d/max%d", sc.tasks, sc.most), func(t *testing.T) {
			tasks := testTasks(sc.tasks)
			for seed := range 60 {
				rng := rand.New(rand.NewPCG(uint64(seed), 9))
				counts := make([]int, len(tasks))
				for i := range counts {
					counts[i] = chMinVnodes + rng.IntN(chMaxVnodes/2)
				}
				load := pointLoad(rng, sc.keys, 1.5)
				hot := chHotShare * load.Total() / float64(len(tasks))
				a := ringAssignment("j", 1, tasks, counts, 1, sc.most, load, hot)
				got := vnodeCounts(a, tasks, nil, 1)
				if again := ringAssignment("j", 1, tasks, got, 1, sc.most, load, hot); !Equal(a, again) {
					t.Fatalf("seed %d: counts %v read back as %v give another ring", seed, counts, got)
				}
			}
		})
	}
}

// loadCursor sums exactly what Load.In does for increasing ranges.
func TestLoadCursorMatchesIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 7))
	for round := range 50 {
		var load Load
		if round%2 == 0 {
			load = powerLoad(rng, 1+rng.IntN(200), 1.2)
		} else {
			load = pointLoad(rng, 1+rng.IntN(200), 1.5)
		}
		cuts := []SliceKey{0, KeySpaceEnd}
		for range rng.IntN(300) {
			cuts = append(cuts, rng.Uint64N(KeySpaceEnd))
		}
		for _, e := range load[:min(len(load), 20)] {
			cuts = append(cuts, e.Start, e.End) // ranges that meet entries exactly
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		cur := loadCursor{l: load}
		for i := 0; i+1 < len(cuts); i++ {
			if got, want := cur.in(cuts[i], cuts[i+1]), load.In(cuts[i], cuts[i+1]); got != want {
				t.Fatalf("round %d: [%#x, %#x): cursor %g, In %g", round, cuts[i], cuts[i+1], got, want)
			}
		}
	}
}

// A huge arc load clamps to MaxRedundancy rather than overflowing.
func TestConsistentHashHugeLoad(t *testing.T) {
	tasks := testTasks(5)
	load := Load{{Start: 10, End: 11, Load: MaxLoad}, {Start: 1 << 40, End: 1<<40 + 1, Load: math.SmallestNonzeroFloat64}}
	next, _ := mustDecide(t, NewConsistentHash(), nil, tasks, load, Config{MinRedundancy: 1, MaxRedundancy: 64})
	if n := len(next.Slices[next.Find(10)].Tasks); n != len(tasks) {
		t.Fatalf("the key with all the load has %d tasks, want all %d", n, len(tasks))
	}
}

// BenchmarkConsistentHashReplicated is BenchmarkConsistentHash with room
// for hot arcs to take up to three replicas.
func BenchmarkConsistentHashReplicated(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			_, tasks, prev, load := benchJob(n)
			cfg := Config{MinRedundancy: 1, MaxRedundancy: 3}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := NewConsistentHash().Decide("j", prev, tasks, load, cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
