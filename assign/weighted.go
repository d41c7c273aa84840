package assign

import (
	"slices"
)

// WeightedMove is Slicer's weighted-move algorithm (OSDI '16, §4.4.1), in
// five phases:
//
//  1. Keys of departed tasks go to the least-loaded live tasks, and tasks
//     that hold nothing take their fair share (the membership phases of
//     Rebalance, which weigh every key the same).
//  2. Every slice gets between min(MinRedundancy, live tasks) and
//     MaxRedundancy tasks.
//  3. While the job has more than MinSlicesPerTask slices per task,
//     adjacent cold slices merge: their combined load is below
//     MergeLoadFactor times the mean slice load, the tasks taking the keys
//     stay at or below the hottest task's load, and at most MergeChurn of
//     the key space moves.
//  4. Greedy moves off the hottest task: for each of its slices, reassign
//     it to the coldest task, replicate it to the coldest task (below
//     MaxRedundancy), or drop the hottest task's replica (above
//     MinRedundancy). The move that lowers the hottest task's load most per
//     key churned is applied, repeatedly, until MoveChurn of the key space
//     has moved or no move helps. When no single move helps, a compound
//     step may: a task nearly as busy takes a share of one of the hottest
//     task's slices and sheds some of its own, to other tasks or to the
//     hottest one (makeRoom).
//  5. While the job has fewer than MaxSlicesPerTask slices per task, slices
//     with at least SplitLoadFactor times the mean slice load split at their
//     load median.
//
// Phases 3 to 5 use the measured load of each slice, shared evenly among
// its tasks, and weigh each task by its utilisation: its load divided by
// its Capacity. "Hottest" and "coldest" are by utilisation, so a task of
// capacity 2 ends with about twice the load of one of capacity 1. The
// phases are skipped while the hottest task's utilisation is below
// SuppressBelow. With no load at all they are replaced by merging adjacent
// slices served by the same tasks, so WeightedMove then decides exactly as
// Rebalance does.
//
// Decide and the weigher that carries the load are here; phase 3 is in
// weighted_merge.go, phase 4 in weighted_move.go (its compound step in
// weighted_room.go) and phase 5 in weighted_split.go.
type WeightedMove struct{}

// NewWeightedMove returns the weighted-move algorithm.
func NewWeightedMove() Algorithm { return WeightedMove{} }

// Name is "weighted-move".
func (WeightedMove) Name() string { return AlgorithmWeightedMove }

// Decide computes the next assignment from prev, the live tasks and the
// load measured under prev. Without prev, or when no task of prev is live,
// the key space is split evenly.
func (WeightedMove) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	return decideWeighted(job, prev, live, load, cfg, sc)
}

// decideWeighted is Decide with its working memory from sc. Its steps,
// as stageHook names them: validate (prev and the load), convert (prev to
// the planner's slices), the membership phases, measure (each slice's
// load), phases 3 to 5 and relief and pins, result (the assignment
// built), moves (copied out) and churn (the decision compared with prev).
func decideWeighted(job string, prev *Assignment, live []Task, load Load, cfg Config, sc *scratch) (*Assignment, Decision, error) {
	refs := sc.refs // buffers for prev's task references
	sc.refs = nil
	tasks, gen, total, err := prepare("weighted-move", job, prev, live, load, cfg, &refs)
	if err != nil {
		return nil, Decision{}, err
	}
	stage("validate")
	from, base, err := startFrom("weighted-move", job, gen, prev, tasks, cfg, &refs)
	if err != nil {
		return nil, Decision{}, err
	}
	// A fresh even split goes through the phases below as any assignment
	// does: the membership phases apply pins and meet the minimum
	// redundancy with cordoned tasks where the open ones are too few, and
	// with load it is balanced at once rather than one decision later.
	cfg = cfg.WithDefaults()
	// Room for what phase 5 usually adds, so that it grows the slices in
	// place rather than copying a million of them.
	room := min(max(cfg.sliceCeiling(len(tasks))-len(from.Slices), 0), len(from.Slices)/4)
	p := newPlannerRoom(from, refs, tasks, cfg, room, sc)
	sc.refs = refs // read only by newPlannerRoom
	stage("convert")
	// The moves are recorded in the scratch's buffer, which has room for
	// as many as the largest decision before, and copied out once.
	p.moves = append(reuse(&sc.moves, 0, len(base)), base...)
	p.mem = newMemory(p, load)
	p.membershipPhases()
	if total == 0 {
		p.phase(PhaseMerge, p.mergeAdjacent)
	} else {
		w := newWeigher(p, load)
		stage("measure")
		if w.hottest() >= cfg.SuppressBelow {
			if len(w.sl) < cfg.sliceFloor(len(tasks)) {
				// Too coarse to move load in small steps (a fresh even
				// split, say): refine first, which moves no key.
				p.phase(PhaseSplit, w.split)
			}
			p.phase(PhaseMerge, w.merge)
			p.phase(PhaseMove, w.moveGreedy)
			p.phase(PhaseSplit, w.split)
		}
		p.slices = w.sl
		sc.sload = w.sload
		// Phase 5 may have refined slices a task held whole (a fresh even
		// split gives each task one): relief can now move a part.
		p.phase(PhaseMemory, p.relieveMemory)
		p.phase(PhasePins, p.applyPins)
	}
	next := p.assignment(job, gen)
	stage("result")
	var moves []Move
	if len(p.moves) > 0 {
		moves = slices.Clone(p.moves)
	}
	clear(p.moves) // the buffer keeps no name alive, nor pointers for the collector to follow
	sc.slices, sc.ids, sc.prevOf, sc.moves = p.slices, p.ids, p.prevOf, p.moves[:0]
	stage("moves")
	d := decision(prev, next, moves)
	stage("churn")
	return next, d, nil
}

// weigher runs phases 3 to 5 over the planner's slices with measured load.
type weigher struct {
	p     *planner
	cfg   Config
	load  Load
	sl    []wslice
	sload []float64 // by slice, parallel to sl
	tload []float64 // utilisation by task id: load / capacity
	inv   []float64 // 1 / capacity by task id
	// sbytes is the bytes of each slice, parallel to sl, when the planner
	// has memory limits (p.mem); nil otherwise. Task totals are p.mem's.
	sbytes []float64
	total  float64
	// capacity is the live tasks' total capacity: the job's utilisation
	// is total / capacity.
	capacity float64
	// held is the number of slices each task serves, for phase 3: counted
	// with the loads, and again by phase 3 if phase 5 has split slices
	// first (which sets it to nil); phase 3 keeps it up to date while it
	// runs and drops it when done.
	held []int32
	// moveChurn is the key churn phase 4 spent, in keys; tests read it.
	moveChurn uint64
	// room is makeRoom's best and current plan, and shares and shareOf
	// the receivers' hottest shares, whose memory it reuses.
	room    [2]roomPlan
	tries   []int32 // the hottest task's shares makeRoom tries
	shares  []int32
	shareOf []receiverShares
}

func newWeigher(p *planner, load Load) *weigher {
	w := &weigher{p: p, cfg: p.cfg, load: load, sl: p.slices, tload: make([]float64, len(p.live)), inv: make([]float64, len(p.live)),
		held: make([]int32, len(p.live))}
	for t, task := range p.live {
		w.inv[t] = 1 / capacityOf(task)
		w.capacity += capacityOf(task)
	}
	w.sload = measure(reuse(&p.sc.sload, len(w.sl), cap(w.sl)), w.sl, load)
	if p.mem != nil || p.cfg.Victim == VictimGainPerByte && load.HasBytes() {
		w.sbytes = measureBytes(w.sl, load)
	}
	for i := range w.sl {
		w.total += w.sload[i]
		ts := p.tasks(&w.sl[i])
		share := w.sload[i] / float64(len(ts))
		for _, t := range ts {
			w.tload[t] += share * w.inv[t]
			w.held[t]++
		}
	}
	return w
}

// measure sets out[i] to the load of slice i of sl (sorted, tiling) under
// load, in one sweep over both, and returns out.
func measure(out []float64, sl []wslice, load Load) []float64 {
	return sweep(out, sl, load, (*LoadEntry).within)
}

// sweep sets out[i], for each slice i of sl (sorted, tiling), to the sum
// of part over the entries of load overlapping it, in one sweep over
// both, and returns out. Phase 5 grows the slices and their loads alike,
// so out is usually given sl's capacity.
func sweep(out []float64, sl []wslice, load Load, part func(*LoadEntry, SliceKey, SliceKey) float64) []float64 {
	inParts(len(sl), parts(len(sl)), func(_, lo, hi int) {
		j := 0
		if lo > 0 {
			j = load.after(sl[lo].start, 0)
		}
		for i := lo; i < hi; i++ {
			s := &sl[i]
			for j < len(load) && load[j].End <= s.start {
				j++
			}
			var sum float64
			for k := j; k < len(load) && load[k].Start < s.end; k++ {
				sum += part(&load[k], s.start, s.end)
			}
			out[i] = sum
		}
	})
	return out
}

// bytes is the bytes of slice si: 0 without memory limits.
func (w *weigher) bytes(si int32) float64 {
	if w.sbytes == nil {
		return 0
	}
	return w.sbytes[si]
}

func (w *weigher) hottest() float64 {
	var m float64
	for _, l := range w.tload {
		m = max(m, l)
	}
	return m
}

// share is the load task t carries for a slice of load l and tasks ts; its
// utilisation is that times w.inv[t].
func share(t int32, l float64, ts []int32) float64 {
	if _, ok := slices.BinarySearch(ts, t); ok {
		return l / float64(len(ts))
	}
	return 0
}

// keys converts a fraction of the key space into a number of keys.
func keys(frac float64) uint64 {
	if frac >= 1 {
		return KeySpaceEnd
	}
	return uint64(frac * float64(KeySpaceEnd))
}
