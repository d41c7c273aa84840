package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
)

// dirty is a scratch whose buffers have room for a job of n slices (three
// times over) and hold garbage: task ids and offsets out of range, lists
// of prev that are not the slice's, NaN loads, split marks on every
// slice, pieces of no slice and moves no decision took. A decision that
// read anything it had not written would differ from one on fresh
// memory, or fail.
func dirty(rng *rand.Rand, n int) *scratch {
	c := 3*n + 64
	sc := &scratch{
		refs:   taskRefs{make([]int32, c), make([]int32, c/2), make([]int32, 3)},
		moves:  make([]Move, c),
		slices: make([]wslice, c),
		ids:    make([]int32, c),
		prevOf: make([]int32, c),
		sload:  make([]float64, c),
		owned:  make([]ownedSlice, c),
		marks:  make([]int8, c),
		pieces: [][]piece{make([]piece, c), make([]piece, c/2), make([]piece, 3)},
		joined: make([]piece, c),
		heap:   make([]piece, c),
		done:   make([]piece, c),
		sorted: make([]piece, c),
		ends:   make([]int32, c),
	}
	for i := range c {
		sc.slices[i] = wslice{start: rng.Uint64(), end: rng.Uint64(), off: rng.Int32(), n: rng.Int32N(4)}
		sc.ids[i] = rng.Int32()
		sc.prevOf[i] = 1 + rng.Int32N(int32(n))
		sc.sload[i] = math.NaN()
		sc.owned[i] = ownedSlice{slice: rng.Int32(), n: rng.Int32N(4), load: math.NaN(), width: rng.Uint64()}
		sc.marks[i] = int8(1 + rng.IntN(2))
		sc.joined[i] = piece{slice: rng.Int32(), li: rng.Int32(), start: rng.Uint64(), end: rng.Uint64(), load: math.NaN()}
	}
	for _, ps := range append(sc.pieces, sc.heap, sc.done, sc.sorted) {
		for i := range ps {
			ps[i] = sc.joined[i]
		}
	}
	for i := range sc.ends {
		sc.ends[i] = rng.Int32()
	}
	for _, r := range sc.refs {
		for i := range r {
			r[i] = rng.Int32()
		}
	}
	for i := range sc.moves {
		sc.moves[i] = Move{Kind: MoveKind(rng.IntN(6)), Start: rng.Uint64(), End: rng.Uint64(), From: "ghost", To: "ghost", Reason: "garbage", Phase: PhaseMove}
	}
	sc.moves = sc.moves[:c/2]
	return sc
}

// A decision does not depend on what its scratch held before: on a dirty
// scratch it decides exactly as on fresh memory, over jobs of the shapes
// the phases meet (one to three tasks a slice, capacities, memory limits,
// departed tasks, no load, a ceiling on slices), and along a chain of decisions that each
// reuse the scratch of the one before.
func TestDecisionsOnDirtyScratch(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 5))
	base := Config{MinRedundancy: 1, MaxRedundancy: 3}.WithDefaults()
	cfg := base
	decide := func(prev *Assignment, live []Task, load Load, sc *scratch) (*Assignment, Decision) {
		t.Helper()
		next, d, err := decideWeighted("j", prev, live, load, cfg, sc)
		if err != nil {
			t.Fatal(err)
		}
		if err := next.Validate(); err != nil {
			t.Fatalf("the decision is not a valid assignment: %v", err)
		}
		for _, m := range d.Moves {
			if m.Kind != Split || m.Phase != PhaseSplit {
				continue
			}
			i := next.Find(m.Start)
			if next.Slices[i].End >= m.End {
				t.Fatalf("a split of [%#x, %#x) is recorded, but the slice is whole", m.Start, m.End)
			}
		}
		return next, d
	}
	same := func(what string, want, got *Assignment, wd, gd Decision) {
		t.Helper()
		if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(wd, gd) {
			t.Fatalf("%s: the decision on a dirty scratch (%d slices, %d moves, churn %g) is not the one on fresh memory (%d slices, %d moves, churn %g)",
				what, len(got.Slices), len(gd.Moves), gd.Churn, len(want.Slices), len(wd.Moves), wd.Churn)
		}
	}
	// Eight rounds meet every shape below once; the race detector (ten
	// times slower) gets those, and the rest get three times as many.
	rounds := 24
	if raceEnabled {
		rounds = 8
	}
	changed := 0
	for round := range rounds {
		tasks := testTasks(20 + rng.IntN(40))
		perTask := 20 + rng.IntN(100)
		if round%8 == 6 {
			perTask = 60 + rng.IntN(40) // above the floor of slices
		}
		prev := scattered(rng, tasks, perTask, 1+round%3)
		load := powerLoad(rng, len(prev.Slices)*(1+round%2), 1.1+rng.Float64())
		live := tasks
		switch round % 4 {
		case 1:
			for i := range live {
				live[i].Capacity = float64(1 + i%3)
			}
		case 2:
			load = withBytes(rng, load, 1e6)
			live = limited(live, load, 1, 1.3)
		case 3:
			live = live[3:]
		}
		if round%6 == 5 {
			load = nil
		}
		cfg = base
		if round%8 == 6 {
			// A ceiling a few slices away and no merging: phase 5 starts
			// in key order, meets it and splits hottest first instead.
			cfg.MaxSlices = len(prev.Slices) + 5
			cfg.MergeChurn = 0
		}
		want, wd := decide(prev, live, load, new(scratch))
		got, gd := decide(prev, live, load, dirty(rng, len(prev.Slices)))
		same("round "+string(rune('a'+round)), want, got, wd, gd)
		if wd.Changed {
			changed++
		}
	}
	if changed < rounds*5/6 {
		t.Fatalf("only %d of %d decisions changed the assignment", changed, rounds)
	}

	cfg = base
	tasks := testTasks(30)
	prev := scattered(rng, tasks, 80, 2)
	sc := dirty(rng, 4*len(prev.Slices))
	for i := range 6 {
		load := powerLoad(rng, len(prev.Slices), 1.5)
		want, wd := decide(prev, tasks, load, new(scratch))
		got, gd := decide(prev, tasks, load, sc)
		same("chain decision "+string(rune('1'+i)), want, got, wd, gd)
		if len(sc.slices) == 0 || len(sc.ids) == 0 || len(sc.sload) == 0 || len(sc.owned) == 0 || len(sc.marks) == 0 {
			t.Fatalf("chain decision %d did not give its buffers back: %d slices, %d ids, %d loads, %d owned, %d marks",
				i+1, len(sc.slices), len(sc.ids), len(sc.sload), len(sc.owned), len(sc.marks))
		}
		prev = got
	}
}

// A decision's moves and assignment hold none of its scratch: the next
// decision on the same scratch leaves them as they were.
func TestDecisionsOwnTheirResults(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 31))
	cfg := DefaultConfig()
	sc := new(scratch)
	decide := func() (*Assignment, Decision) {
		t.Helper()
		tasks := testTasks(20 + rng.IntN(20))
		prev := scattered(rng, tasks, 30+rng.IntN(30), 1)
		next, d, err := decideWeighted("j", prev, tasks, powerLoad(rng, len(prev.Slices), 1.5), cfg, sc)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Moves) == 0 {
			t.Fatal("the decision moved nothing; the test needs moves")
		}
		return next, d
	}
	next, d := decide()
	keep, kept := next.Clone(), slices.Clone(d.Moves)
	for range 3 {
		decide()
	}
	if !reflect.DeepEqual(d.Moves, kept) {
		t.Fatal("a later decision on the same scratch changed an earlier decision's moves")
	}
	if !Equal(next, keep) {
		t.Fatal("a later decision on the same scratch changed an earlier decision's assignment")
	}
}

// Decisions running at once each take their own scratch from the pool:
// every one decides as it would alone (go test -race watches the
// buffers).
func TestConcurrentDecisionsOwnTheirScratch(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 6))
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2}.WithDefaults()
	type job struct {
		prev  *Assignment
		tasks []Task
		load  Load
		want  *Assignment
	}
	jobs := make([]job, 4)
	for i := range jobs {
		j := &jobs[i]
		j.tasks = testTasks(10 + 10*i)
		j.prev = scattered(rng, j.tasks, 30+20*i, 1+i%2)
		j.load = powerLoad(rng, len(j.prev.Slices), 1.5)
		var err error
		if j.want, _, err = decideWeighted("j", j.prev, j.tasks, j.load, cfg, new(scratch)); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			j := &jobs[i]
			for range 5 {
				got, _, err := WeightedMove{}.Decide("j", j.prev, j.tasks, j.load, cfg)
				if err == nil && !reflect.DeepEqual(got, j.want) {
					err = fmt.Errorf("job %d: %d slices decided beside other decisions, %d alone", i, len(got.Slices), len(j.want.Slices))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// scratchBytes is the memory sc's buffers hold, by their capacities.
// Every field of scratch is a slice (of slices, for the buffers kept by
// part), so a field added later is counted without being named here.
func scratchBytes(sc *scratch) int {
	var bytes func(v reflect.Value) int
	bytes = func(v reflect.Value) int {
		n := v.Cap() * int(v.Type().Elem().Size())
		if v.Type().Elem().Kind() == reflect.Slice {
			for i := range v.Len() {
				n += bytes(v.Index(i))
			}
		}
		return n
	}
	v := reflect.ValueOf(sc).Elem()
	n := 0
	for i := range v.NumField() {
		n += bytes(v.Field(i))
	}
	return n
}

// BenchmarkDecisionScratch reports the working memory a decision at
// 10,000 tasks keeps in its scratch, in MB and in bytes a slice of the
// assignment it returns: from the decision benchmarks' scattered start
// (about 100 slices a task), and for the compound-step benchmark's job of
// a few slices a task, which phase 5 first refines to its floor.
//
//	go test -run '^$' -bench DecisionScratch -benchtime 1x ./assign/
func BenchmarkDecisionScratch(b *testing.B) {
	run := func(b *testing.B, prev *Assignment, tasks []Task, load Load, cfg Config) {
		var sc *scratch
		var next *Assignment
		for b.Loop() {
			sc = new(scratch)
			var err error
			if next, _, err = decideWeighted("j", prev, tasks, load, cfg, sc); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(scratchBytes(sc))/1e6, "scratch-MB")
		b.ReportMetric(float64(scratchBytes(sc))/float64(len(next.Slices)), "B/slice")
	}
	b.Run("scattered", func(b *testing.B) {
		_, tasks, prev, load := benchJob(10000)
		run(b, prev, tasks, load, DefaultConfig())
	})
	b.Run("refine", func(b *testing.B) {
		prev, tasks, load := roomJob(2500, false)
		cfg := DefaultConfig()
		cfg.MaxRedundancy = 2
		run(b, prev, tasks, load, cfg)
	})
}
