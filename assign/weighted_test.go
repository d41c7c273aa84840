package assign

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func testTasks(n int) []Task {
	ts := make([]Task, n)
	for i := range ts {
		ts[i] = Task{Name: fmt.Sprintf("t%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)}
	}
	return ts
}

// powerLoad is a load of n equal-width entries whose values follow a
// Pareto distribution of shape alpha: a few hot ranges, a long cold tail.
func powerLoad(rng *rand.Rand, n int, alpha float64) Load {
	l := make(Load, n)
	w := KeySpaceEnd / uint64(n)
	for i := range l {
		l[i] = LoadEntry{Start: uint64(i) * w, End: uint64(i+1) * w, Load: math.Min(1/math.Pow(1-rng.Float64(), 1/alpha), 1e6)}
	}
	l[n-1].End = KeySpaceEnd
	return l
}

// scattered is an assignment of job "j" with perTask slices per task of
// equal width, each on a random task (and the next tasks for redundancy r).
func scattered(rng *rand.Rand, tasks []Task, perTask, r int) *Assignment {
	n := len(tasks)
	s := n * perTask
	w := KeySpaceEnd / uint64(s)
	a := &Assignment{Job: "j", Generation: 1, Tasks: slices.Clone(tasks), Slices: make([]Slice, s)}
	for i := range a.Slices {
		t := rng.IntN(n)
		names := make([]string, 0, r)
		for k := range min(r, n) {
			names = append(names, tasks[(t+k)%n].Name)
		}
		slices.Sort(names)
		a.Slices[i] = Slice{Start: uint64(i) * w, End: uint64(i+1) * w, Tasks: names}
	}
	a.Slices[s-1].End = KeySpaceEnd
	return a
}

func mustDecide(t testing.TB, alg Algorithm, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision) {
	t.Helper()
	next, d, err := alg.Decide("j", prev, live, load, cfg)
	if err != nil {
		t.Fatalf("%s.Decide: %v", alg.Name(), err)
	}
	if err := next.Validate(); err != nil {
		t.Fatalf("%s.Decide: invalid result: %v", alg.Name(), err)
	}
	want := uint64(1)
	if prev != nil {
		want = prev.Generation + 1
	}
	if next.Generation != want {
		t.Fatalf("%s.Decide: generation %d, want %d", alg.Name(), next.Generation, want)
	}
	for _, m := range d.Moves {
		if m.Reason == "" {
			t.Fatalf("%s.Decide: move without a reason: %v", alg.Name(), m)
		}
	}
	return next, d
}

func TestWeightedMoveReducesImbalance(t *testing.T) {
	for _, r := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("redundancy%d", r), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(r)))
			tasks := testTasks(20)
			cfg := Config{MinRedundancy: r, MaxRedundancy: r + 1}
			load := powerLoad(rng, 3000, 1.5)
			a := scattered(rng, tasks, 100, r)
			before := Imbalance(a, load)
			for range 10 {
				next, d := mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
				if len(next.Tasks) != len(tasks) {
					t.Fatalf("%d of %d tasks serve a slice: a task lost its last slice", len(next.Tasks), len(tasks))
				}
				if after := Imbalance(next, load); after > Imbalance(a, load)+1e-9 {
					t.Fatalf("imbalance rose from %g to %g", Imbalance(a, load), after)
				}
				if d.Churn > cfg.WithDefaults().MoveChurn+cfg.WithDefaults().MergeChurn+0.01 {
					t.Errorf("churn %g above the budgets", d.Churn)
				}
				a = next
			}
			if after := Imbalance(a, load); after >= before {
				t.Errorf("imbalance %g after ten decisions, was %g", after, before)
			} else {
				t.Logf("imbalance %g -> %g, %d slices", before, after, len(a.Slices))
			}
		})
	}
}

// A decision shares task lists with the assignment it started from (see
// Slice) and never writes one: a chain of decisions through departures,
// joins and load leaves every earlier assignment as it was, and a list a
// decision kept is prev's own.
func TestDecisionsShareListsAndWriteNone(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	all := testTasks(24)
	cfg := Config{MinRedundancy: 2, MaxRedundancy: 3}
	a := scattered(rng, all[:20], 60, 2)
	var kept []*Assignment
	var copies []*Assignment
	for step, live := range [][]Task{all[:20], all[2:20], all[2:22], all[2:22], all[:24], all[5:24]} {
		load := powerLoad(rng, 2000, 1.5)
		kept, copies = append(kept, a), append(copies, a.Clone())
		next, _ := mustDecide(t, NewWeightedMove(), a, live, load, cfg)
		shared := 0
		for i := range next.Slices {
			ts := next.Slices[i].Tasks
			if len(ts) < 2 {
				continue
			}
			j := a.Find(next.Slices[i].Start)
			if sameList(ts, a.Slices[j].Tasks) {
				shared++
			}
		}
		if shared == 0 {
			t.Errorf("step %d: no list of two or more tasks shared with the previous assignment", step)
		}
		for k := range kept {
			if !reflect.DeepEqual(kept[k], copies[k]) {
				t.Fatalf("step %d: assignment %d of the chain changed", step, k)
			}
		}
		a = next
	}
}

// With no load, WeightedMove decides exactly as Rebalance on membership
// changes.
func TestWeightedMoveWithoutLoadIsRebalance(t *testing.T) {
	all := testTasks(10)
	for _, r := range []int{1, 2} {
		cfg := Config{MinRedundancy: r, MaxRedundancy: r + 1}
		prev, err := Initial("j", all[:5], cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, live := range [][]Task{all[:6], all[1:6], all[1:9], all[3:4], all, all[:2]} {
			want, wd, err := Rebalance(prev, live, cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, gd := mustDecide(t, NewWeightedMove(), prev, live, nil, cfg)
			if !Equal(got, want) || !slices.Equal(gd.Moves, wd.Moves) || gd.Churn != wd.Churn || gd.Changed != wd.Changed {
				t.Fatalf("r=%d, %d live: weighted-move without load differs from Rebalance", r, len(live))
			}
			prev = got
		}
	}
}

// runPhases runs WeightedMove's phases on prev by hand so tests can see
// inside phase 4.
func runPhases(prev *Assignment, live []Task, load Load, cfg Config) *weigher {
	cfg = cfg.WithDefaults()
	refs, err := prev.validate(true)
	if err != nil {
		panic(err)
	}
	p := newPlanner(prev, refs, live, cfg)
	p.replaceDeparted()
	p.enforceRedundancy()
	p.placeJoined()
	w := newWeigher(p, load)
	w.merge()
	w.moveGreedy()
	return w
}

func TestWeightedMoveChurnBudget(t *testing.T) {
	for _, budget := range []float64{0.001, 0.01, 0.09, 0.3} {
		rng := rand.New(rand.NewPCG(11, uint64(budget*1000)))
		tasks := testTasks(16)
		cfg := Config{MinRedundancy: 1, MaxRedundancy: 2, MoveChurn: budget}
		prev := scattered(rng, tasks, 60, 1)
		load := powerLoad(rng, 2000, 1.1)
		var widest uint64
		for _, s := range prev.Slices {
			widest = max(widest, s.Width())
		}
		w := runPhases(prev, tasks, load, cfg)
		if lim := keys(budget) + widest; w.moveChurn > lim {
			t.Errorf("budget %g: phase 4 moved %d keys, above the budget plus one slice (%d)", budget, w.moveChurn, lim)
		}
		if w.moveChurn == 0 {
			t.Errorf("budget %g: phase 4 moved nothing on a skewed load", budget)
		}
		next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg)
		if lim := budget + cfg.WithDefaults().MergeChurn + float64(widest)/float64(KeySpaceEnd); d.Churn > lim {
			t.Errorf("budget %g: decision churn %g above %g", budget, d.Churn, lim)
		}
		if Imbalance(next, load) > Imbalance(prev, load) {
			t.Errorf("budget %g: imbalance rose %g -> %g", budget, Imbalance(prev, load), Imbalance(next, load))
		}
	}
}

func TestWeightedMoveSliceCountStaysInRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	tasks := testTasks(10)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2}
	d := cfg.WithDefaults()
	lo, hi := d.MinSlicesPerTask*len(tasks), d.MaxSlicesPerTask*len(tasks)
	load := powerLoad(rng, 5000, 1.3)
	// From inside the range it stays inside; from above, merging (bounded
	// by MergeChurn and by the hottest task's load) only brings it down.
	for _, start := range []*Assignment{scattered(rng, tasks, 100, 1), scattered(rng, tasks, 170, 1)} {
		a := start
		in := func(a *Assignment) bool { return len(a.Slices) >= lo && len(a.Slices) <= hi }
		reached := in(a)
		for step := range 20 {
			next, _ := mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
			if reached && !in(next) {
				t.Fatalf("step %d: %d slices, outside [%d, %d] after reaching it", step, len(next.Slices), lo, hi)
			}
			if len(a.Slices) > hi && len(next.Slices) > len(a.Slices) {
				t.Fatalf("step %d: %d slices grew to %d while above %d", step, len(a.Slices), len(next.Slices), hi)
			}
			reached = reached || in(next)
			a = next
		}
		if len(start.Slices) > hi && len(a.Slices) >= len(start.Slices) {
			t.Errorf("from %d slices: merging never reduced the count", len(start.Slices))
		}
	}
}

func TestWeightedMoveSuppression(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 17))
	tasks := testTasks(8)
	prev := scattered(rng, tasks, 80, 1)
	load := powerLoad(rng, 1000, 1.2)
	hottest := slices.Max(TaskLoads(prev, load))
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2, SuppressBelow: hottest * 1.01}
	next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg)
	if d.Changed || len(d.Moves) != 0 || !Equal(prev, next) {
		t.Fatalf("hottest load %g below SuppressBelow %g, yet %d moves", hottest, cfg.SuppressBelow, len(d.Moves))
	}
	cfg.SuppressBelow = hottest * 0.99
	if _, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg); !d.Changed {
		t.Fatalf("hottest load %g above SuppressBelow %g, yet nothing moved", hottest, cfg.SuppressBelow)
	}
}

// A single hot key is replicated up to MaxRedundancy and split off from
// its neighbours.
func TestWeightedMoveHotKey(t *testing.T) {
	tasks := testTasks(4)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 3}
	a, _ := mustDecide(t, NewWeightedMove(), nil, tasks, nil, cfg)
	hot := KeySpaceEnd/8 + 12345
	load := Load{{Start: 0, End: hot, Load: 100}, {Start: hot, End: hot + 1, Load: 300}, {Start: hot + 1, End: KeySpaceEnd, Load: 100}}
	before := Imbalance(a, load)
	for range 10 {
		a, _ = mustDecide(t, NewWeightedMove(), a, tasks, load, cfg)
	}
	if len(a.Tasks) != len(tasks) {
		t.Errorf("%d of %d tasks serve a slice: a task lost its last slice", len(a.Tasks), len(tasks))
	}
	s := a.Slices[a.Find(hot)]
	if len(s.Tasks) < 2 {
		t.Errorf("hot key's slice %v has %d tasks, want it replicated", s, len(s.Tasks))
	}
	if after := Imbalance(a, load); after >= before {
		t.Errorf("imbalance %g -> %g", before, after)
	}
}

func TestMedianKey(t *testing.T) {
	l := Load{{Start: 0, End: 100, Load: 10}, {Start: 100, End: 200, Load: 30}}
	if got, lower := medianKey(l, 0, 200, 40); got < 125 || got > 135 || math.Abs(lower-l.In(0, got)) > 1e-9 {
		t.Errorf("medianKey = %d (lower %g), want about 133 with lower %g", got, lower, l.In(0, got))
	}
	if got, lower := medianKey(nil, 0, 200, 0); got != 100 || lower != 0 {
		t.Errorf("no load: medianKey = %d, %g; want the midpoint 100, 0", got, lower)
	}
	// All load on the first key: the cut isolates it.
	one := Load{{Start: 0, End: 1, Load: 5}}
	if got, lower := medianKey(one, 0, 200, 5); got != 1 || lower != 5 {
		t.Errorf("hot first key: medianKey = %d, %g; want 1, 5 (the key alone)", got, lower)
	}
	// A hot key inside the range: the cut is at one of its edges, so two
	// splits leave it alone in a slice.
	mid := Load{{Start: 50, End: 51, Load: 5}}
	got, lower := medianKey(mid, 0, 200, 5)
	if got != 50 && got != 51 {
		t.Fatalf("hot middle key: medianKey = %d, want 50 or 51", got)
	}
	if lower != mid.In(0, got) {
		t.Errorf("hot middle key: lower %g, want %g", lower, mid.In(0, got))
	}
	lo, hi := SliceKey(0), got
	if got == 50 {
		lo, hi = 50, 200
	}
	if again, _ := medianKey(mid, lo, hi, 5); again != 50 && again != 51 || again == lo || again == hi {
		t.Errorf("second cut of [%d, %d) = %d, want the key's other edge", lo, hi, again)
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	old := Config{MinRedundancy: 1, MaxRedundancy: 2}
	if err := old.Validate(); err != nil {
		t.Fatalf("a config without tuning fields is rejected: %v", err)
	}
	d := old.WithDefaults()
	if d.MinSlicesPerTask != 50 || d.MaxSlicesPerTask != 150 || d.MergeChurn != 0.01 || d.MoveChurn != 0.09 || d.SplitLoadFactor != 2 || d.MergeLoadFactor != 1 || d.SuppressBelow != 0 {
		t.Errorf("defaults = %+v", d)
	}
	if !DefaultConfig().Equal((Config{MinRedundancy: 1, MaxRedundancy: 1}).WithDefaults()) {
		t.Errorf("DefaultConfig = %+v", DefaultConfig())
	}
	for name, c := range map[string]Config{
		"negative churn":    {MinRedundancy: 1, MaxRedundancy: 1, MoveChurn: -0.1},
		"churn above 1":     {MinRedundancy: 1, MaxRedundancy: 1, MergeChurn: 2},
		"nan factor":        {MinRedundancy: 1, MaxRedundancy: 1, SplitLoadFactor: math.NaN()},
		"split factor 1":    {MinRedundancy: 1, MaxRedundancy: 1, SplitLoadFactor: 1},
		"max below min":     {MinRedundancy: 1, MaxRedundancy: 1, MinSlicesPerTask: 100, MaxSlicesPerTask: 60},
		"negative slices":   {MinRedundancy: 1, MaxRedundancy: 1, MinSlicesPerTask: -1},
		"too many slices":   {MinRedundancy: 1, MaxRedundancy: 1, MaxSlicesPerTask: MaxSlicesPerTaskLimit + 1},
		"negative suppress": {MinRedundancy: 1, MaxRedundancy: 1, SuppressBelow: -1},
		"infinite suppress": {MinRedundancy: 1, MaxRedundancy: 1, SuppressBelow: math.Inf(1)},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// Merging never takes a task's last slice: the next decision would see the
// task as new and hand it keys again.
func TestWeightedMoveMergeKeepsEveryTask(t *testing.T) {
	tasks := []Task{{Name: "a"}, {Name: "b"}}
	prev := &Assignment{Job: "j", Generation: 1, Tasks: tasks, Slices: []Slice{
		{Start: 0, End: 10, Tasks: []string{"a"}},
		{Start: 10, End: 20, Tasks: []string{"b"}},
		{Start: 20, End: KeySpaceEnd, Tasks: []string{"a"}},
	}}
	load := Load{{Start: 20, End: KeySpaceEnd, Load: 10}}
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 1, MinSlicesPerTask: 1, MaxSlicesPerTask: 1}
	next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg)
	if len(next.Tasks) != 2 {
		t.Fatalf("a task lost its last slice: %v", d.Moves)
	}
	if len(next.Slices) != 2 {
		t.Errorf("%d slices, want the two cold ones merged: %v", len(next.Slices), next.Slices)
	}
}

// FuzzConfig decodes a stored JSON config; whatever Validate accepts must
// keep valid once defaulted, and every algorithm must decide with it.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(`{"min_redundancy":1,"max_redundancy":1}`))
	f.Add([]byte(`{"min_redundancy":2,"max_redundancy":3,"move_churn":0.5,"suppress_below":10}`))
	f.Add([]byte(`{"min_redundancy":1,"max_redundancy":2,"min_slices_per_task":3,"max_slices_per_task":4,"split_load_factor":1.5}`))
	f.Add([]byte(`{"min_redundancy":1,"max_redundancy":1,"merge_load_factor":-1}`))
	tasks := testTasks(5)
	load := powerLoad(rand.New(rand.NewPCG(1, 2)), 64, 1.2)
	f.Fuzz(func(t *testing.T, b []byte) {
		var cfg Config
		if json.Unmarshal(b, &cfg) != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate error %v is not ErrInvalidConfig", err)
			}
			return
		}
		if err := cfg.WithDefaults().Validate(); err != nil {
			t.Fatalf("defaults of a valid config are invalid: %v", err)
		}
		if cfg.MaxRedundancy > 8 {
			return // keeps each run fast; redundancy is not what is fuzzed
		}
		for _, alg := range algorithms() {
			a, _ := mustDecide(t, alg, nil, tasks, nil, cfg)
			mustDecide(t, alg, a, tasks[1:], load, cfg)
		}
	})
}

// pointLoad gives each of n keys a power-law load as a width-one entry,
// the way the simulator reports application keys.
func pointLoad(rng *rand.Rand, n int, alpha float64) Load {
	var l Load
	seen := map[SliceKey]bool{}
	for i := range n {
		k := rng.Uint64N(KeySpaceEnd - 1)
		if seen[k] {
			continue
		}
		seen[k] = true
		l = append(l, LoadEntry{Start: k, End: k + 1, Load: 1000 / math.Pow(float64(i+1), alpha)})
	}
	slices.SortFunc(l, func(a, b LoadEntry) int { return cmp.Compare(a.Start, b.Start) })
	return l
}

// A job's first decision with load already balances: the even split is
// refined to the minimum slice count, which moves no key, and the hot keys
// are then replicated in small slices.
func TestWeightedMoveFirstDecisionBalances(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 21))
	tasks := testTasks(10)
	load := pointLoad(rng, 100, 1.5)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 10}
	even := evenSplit("j", 1, tasks, cfg)
	a, d := mustDecide(t, NewWeightedMove(), nil, tasks, load, cfg)
	dc := cfg.WithDefaults()
	if n := len(a.Slices); n < dc.MinSlicesPerTask*len(tasks) || n > dc.MaxSlicesPerTask*len(tasks) {
		t.Errorf("%d slices, want %d to %d", n, dc.MinSlicesPerTask*len(tasks), dc.MaxSlicesPerTask*len(tasks))
	}
	if before, after := Imbalance(even, load), Imbalance(a, load); after > 1.2 {
		t.Errorf("imbalance %.3f under the even split, %.3f after the first decision; want at most 1.2", before, after)
	}
	splits := 0
	for _, m := range d.Moves {
		if m.Kind == Split {
			splits++
			if m.Reason == "" {
				t.Errorf("split %+v has no reason", m)
			}
		}
	}
	if splits == 0 {
		t.Error("no split recorded")
	}
}

// When the coldest task is too warm to take a share of the hottest task's
// only slice, phase 4 first sheds some of its small slices to other tasks.
func TestWeightedMoveMakesRoom(t *testing.T) {
	tasks := testTasks(6) // t000 .. t005
	names := func(ids ...int) []string {
		var out []string
		for _, i := range ids {
			out = append(out, tasks[i].Name)
		}
		return out
	}
	// Twelve equal slices: 0 is hot on tasks 0 and 1; 1-4 (0.4 each) on
	// task 3; 5-10 (0.9 each) two each on tasks 2, 4 and 5; 11 is cold on 0.
	owners := [][]int{{0, 1}, {3}, {3}, {3}, {3}, {2}, {2}, {4}, {4}, {5}, {5}, {0}}
	loads := []float64{6, 0.4, 0.4, 0.4, 0.4, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0}
	w := KeySpaceEnd / 12
	prev := &Assignment{Job: "j", Generation: 1, Tasks: tasks}
	var load Load
	for i := range owners {
		s := Slice{Start: SliceKey(i) * w, End: SliceKey(i+1) * w, Tasks: names(owners[i]...)}
		if i == len(owners)-1 {
			s.End = KeySpaceEnd
		}
		prev.Slices = append(prev.Slices, s)
		if loads[i] > 0 {
			load = append(load, LoadEntry{Start: s.Start, End: s.End, Load: loads[i]})
		}
	}
	// Small slice counts and a full churn budget isolate phase 4.
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 3, MinSlicesPerTask: 2, MaxSlicesPerTask: 2, MoveChurn: 1}
	before := Imbalance(prev, load)
	next, d := mustDecide(t, NewWeightedMove(), prev, tasks, load, cfg)
	after := Imbalance(next, load)
	if after >= before || after > 1.2 {
		t.Errorf("imbalance %.3f -> %.3f; want below 1.2\nmoves: %+v", before, after, d.Moves)
	}
	hot := next.Slices[next.Find(0)]
	if !slices.Contains(hot.Tasks, tasks[3].Name) {
		t.Errorf("hot slice served by %v; want task 3, the coldest, among them", hot.Tasks)
	}
}

// sliceReports is the load Slicelets report under a: one entry per slice,
// with the slice's hottest key as an entry of its own and the rest spread
// over the keys either side of it.
func sliceReports(a *Assignment, truth Load) Load {
	var l Load
	for _, s := range a.Slices {
		v := truth.In(s.Start, s.End)
		if v == 0 {
			continue
		}
		var hot LoadEntry
		for _, e := range truth {
			if e.Start >= s.Start && e.End <= s.End && e.Load > hot.Load {
				hot = e
			}
		}
		if hot.Load == 0 {
			l = append(l, LoadEntry{Start: s.Start, End: s.End, Load: v})
			continue
		}
		rest := v - hot.Load
		if hot.Start > s.Start && hot.End < s.End {
			rest /= 2
		}
		if hot.Start > s.Start && rest > 0 {
			l = append(l, LoadEntry{Start: s.Start, End: hot.Start, Load: rest})
		}
		l = append(l, hot)
		if hot.End < s.End && rest > 0 {
			l = append(l, LoadEntry{Start: hot.End, End: s.End, Load: rest})
		}
	}
	return l
}

// Under a steady load reported the way Slicelets report it, decisions
// settle: after a few rounds nothing changes, so a steady job keeps its
// generation and churns nothing.
func TestWeightedMoveSettles(t *testing.T) {
	for _, r := range []int{1, 3, 10} {
		rng := rand.New(rand.NewPCG(21, uint64(r)))
		tasks := testTasks(10)
		truth := pointLoad(rng, 100, 1.5)
		cfg := Config{MinRedundancy: 1, MaxRedundancy: r}
		a, _ := mustDecide(t, NewWeightedMove(), nil, tasks, sliceReports(evenSplit("j", 1, tasks, cfg), truth), cfg)
		settled := -1
		for round := range 20 {
			next, d := mustDecide(t, NewWeightedMove(), a, tasks, sliceReports(a, truth), cfg)
			if d.Changed {
				settled = -1
			} else if settled < 0 {
				settled = round
			}
			a = next
		}
		if settled < 0 || settled > 10 {
			t.Errorf("max redundancy %d: still changing after 20 rounds (settled at %d)", r, settled)
		}
	}
}

// Splitting in key order makes the same slices as splitting hottest
// first whenever the ceiling lets it finish (split uses it then), on
// loads where a slice holds one measurement or many, hot keys included.
func TestSplitInOrderIsSplitHottestFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	tasks := testTasks(30)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2}.WithDefaults()
	checked := 0
	for round := range 40 {
		prev := scattered(rng, tasks, 40+rng.IntN(80), 1+round%2)
		entries := []int{len(prev.Slices) / 3, len(prev.Slices), 4 * len(prev.Slices)}[round%3]
		load := powerLoad(rng, entries, 1.2+rng.Float64())
		refs, err := prev.validate(true)
		if err != nil {
			t.Fatal(err)
		}
		newW := func() *weigher {
			p := newPlannerRoom(prev, refs, tasks, cfg, 0, new(scratch))
			return newWeigher(p, load)
		}
		a, b := newW(), newW()
		n := len(tasks)
		ceiling := cfg.sliceCeiling(n)
		if round%4 == 3 { // a ceiling that stops the splitting
			ceiling = len(a.sl) + 5
		}
		floor := min(cfg.sliceFloor(n), ceiling)
		if len(a.sl) < floor || len(a.sl) >= ceiling {
			continue
		}
		mean := a.total / float64(len(a.sl))
		split := make([]int8, len(a.sl))
		done, count, ok := a.splitInOrder(ceiling, cfg.SplitLoadFactor*mean, split)
		if !ok {
			if round%4 != 3 {
				t.Fatalf("round %d: the ceiling %d stopped splitting in order", round, ceiling)
			}
			continue
		}
		if count == len(a.sl) {
			continue // nothing hot
		}
		a.applySplits(done, split, count, mean)
		b.splitHottestFirst(ceiling, floor, mean, cfg.SplitLoadFactor*mean, false, make([]int8, len(b.sl)))
		if !slices.Equal(a.sl, b.sl) || !slices.Equal(a.sload, b.sload) || !slices.Equal(a.p.moves, b.p.moves) {
			t.Fatalf("round %d: %d slices in key order, %d hottest first, or other loads or moves", round, len(a.sl), len(b.sl))
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d rounds compared", checked)
	}
}

// Merging leaves two slices of different single tasks apart, without
// asking mergeTasks, once what is left of the budget is narrower than
// both: mergeTasks refuses every such pair.
func TestMergeTasksRefusesPairsWiderThanTheBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	tasks := testTasks(20)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2}.WithDefaults()
	prev := scattered(rng, tasks, 50, 1)
	load := powerLoad(rng, len(prev.Slices), 1.5)
	refs, err := prev.validate(true)
	if err != nil {
		t.Fatal(err)
	}
	w := newWeigher(newPlannerRoom(prev, refs, tasks, cfg, 0, new(scratch)), load)
	w.countHeld()
	pairs := 0
	for i := 1; i < len(w.sl); i++ {
		a, b := &w.sl[i-1], &w.sl[i]
		if a.n != 1 || b.n != 1 || w.p.ids[a.off] == w.p.ids[b.off] {
			continue
		}
		rem := min(a.end-a.start, b.end-b.start) - 1
		if _, _, ok := w.mergeTasks(a, w.sload[i-1], 0, b, w.sload[i], 0, math.Inf(1), rem); ok {
			t.Fatalf("slices %d and %d merged with %d keys of budget left, narrower than both", i-1, i, rem)
		}
		// With the budget for it, the same pair may merge: the refusal is
		// the budget's.
		if _, _, ok := w.mergeTasks(a, w.sload[i-1], 0, b, w.sload[i], 0, math.Inf(1), rem+1); ok {
			pairs++
		}
	}
	if pairs == 0 {
		t.Fatal("no pair merged with the budget for it: the test shows nothing")
	}
}

// A slice that keeps its one task keeps its list: a decision gives a
// task's one-task slices a list the previous assignment has for it, with
// no room to append in place, so that comparing the two compares
// addresses (see sameList).
func TestDecisionsKeepOneTaskLists(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 5))
	all := testTasks(40)
	a := stored(scattered(rng, all[:30], 40, 1))
	// A list with room to spare: the decision's windows of it have none.
	a.Slices[0].Tasks = append(make([]string, 0, 4), a.Slices[0].Tasks[0])
	for step, live := range [][]Task{all[:30], all[:30], all[3:30], all[3:36]} {
		load := powerLoad(rng, 3000, 1.5)
		next, _ := mustDecide(t, NewWeightedMove(), a, live, load, DefaultConfig())
		of := map[string][][]string{} // each task's one-task lists in a
		for _, s := range a.Slices {
			if len(s.Tasks) == 1 && !slices.ContainsFunc(of[s.Tasks[0]], func(l []string) bool { return sameList(l, s.Tasks) }) {
				of[s.Tasks[0]] = append(of[s.Tasks[0]], s.Tasks)
			}
		}
		kept := 0
		for _, s := range next.Slices {
			if len(s.Tasks) != 1 {
				continue
			}
			if cap(s.Tasks) != 1 {
				t.Fatalf("step %d: a one-task list has room for %d names", step, cap(s.Tasks))
			}
			prev, ok := of[s.Tasks[0]]
			if !ok {
				continue // a task new to the job, or one that had only larger lists
			}
			if !slices.ContainsFunc(prev, func(l []string) bool { return sameList(l, s.Tasks) }) {
				t.Fatalf("step %d: task %q's slices have a new list where the previous assignment had one", step, s.Tasks[0])
			}
			kept++
		}
		if kept == 0 {
			t.Fatalf("step %d: no list kept", step)
		}
		a = next
	}
}

// A weigher's held counts are the slices each task serves whenever they
// are set: from the loads, after phase 5 refines a coarse job first
// (which drops them), and after phase 3 has merged and phase 4 moved
// (phase 3 drops them when done).
func TestHeldCountsAreCurrentOrUnset(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 4))
	tasks := testTasks(12)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2}.WithDefaults()
	for _, perTask := range []int{1, 3, 50, 60} {
		prev := scattered(rng, tasks, perTask, 1+perTask%2)
		refs, err := prev.validate(true)
		if err != nil {
			t.Fatal(err)
		}
		w := newWeigher(newPlannerRoom(prev, refs, tasks, cfg, 0, new(scratch)), powerLoad(rng, 40*len(tasks), 1.5))
		check := func(after string) {
			t.Helper()
			if w.held == nil {
				return
			}
			want := make([]int32, len(tasks))
			for i := range w.sl {
				for _, t := range w.p.tasks(&w.sl[i]) {
					want[t]++
				}
			}
			if !slices.Equal(w.held, want) {
				t.Fatalf("%d slices a task, after %s: held %v, but the tasks serve %v", perTask, after, w.held, want)
			}
		}
		check("weighing")
		if perTask < cfg.MinSlicesPerTask {
			n := len(w.sl)
			w.split()
			if len(w.sl) == n {
				t.Fatalf("%d slices a task: refining split nothing", perTask)
			}
			check("refining")
		}
		w.merge()
		check("merging")
		w.moveGreedy()
		if w.moveChurn == 0 {
			t.Fatalf("%d slices a task: phase 4 moved nothing", perTask)
		}
		check("moving")
	}
}

// roomReason spells its reason as fmt's %q does.
func TestRoomReasonSpelling(t *testing.T) {
	names := []string{"t1", `odd "name" ☃`, "tab\there", "\x00\x7f", strings.Repeat("long", 40), ""}
	for _, c := range names {
		for _, h := range names {
			want := fmt.Sprintf("task %q makes room for load of the hottest task %q", c, h)
			if got := roomReason(c, h); got != want {
				t.Fatalf("reason %q, fmt spells %q", got, want)
			}
		}
	}
}

// The reason recorded for a move off the hottest task reads as fmt would
// spell it, for tasks of capacity 1 and others, any load and any name.
func TestHottestReasonSpelling(t *testing.T) {
	tasks := []Task{{Name: "t1"}, {Name: `odd "name" ☃`, Capacity: 2.5}, {Name: "t3", Capacity: 1e-3}}
	w := &weigher{p: &planner{live: tasks}, tload: make([]float64, len(tasks)), inv: make([]float64, len(tasks))}
	for i, task := range tasks {
		w.inv[i] = 1 / capacityOf(task)
	}
	for _, load := range []float64{0, 1, 0.5, 1.0 / 3, 12345.678, 1e-9, 3e20, math.MaxFloat64, math.Inf(1)} {
		for _, score := range []float64{0, 2.5e-17, 7, 1e300} {
			for h := range tasks {
				w.tload[h] = load * w.inv[h]
				want := fmt.Sprintf("task %q is the hottest (load %.4g); gain %.4g per key moved", tasks[h].Name, w.tload[h], score)
				if w.inv[h] != 1 {
					want = fmt.Sprintf("task %q is the hottest (load %.4g, capacity %.4g: %.4g per unit); gain %.4g per key moved",
						tasks[h].Name, w.tload[h]/w.inv[h], 1/w.inv[h], w.tload[h], score)
				}
				if got := w.hottestReason(int32(h), score); got != want {
					t.Fatalf("reason %q, fmt spells %q", got, want)
				}
			}
		}
	}
}
