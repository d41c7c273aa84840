package assign

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// benchAlgorithm times one decision of alg for n tasks holding 50 to 150
// slices each under a power-law load, and reports the median and the
// 99th percentile (the slowest of fewer than 100 decisions).
// The first decision of the process is timed apart (first-ms) and left
// out of the others: it also pays for growing the heap to hold a job of
// this size, which a running Assigner has done already.
func benchAlgorithm(b *testing.B, alg Algorithm, n int) { benchAlgorithmCaps(b, alg, n, nil, 0, 0) }

// benchJob is the job the decision benchmarks start from: n tasks holding
// 50 to 150 slices each, scattered at random, under a power-law load of an
// entry a slice; rng is what drew it, for what the benchmark draws next.
// prev is as an Assigner holds a job's assignment, decoded from the store
// (its slices share task lists; see TaskLists).
func benchJob(n int) (rng *rand.Rand, tasks []Task, prev *Assignment, load Load) {
	rng = rand.New(rand.NewPCG(7, uint64(n)))
	tasks = testTasks(n)
	prev = stored(scattered(rng, tasks, 50+rng.IntN(101), 1))
	return rng, tasks, prev, powerLoad(rng, len(prev.Slices), 1.5)
}

// stored is a as the store's encoding gives it back.
func stored(a *Assignment) *Assignment {
	b, err := a.MarshalBinary()
	if err != nil {
		panic(err)
	}
	if a, err = UnmarshalAssignment(b); err != nil {
		panic(err)
	}
	return a
}

// reportUsage reports the minor page faults and the system CPU time of a
// decision since usage gave f0 and s0, over n decisions: fresh memory
// costs a decision a fault a page, and the tail of its time is mostly
// such faults (the result, 42 MB at a million slices, landing on pages
// the heap grew by, or that the runtime had returned to the system), not
// the phases.
func reportUsage(b *testing.B, f0, s0 int64, n int) {
	f1, s1 := usage()
	b.ReportMetric(float64(f1-f0)/float64(n), "faults/op")
	b.ReportMetric(float64(s1-s0)/1000/float64(n), "sys-ms/op")
}

// reportTimes reports the median and the 99th percentile of times (the
// slowest of fewer than 100) as p50-ms and p99-ms, and the page faults of
// the decision at the 99th percentile, faults[i] being decision i's, as
// p99-faults.
func reportTimes(b *testing.B, times []time.Duration, faults []int64) {
	order := make([]int, len(times)) // decisions, fastest first
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(times[i], times[j]) })
	p50, p99 := order[len(order)/2], order[len(order)*99/100]
	b.ReportMetric(float64(times[p50].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[p99].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(faults[p99]), "p99-faults")
}

// timed runs decide and appends its time and page faults to times and
// faults.
func timed(times *[]time.Duration, faults *[]int64, decide func()) {
	f0, _ := usage()
	start := time.Now()
	decide()
	*times = append(*times, time.Since(start))
	f1, _ := usage()
	*faults = append(*faults, f1-f0)
}

// benchAlgorithmCaps is benchAlgorithm with task i of capacity
// caps[i%len(caps)] (nil: all 1) and, when memory is positive, every
// slice holding state and every task a memory limit of memory times its
// even share of it. warm more decisions than the first are left out of
// the figures.
func benchAlgorithmCaps(b *testing.B, alg Algorithm, n int, caps []float64, memory float64, warm int) {
	rng, tasks, prev, load := benchJob(n)
	for i := range tasks {
		if len(caps) > 0 {
			tasks[i].Capacity = caps[i%len(caps)]
		}
	}
	if memory > 0 {
		load = withBytes(rng, load, 1e6)
		tasks = limited(tasks, load, 1, memory)
	}
	cfg := DefaultConfig()
	start := time.Now()
	if _, _, err := alg.Decide("j", prev, tasks, load, cfg); err != nil {
		b.Fatal(err)
	}
	first := time.Since(start)
	for range warm {
		if _, _, err := alg.Decide("j", prev, tasks, load, cfg); err != nil {
			b.Fatal(err)
		}
	}
	var times []time.Duration
	var faults []int64
	b.ReportAllocs()
	b.ResetTimer()
	f0, s0 := usage()
	for b.Loop() {
		timed(&times, &faults, func() {
			if _, _, err := alg.Decide("j", prev, tasks, load, cfg); err != nil {
				b.Fatal(err)
			}
		})
	}
	reportUsage(b, f0, s0, len(times))
	reportTimes(b, times, faults)
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
}

func BenchmarkWeightedMove(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithm(b, NewWeightedMove(), n) })
	}
}

// BenchmarkWeightedMoveWarm is BenchmarkWeightedMove in a process that has
// decided the job ten times more before the timed decisions, as an
// Assigner that has served the job a while has: its heap has grown to
// hold the job's decisions, which BenchmarkWeightedMove's first timed
// decisions still do (faults/op tells them apart).
//
//	go test -run '^$' -bench 'WeightedMove(Warm)?$/tasks=10000' -benchtime 20x -benchmem ./assign/
func BenchmarkWeightedMoveWarm(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithmCaps(b, NewWeightedMove(), n, nil, 0, 10) })
	}
}

// BenchmarkWeightedMoveSteady is an Assigner's steady state: every
// decision starts from the one before (after three that balance the
// scattered start) and sees the same power-law load redrawn with 5%
// noise per entry, as successive windows of a stationary load are.
// churn-% is the mean churn of a decision, in percent of the key space:
// what moving load off the tasks that the noise made the hottest costs.
//
//	go test -run '^$' -bench WeightedMoveSteady -benchtime 20x -count 3 -benchmem ./assign/
func BenchmarkWeightedMoveSteady(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			rng, tasks, prev, base := benchJob(n)
			windows := make([]Load, 4)
			for i := range windows {
				windows[i] = slices.Clone(base)
				for j := range windows[i] {
					windows[i][j].Load *= 1 + 0.05*rng.NormFloat64()
					windows[i][j].Load = max(windows[i][j].Load, 0)
				}
			}
			cfg := DefaultConfig()
			var churn float64
			decide := func(i int) {
				next, d, err := WeightedMove{}.Decide("j", prev, tasks, windows[i%len(windows)], cfg)
				if err != nil {
					b.Fatal(err)
				}
				prev, churn = next, churn+d.Churn
			}
			for i := range 3 {
				decide(i)
			}
			churn = 0
			var times []time.Duration
			var faults []int64
			b.ReportAllocs()
			b.ResetTimer()
			f0, s0 := usage()
			i := 0
			for b.Loop() {
				timed(&times, &faults, func() { decide(i) })
				i++
			}
			reportUsage(b, f0, s0, len(times))
			reportTimes(b, times, faults)
			b.ReportMetric(100*churn/float64(len(times)), "churn-%")
		})
	}
}

// BenchmarkWeightedMoveCapacities is BenchmarkWeightedMove with tasks of
// capacities 1, 2 and 4 in turn: phase 4 compares a receiver per capacity.
func BenchmarkWeightedMoveCapacities(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithmCaps(b, NewWeightedMove(), n, []float64{1, 2, 4}, 0, 0) })
	}
}

// BenchmarkWeightedMoveMemory is BenchmarkWeightedMove with state on every
// slice and every task limited to 1.3 times its even share of it: each
// placement checks room, and tasks the scattered start left past their
// limits are relieved first.
func BenchmarkWeightedMoveMemory(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithmCaps(b, NewWeightedMove(), n, nil, 1.3, 0) })
	}
}

// BenchmarkWeightedMoveSwaps is the worst case of phase 4's compound step
// (makeRoom): n/4 copies of roomJob's four tasks, in each of which only a
// swap relieves the hottest task, so that every step phase 4 takes is
// planned among up to makeRoomTries × makeRoomReceivers × 2 capacities
// candidates.
func BenchmarkWeightedMoveSwaps(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			prev, tasks, load := roomJob(n/4, false)
			cfg := DefaultConfig()
			cfg.MaxRedundancy = 2
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := NewWeightedMove().Decide("j", prev, tasks, load, cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkConsistentHash(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) { benchAlgorithm(b, NewConsistentHash(), n) })
	}
}

// BenchmarkLoadValidate checks a load of a million entries, as every
// decision at 10,000 tasks does first.
//
//	go test -run '^$' -bench LoadValidate -count 6 ./assign/
func BenchmarkLoadValidate(b *testing.B) {
	load := powerLoad(rand.New(rand.NewPCG(7, 1)), 1_000_000, 1.5)
	for b.Loop() {
		if err := load.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHottest measures a job's utilisation imbalance under its load
// (Hottest, as ImbalanceWith and TaskLoads do): what an Assigner computes
// for the current assignment before every load decision, and for the
// next one after it, on the decision benchmarks' jobs.
//
//	go test -run '^$' -bench Hottest -benchtime 20x -count 6 ./assign/
func BenchmarkHottest(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			_, tasks, a, load := benchJob(n)
			b.ReportAllocs()
			for b.Loop() {
				if i, _ := Hottest(a, load, tasks); i < 0 {
					b.Fatal("no hottest task")
				}
			}
		})
	}
}

// BenchmarkHottestIndexed is BenchmarkHottest from the assignment's
// OwnerIndex (which an Assigner holds for each generation it serves):
// each slice's tasks read from the index rather than looked up by name.
//
//	go test -run '^$' -bench 'Hottest' -benchtime 20x -count 6 ./assign/
func BenchmarkHottestIndexed(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			_, tasks, a, load := benchJob(n)
			idx := NewOwnerIndex(a)
			b.ReportAllocs()
			for b.Loop() {
				if i, _ := idx.Hottest(load, tasks); i < 0 {
					b.Fatal("no hottest task")
				}
			}
		})
	}
}

// BenchmarkMergeLoads merges the load reports of n tasks, each on the
// ~100 slices the task serves in the decision benchmarks' job (a million
// entries at 10,000 tasks): what an Assigner does before every load
// decision and every check of one (jobLoad).
//
//	go test -run '^$' -bench MergeLoads -benchtime 20x -count 6 ./assign/
//
// With r=2 every slice is reported by two tasks (its own and the next),
// as replicas report: every piece adds up two entries.
func BenchmarkMergeLoads(b *testing.B) {
	for _, n := range []int{100, 10000} {
		for _, r := range []int{1, 2} {
			name := fmt.Sprintf("tasks=%d", n)
			if r > 1 {
				name += fmt.Sprintf("/r=%d", r)
			}
			b.Run(name, func(b *testing.B) {
				_, _, a, load := benchJob(n)
				parts := make([]Load, n)
				for i, s := range a.Slices { // one entry a slice
					t, _ := a.TaskIndex(s.Tasks[0])
					for k := range r {
						parts[(t+k)%n] = append(parts[(t+k)%n], load[i])
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					if len(MergeLoads(parts...)) != len(load) {
						b.Fatal("the reports do not merge back into the load")
					}
				}
			})
		}
	}
}

// BenchmarkOwnedSlices groups the decision benchmarks' job's slices by
// task, as phase 4 of every weighted-move decision does first.
//
//	go test -run '^$' -bench OwnedSlices -count 6 ./assign/
func BenchmarkOwnedSlices(b *testing.B) {
	_, tasks, prev, load := benchJob(10000)
	refs, err := prev.validate(true)
	if err != nil {
		b.Fatal(err)
	}
	w := newWeigher(newPlannerRoom(prev, refs, tasks, DefaultConfig(), 0, new(scratch)), load)
	b.ReportAllocs()
	for b.Loop() {
		w.ownedSlices()
	}
}

// BenchmarkDecisionChurn compares a weighted-move decision's result with
// the assignment it started from, as every decision does last (Equal,
// then Churn), on the decision benchmarks' job.
//
//	go test -run '^$' -bench DecisionChurn -count 6 ./assign/
func BenchmarkDecisionChurn(b *testing.B) {
	_, tasks, prev, load := benchJob(10000)
	next, _, err := NewWeightedMove().Decide("j", prev, tasks, load, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := decision(prev, next, nil); !d.Changed {
			b.Fatal("the decision changed nothing")
		}
	}
}

// BenchmarkDecisionStages times the steps of BenchmarkWeightedMoveWarm's
// decisions (10,000 tasks, ten untimed decisions first), as stageHook
// names them: <step>-ms is a step's mean a decision and <step>-p99-ms its
// 99th percentile (the slowest of fewer than 100), so that a tail can be
// told apart from the steps that hold it.
//
//	go test -run '^$' -bench DecisionStages -benchtime 40x ./assign/
func BenchmarkDecisionStages(b *testing.B) {
	_, tasks, prev, load := benchJob(10000)
	cfg := DefaultConfig()
	for range 11 {
		if _, _, err := NewWeightedMove().Decide("j", prev, tasks, load, cfg); err != nil {
			b.Fatal(err)
		}
	}
	times := map[string][]time.Duration{}
	var last time.Time
	stageHook = func(name string) {
		now := time.Now()
		times[name] = append(times[name], now.Sub(last))
		last = now
	}
	defer func() { stageHook = nil }()
	n := 0
	for b.Loop() {
		last = time.Now()
		if _, _, err := NewWeightedMove().Decide("j", prev, tasks, load, cfg); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for name, ts := range times {
		var sum time.Duration
		for _, t := range ts {
			sum += t
		}
		slices.Sort(ts)
		b.ReportMetric(float64(sum.Microseconds())/1000/float64(n), name+"-ms")
		b.ReportMetric(float64(ts[len(ts)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
}

// indexSlice is a slice whose tasks are an index into a table of task
// lists: what a Slice would be without pointers. BenchmarkResultForm
// weighs it against Slice.
type indexSlice struct {
	Start, End SliceKey
	List       uint32
}

// BenchmarkResultForm times the step that builds a decision's result at
// 10,000 tasks (about 1.2 million slices), alone, in a heap that holds
// what an Assigner's does while it decides: the job's assignment and the
// decision's working memory (pointer-free, 90 MB). "pointers" builds the
// []Slice a decision returns today, in a heap whose assignment is one too;
// "indices" builds and holds indexSlice instead, whose array the collector
// neither scans nor charges its allocation a mark assist for. Each
// iteration drops the result it built, as the decision benchmarks do. It
// reports the median and 99th percentile time and the faults of the
// slowest, as the decision benchmarks do:
//
//	go test -run '^$' -bench ResultForm -benchtime 100x -count 3 ./assign/
func BenchmarkResultForm(b *testing.B) {
	scratch := make([]int64, 90<<20/8)
	for i := range scratch {
		scratch[i] = int64(i)
	}
	b.Run("pointers", func(b *testing.B) {
		_, _, prev, _ := benchJob(10000)
		n := len(prev.Slices)
		benchResult(b, func() any {
			out := make([]Slice, n)
			inParts(n, parts(n), func(_, lo, hi int) {
				for i := lo; i < hi; i++ {
					s := &prev.Slices[i]
					out[i] = Slice{Start: s.Start, End: s.End, Tasks: s.Tasks}
				}
			})
			return out
		})
		runtime.KeepAlive(prev)
	})
	b.Run("indices", func(b *testing.B) {
		_, _, a, _ := benchJob(10000)
		n := len(a.Slices)
		prev := make([]indexSlice, n)
		var lists [][]string
		id := make(map[*string]uint32) // a list by its first name's address
		for i, s := range a.Slices {
			l, ok := id[&s.Tasks[0]]
			if !ok {
				l = uint32(len(lists))
				id[&s.Tasks[0]] = l
				lists = append(lists, s.Tasks)
			}
			prev[i] = indexSlice{Start: s.Start, End: s.End, List: l}
		}
		a, id = nil, nil
		runtime.GC()
		benchResult(b, func() any {
			out := make([]indexSlice, n)
			inParts(n, parts(n), func(_, lo, hi int) {
				copy(out[lo:hi], prev[lo:hi])
			})
			return out
		})
		runtime.KeepAlive(prev)
		runtime.KeepAlive(lists)
	})
	runtime.KeepAlive(scratch)
}

// benchResult times b.N calls of build, dropping each result.
func benchResult(b *testing.B, build func() any) {
	var times []time.Duration
	var faults []int64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		timed(&times, &faults, func() { sink = build() })
	}
	b.StopTimer()
	sink = nil
	reportTimes(b, times, faults)
}

// sink keeps BenchmarkResultForm's results from being optimised away.
var sink any
