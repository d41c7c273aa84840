package assign

import (
	"cmp"
	"fmt"
	"math"
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
//     has moved or no move helps.
//  5. While the job has fewer than MaxSlicesPerTask slices per task, slices
//     with at least SplitLoadFactor times the mean slice load split at their
//     load median.
//
// Phases 3 to 5 use the measured load of each slice, shared evenly among
// its tasks, and are skipped while the hottest task's load is below
// SuppressBelow. With no load at all they are replaced by merging adjacent
// slices served by the same tasks, so WeightedMove then decides exactly as
// Rebalance does.
type WeightedMove struct{}

// NewWeightedMove returns the weighted-move algorithm.
func NewWeightedMove() Algorithm { return WeightedMove{} }

// Name is "weighted-move".
func (WeightedMove) Name() string { return AlgorithmWeightedMove }

// Decide computes the next assignment from prev, the live tasks and the
// load measured under prev. Without prev, or when no task of prev is live,
// the key space is split evenly.
func (WeightedMove) Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error) {
	tasks, gen, err := prepare("weighted-move", job, prev, live, load, cfg)
	if err != nil {
		return nil, Decision{}, err
	}
	var base []Move
	from := prev
	if prev == nil {
		from = evenSplit(job, gen, tasks, cfg)
		base = evenSplitMoves(from, "the job has no assignment yet; splitting the key space evenly")
	} else if !anyLive(prev, tasks) {
		from = evenSplit(job, gen, tasks, cfg)
		base = evenSplitMoves(from, "no task of the previous assignment is live; splitting the key space evenly")
	}
	if from != prev && load.Total() == 0 {
		return from, decision(prev, from, base), nil
	}
	// With load, a fresh even split is balanced at once rather than one
	// decision later: the phases below run on it as on any assignment.
	cfg = cfg.WithDefaults()
	// Room for what phase 5 usually adds, so that it grows the slices in
	// place rather than copying a million of them.
	room := min(max(cfg.MaxSlicesPerTask*len(tasks)-len(from.Slices), 0), len(from.Slices)/4)
	p := newPlannerRoom(from, tasks, cfg, room)
	p.moves = base
	p.replaceDeparted()
	p.enforceRedundancy()
	p.placeJoined()
	if load.Total() == 0 {
		p.mergeAdjacent()
	} else {
		w := newWeigher(p, load)
		if w.hottest() >= cfg.SuppressBelow {
			if len(w.sl) < cfg.MinSlicesPerTask*len(tasks) {
				// Too coarse to move load in small steps (a fresh even
				// split, say): refine first, which moves no key.
				w.split()
			}
			w.merge()
			w.moveGreedy()
			w.split()
		}
		p.slices = w.sl
	}
	next := p.assignment(job, gen)
	return next, decision(prev, next, p.moves), nil
}

// anyLive reports whether a task of a is among the sorted live tasks.
func anyLive(a *Assignment, live []Task) bool {
	for _, t := range a.Tasks {
		if _, ok := slices.BinarySearchFunc(live, t.Name, func(l Task, name string) int { return cmp.Compare(l.Name, name) }); ok {
			return true
		}
	}
	return false
}

// weigher runs phases 3 to 5 over the planner's slices with measured load.
type weigher struct {
	p     *planner
	cfg   Config
	load  Load
	sl    []wslice
	sload []float64 // by slice, parallel to sl
	tload []float64 // by task id
	total float64
	held  []int32 // slices per task id, during phase 3
	// moveChurn is the key churn phase 4 spent, in keys; tests read it.
	moveChurn uint64
}

func newWeigher(p *planner, load Load) *weigher {
	w := &weigher{p: p, cfg: p.cfg, load: load, sl: p.slices, tload: make([]float64, len(p.live))}
	w.sload = measure(w.sl, load)
	for i := range w.sl {
		w.total += w.sload[i]
		ts := p.tasks(&w.sl[i])
		share := w.sload[i] / float64(len(ts))
		for _, t := range ts {
			w.tload[t] += share
		}
	}
	return w
}

// measure returns the load of each slice of sl (sorted, tiling) under
// load, in one sweep over both.
func measure(sl []wslice, load Load) []float64 {
	out := make([]float64, len(sl), cap(sl)) // phase 5 grows both alike
	j := 0
	for i := range sl {
		s := &sl[i]
		for j < len(load) && load[j].End <= s.start {
			j++
		}
		var sum float64
		for k := j; k < len(load) && load[k].Start < s.end; k++ {
			e := &load[k]
			a, b := max(e.Start, s.start), min(e.End, s.end)
			if a == e.Start && b == e.End {
				sum += e.Load
			} else if a < b {
				sum += e.Load * float64(b-a) / float64(e.End-e.Start)
			}
		}
		out[i] = sum
	}
	return out
}

func (w *weigher) hottest() float64 {
	var m float64
	for _, l := range w.tload {
		m = max(m, l)
	}
	return m
}

// share is the load task t carries for a slice of load l and tasks ts.
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

// merge is phase 3. One pass over the slices in key order joins each slice
// to its left neighbour when both are cold; the joined slice keeps the
// task set that moves fewer keys.
func (w *weigher) merge() {
	floor := w.cfg.MinSlicesPerTask * len(w.p.live)
	if len(w.sl) <= floor || len(w.sl) < 2 {
		return
	}
	ceiling := w.hottest()
	// Slices per task: a merge must not take a task's last slice, or the
	// next decision would treat the task as new and hand it keys again.
	w.held = make([]int32, len(w.p.live))
	for i := range w.sl {
		for _, t := range w.p.tasks(&w.sl[i]) {
			w.held[t]++
		}
	}
	budget := keys(w.cfg.MergeChurn)
	var spent uint64
	count := len(w.sl)
	out, outLoad := w.sl[:1], w.sload[:1]
	for i := 1; i < len(w.sl); i++ {
		a, b := &out[len(out)-1], w.sl[i]
		la, lb := outLoad[len(out)-1], w.sload[i]
		if count > floor && la+lb < w.cfg.MergeLoadFactor*w.total/float64(count) {
			if by, cost, ok := w.mergeTasks(a, la, &b, lb, ceiling, budget-spent); ok {
				off, n := by.off, by.n
				w.recordMerge(a, la, &b, lb, w.p.tasks(by))
				spent += cost
				a.end = b.end
				a.off, a.n = off, n
				outLoad[len(out)-1] = la + lb
				count--
				continue
			}
		}
		out = append(out, b)
		outLoad = append(outLoad, lb)
	}
	clear(w.sl[len(out):])
	w.sl, w.sload = out, outLoad
}

// mergeTasks picks the tasks to serve the union of adjacent slices a and b:
// a's or b's (returned as the slice whose tasks they are), whichever moves
// fewer keys (a's on a tie), provided the keys moved fit the budget and no
// task ends above ceiling.
func (w *weigher) mergeTasks(a *wslice, la float64, b *wslice, lb float64, ceiling float64, budget uint64) (*wslice, uint64, bool) {
	type option struct {
		by   *wslice
		cost uint64
	}
	at, bt := w.p.tasks(a), w.p.tasks(b)
	opts := [2]option{{a, 0}, {b, 0}}
	if !subset(at, bt) {
		opts[0].cost = b.end - b.start
	}
	if !subset(bt, at) {
		opts[1].cost = a.end - a.start
	}
	if opts[1].cost < opts[0].cost {
		opts[0], opts[1] = opts[1], opts[0]
	}
	for _, o := range opts {
		tasks := w.p.tasks(o.by)
		if o.cost > budget || w.strands(a, b, tasks) {
			continue
		}
		ok := true
		for _, t := range tasks {
			l := w.tload[t] - share(t, la, at) - share(t, lb, bt) + (la+lb)/float64(len(tasks))
			if l > ceiling {
				ok = false
				break
			}
		}
		if ok {
			return o.by, o.cost, true
		}
	}
	return nil, 0, false
}

// strands reports whether serving a and b by tasks would leave a task of
// a or b with no slice at all.
func (w *weigher) strands(a, b *wslice, tasks []int32) bool {
	for _, s := range [2]*wslice{a, b} {
		for _, t := range w.p.tasks(s) {
			if _, kept := slices.BinarySearch(tasks, t); kept {
				continue
			}
			n := w.held[t]
			if w.p.has(a, t) {
				n--
			}
			if w.p.has(b, t) {
				n--
			}
			if n <= 0 {
				return true
			}
		}
	}
	return false
}

// recordMerge updates task loads for merging a and b into one slice served
// by tasks, and records the moves.
func (w *weigher) recordMerge(a *wslice, la float64, b *wslice, lb float64, tasks []int32) {
	at, bt := w.p.tasks(a), w.p.tasks(b)
	for _, t := range at {
		w.tload[t] -= la / float64(len(at))
	}
	for _, t := range bt {
		w.tload[t] -= lb / float64(len(bt))
	}
	for _, t := range tasks {
		w.tload[t] += (la + lb) / float64(len(tasks))
	}
	for _, ts := range [2][]int32{at, bt} {
		for _, t := range ts {
			w.held[t]--
		}
	}
	for _, t := range tasks {
		w.held[t]++
	}
	reason := "merging adjacent cold slices: the job has more slices than it needs"
	w.p.recordChange(a.start, a.end, at, tasks, reason)
	w.p.recordChange(b.start, b.end, bt, tasks, reason)
	w.p.moves = append(w.p.moves, Move{Kind: Merge, Start: a.start, End: b.end, Reason: reason})
}

// recordChange records the moves that take [start, end) from tasks from to
// tasks to: a reassignment per task swapped, then added or removed replicas.
func (p *planner) recordChange(start, end SliceKey, from, to []int32, reason string) {
	var gone, came []int32
	for _, t := range from {
		if !slices.Contains(to, t) {
			gone = append(gone, t)
		}
	}
	for _, t := range to {
		if !slices.Contains(from, t) {
			came = append(came, t)
		}
	}
	for len(gone) > 0 && len(came) > 0 {
		p.moves = append(p.moves, Move{Kind: Reassign, Start: start, End: end, From: p.live[gone[0]].Name, To: p.live[came[0]].Name, Reason: reason})
		gone, came = gone[1:], came[1:]
	}
	for _, t := range came {
		p.moves = append(p.moves, Move{Kind: AddReplica, Start: start, End: end, To: p.live[t].Name, Reason: reason})
	}
	for _, t := range gone {
		p.moves = append(p.moves, Move{Kind: RemoveReplica, Start: start, End: end, From: p.live[t].Name, Reason: reason})
	}
}

// zeroCost stands in for the churn of a move that moves no key, so that
// ranking by gain per key churned still orders free moves by gain. It is a
// fraction of one key.
const zeroCost = 0.5

// candidate is a move phase 4 considers.
type candidate struct {
	kind  MoveKind
	slice int32
	to    int32 // the coldest task, for Reassign and AddReplica
	gain  float64
	cost  uint64
	score float64
}

// moveGreedy is phase 4.
func (w *weigher) moveGreedy() {
	n := len(w.p.live)
	if n < 2 {
		return
	}
	// Slice indices per task, as full-capacity windows of one array:
	// appending to a task's list copies only that list.
	owned := make([][]int32, n)
	count := make([]int32, n+1)
	for i := range w.sl {
		for _, t := range w.p.tasks(&w.sl[i]) {
			count[t+1]++
		}
	}
	for t := range n {
		count[t+1] += count[t]
	}
	flat := make([]int32, count[n])
	for t := range n {
		owned[t] = flat[count[t]:count[t]:count[t+1]]
	}
	for i := range w.sl {
		for _, t := range w.p.tasks(&w.sl[i]) {
			owned[t] = append(owned[t], int32(i))
		}
	}
	hot := newTaskHeap(w.tload, true)
	cold := newTaskHeap(w.tload, false)
	budget := keys(w.cfg.MoveChurn)
	minR := min(w.cfg.MinRedundancy, n)
	// Every applied move lowers the sorted vector of task loads, so the
	// loop ends; the cap only bounds time when gains become tiny.
	for iter := 0; w.moveChurn < budget && iter < 4*len(w.sl)+n; iter++ {
		h := hot.top()
		lh := w.tload[h]
		if lh <= 0 {
			return
		}
		// Gains below this are rounding noise, not progress.
		floor := lh * 1e-9
		best := candidate{}
		consider := func(c candidate) {
			if c.gain <= floor {
				return
			}
			c.score = c.gain / max(float64(c.cost), zeroCost)
			if best.kind == 0 || c.score > best.score {
				best = c
			}
		}
		// Moving or dropping a task's last slice would make it look new
		// to the next decision, which would hand it keys again.
		last := len(owned[h]) <= 1
		for _, si := range owned[h] {
			s := &w.sl[si]
			l := w.sload[si]
			if l == 0 {
				continue
			}
			ts := w.p.tasks(s)
			r := len(ts)
			sh := l / float64(r)
			width := s.end - s.start
			if c := cold.bestExcept(ts); c >= 0 {
				lc := w.tload[c]
				if !last {
					consider(candidate{kind: Reassign, slice: si, to: c, cost: width,
						gain: lh - max(lh-sh, lc+sh)})
				}
				if r < w.cfg.MaxRedundancy {
					ns := l / float64(r+1)
					consider(candidate{kind: AddReplica, slice: si, to: c, cost: width,
						gain: lh - max(lh-sh+ns, lc+ns)})
				}
			}
			if r > minR && !last {
				ns := l / float64(r-1)
				peak := lh - sh
				for _, t := range ts {
					if t != h {
						peak = max(peak, w.tload[t]-sh+ns)
					}
				}
				consider(candidate{kind: RemoveReplica, slice: si, to: -1, gain: lh - peak})
			}
		}
		if best.kind == 0 {
			if !w.makeRoom(h, owned, hot, cold, budget) {
				return
			}
			continue
		}
		w.apply(best, h, owned, hot, cold)
	}
}

// makeRoomTries bounds how many of the hottest task's slices makeRoom
// considers, hottest share first.
const makeRoomTries = 4

// makeRoom is the two-step move phase 4 falls back on when no single move
// helps: the coldest task is too warm to take a share of one of the
// hottest task's slices without becoming the hottest itself. It first
// sheds some of that cold task's slices to other tasks, none of which ends
// above the hottest task's new load, then replicates (or, at
// MaxRedundancy, reassigns) the slice to it. It reports whether it
// changed anything; every step lowers the hottest task's load or moves
// load between tasks below it, so phase 4 still ends.
func (w *weigher) makeRoom(h int32, owned [][]int32, hot, cold *taskHeap[float64], budget uint64) bool {
	lh := w.tload[h]
	cands := slices.Clone(owned[h])
	slices.SortFunc(cands, func(a, b int32) int {
		return cmp.Compare(w.sload[b]/float64(w.sl[b].n), w.sload[a]/float64(w.sl[a].n))
	})
	last := len(owned[h]) <= 1
	for _, si := range cands[:min(len(cands), makeRoomTries)] {
		s := &w.sl[si]
		l := w.sload[si]
		r := int(s.n)
		if l == 0 {
			break
		}
		sh := l / float64(r)
		c := cold.bestExcept(w.p.tasks(s))
		if c < 0 {
			continue
		}
		kind, ns, hNew := AddReplica, l/float64(r+1), lh-sh+l/float64(r+1)
		if r >= w.cfg.MaxRedundancy {
			if last {
				continue
			}
			kind, ns, hNew = Reassign, sh, lh-sh
		}
		// Ideally c ends no higher than h will. When h serves little
		// but this slice, that would empty c, so settle for halving the
		// gap to h: the move still lowers the peak, and the next round
		// moves c's remaining load on.
		target := max(hNew-ns, (lh-ns)/2)
		ceiling := max(hNew, target+ns) // no task ends above this
		if target <= 0 || w.tload[c] <= target {
			continue // a plain move would have done; nothing to gain here
		}
		width := s.end - s.start
		if w.moveChurn+width > budget {
			continue
		}
		need := w.tload[c] - target
		// The cold task's slices that can go, hottest share first, each
		// to the coldest task that does not serve it yet.
		var shed []int32
		var sum float64
		mine := slices.Clone(owned[c])
		slices.SortFunc(mine, func(a, b int32) int {
			return cmp.Compare(w.sload[b]/float64(w.sl[b].n), w.sload[a]/float64(w.sl[a].n))
		})
		for _, ci := range mine {
			if ci == si || len(owned[c])-len(shed) <= 1 {
				continue
			}
			csh := w.sload[ci] / float64(w.sl[ci].n)
			if csh == 0 || sum+csh > need+target { // overshooting only moves the problem
				continue
			}
			shed = append(shed, ci)
			sum += csh
			if sum >= need {
				break
			}
		}
		if sum < need {
			continue
		}
		var cost uint64 = width
		for _, ci := range shed {
			cost += w.sl[ci].end - w.sl[ci].start
		}
		if w.moveChurn+cost > budget {
			continue
		}
		moved := false
		for _, ci := range shed {
			cs := w.p.tasks(&w.sl[ci])
			csh := w.sload[ci] / float64(len(cs))
			d := cold.bestExcept(insertID(cs, c))
			if d < 0 || w.tload[d]+csh >= ceiling {
				continue
			}
			w.apply(candidate{kind: Reassign, slice: ci, to: d, cost: w.sl[ci].end - w.sl[ci].start}, c, owned, hot, cold)
			moved = true
		}
		if w.tload[c]+ns < lh {
			w.apply(candidate{kind: kind, slice: si, to: c, cost: width}, h, owned, hot, cold)
			return true
		}
		if moved {
			return true
		}
	}
	return false
}

// apply carries out a phase-4 move of slice c.slice off task h.
func (w *weigher) apply(c candidate, h int32, owned [][]int32, hot, cold *taskHeap[float64]) {
	s := &w.sl[c.slice]
	l := w.sload[c.slice]
	r := int(s.n)
	sh := l / float64(r)
	reason := fmt.Sprintf("task %q is the hottest (load %.4g); gain %.4g per key moved", w.p.live[h].Name, w.tload[h], c.score)
	fix := func(t int32) { hot.fix(t); cold.fix(t) }
	switch c.kind {
	case Reassign:
		w.p.withoutTask(s, h)
		w.p.withTask(s, c.to)
		w.tload[h] -= sh
		w.tload[c.to] += sh
		removeSlice(owned, h, c.slice)
		owned[c.to] = append(owned[c.to], c.slice)
		fix(h)
		fix(c.to)
		w.p.move(Reassign, s, h, c.to, reason)
	case AddReplica:
		ns := l / float64(r+1)
		for _, t := range w.p.tasks(s) {
			w.tload[t] += ns - sh
			fix(t)
		}
		w.p.withTask(s, c.to)
		w.tload[c.to] += ns
		owned[c.to] = append(owned[c.to], c.slice)
		fix(c.to)
		w.p.move(AddReplica, s, -1, c.to, reason)
	case RemoveReplica:
		ns := l / float64(r-1)
		w.p.withoutTask(s, h)
		w.tload[h] -= sh
		fix(h)
		for _, t := range w.p.tasks(s) {
			w.tload[t] += ns - sh
			fix(t)
		}
		removeSlice(owned, h, c.slice)
		w.p.move(RemoveReplica, s, h, -1, reason)
	}
	w.moveChurn += c.cost
}

func index(ts []int32, t int32) int {
	i, _ := slices.BinarySearch(ts, t)
	return i
}

// insertID returns the sorted ids ts with t added, in a new array.
func insertID(ts []int32, t int32) []int32 {
	i := index(ts, t)
	out := make([]int32, 0, len(ts)+1)
	out = append(out, ts[:i]...)
	out = append(out, t)
	return append(out, ts[i:]...)
}

func removeSlice(owned [][]int32, t, si int32) {
	if i := slices.Index(owned[t], si); i >= 0 {
		owned[t] = slices.Delete(owned[t], i, i+1)
	}
}

// split is phase 5. Slices with at least SplitLoadFactor times the mean
// slice load (measured when the phase starts) split at their load median,
// and the halves split again while they are still that hot, hottest
// first, as long as the job stays below MaxSlicesPerTask slices per task.
// A job with fewer than MinSlicesPerTask slices per task then has its
// hottest (and, among equally loaded ones, widest) slices split until it
// reaches that count: splitting moves no key, and the finer slices are
// what later load measurements and moves work with.
func (w *weigher) split() {
	n := len(w.p.live)
	ceiling := w.cfg.MaxSlicesPerTask * n
	floor := min(w.cfg.MinSlicesPerTask*n, ceiling)
	if len(w.sl) >= ceiling || w.total == 0 {
		return
	}
	mean := w.total / float64(len(w.sl))
	threshold := w.cfg.SplitLoadFactor * mean
	refine := len(w.sl) < floor
	splittable := func(i int) bool {
		return w.sl[i].end-w.sl[i].start >= 2 && (refine || w.sload[i] >= threshold)
	}
	// Each split pops one piece and pushes at most two, so the heap holds
	// at most the candidates plus the splits made.
	cands := 0
	for i := range w.sl {
		if splittable(i) {
			cands++
		}
	}
	splits := min(ceiling-len(w.sl), cands) // a first guess; append grows it
	h := &pieceHeap{items: make([]piece, 0, cands+splits)}
	li := 0 // slices and load entries are both sorted: one sweep finds each first entry
	for i := range w.sl {
		if splittable(i) {
			li = w.load.after(w.sl[i].start, li)
			h.items = append(h.items, piece{slice: int32(i), li: int32(li), start: w.sl[i].start, end: w.sl[i].end, load: w.sload[i]})
		}
	}
	h.init()
	count := len(w.sl)
	done := make([]piece, 0, 2*splits) // final pieces of split slices
	split := make([]int8, len(w.sl))   // 1: split while hot; 2: only to refine
	for count < ceiling && len(h.items) > 0 {
		top := h.items[0]
		hot := top.load >= threshold
		if !hot && count >= floor {
			break
		}
		h.pop()
		at, lower := medianKeyFrom(w.load, int(top.li), top.start, top.end, top.load)
		lower = min(lower, top.load)
		// When one measurement covers the whole piece, its halves' loads
		// are only the even-spread estimate: splitting them again would
		// learn nothing until the next window measures them (the paper
		// splits a hot slice once per decision). Refining to the minimum
		// slice count still may.
		final := count+1 >= floor && w.load.coversFrom(int(top.li), top.start, top.end)
		if split[top.slice] == 0 {
			split[top.slice] = 2
		}
		if hot {
			split[top.slice] = 1
		}
		count++
		for _, half := range [2]piece{
			{slice: top.slice, li: top.li, start: top.start, end: at, load: lower},
			{slice: top.slice, li: int32(w.load.after(at, int(top.li))), start: at, end: top.end, load: max(top.load-lower, 0)},
		} {
			if half.end-half.start >= 2 && !final {
				h.push(half)
			} else {
				done = append(done, half)
			}
		}
	}
	if count == len(w.sl) {
		return
	}
	for _, p := range h.items {
		if split[p.slice] != 0 {
			done = append(done, p)
		}
	}
	done = byKey(done, len(w.sl))
	hotReason := fmt.Sprintf("slice load is at least %g times the mean slice load %.4g; split at load medians until each piece is below that or the job has %d slices per task",
		w.cfg.SplitLoadFactor, mean, w.cfg.MaxSlicesPerTask)
	refineReason := fmt.Sprintf("the job has fewer than %d slices per task; split for finer load measurements", w.cfg.MinSlicesPerTask)
	// Widen in place from the back (when there is capacity, no copy):
	// every slice moves up by the number of pieces added below it.
	old := len(w.sl)
	w.sl = slices.Grow(w.sl, count-old)[:count]
	w.sload = slices.Grow(w.sload, count-old)[:count]
	dst := count - 1
	j := len(done) - 1
	nsplit := 0
	for _, k := range split {
		if k != 0 {
			nsplit++
		}
	}
	w.p.moves = slices.Grow(w.p.moves, nsplit)
	first := len(w.p.moves)
	for i := old - 1; i >= 0; i-- {
		if split[i] == 0 {
			w.sl[dst], w.sload[dst] = w.sl[i], w.sload[i]
			dst--
			continue
		}
		s := w.sl[i]
		reason := hotReason
		if split[i] == 2 {
			reason = refineReason
		}
		w.p.moves = append(w.p.moves, Move{Kind: Split, Start: s.start, End: s.end, Reason: reason})
		// The pieces share the task list: later edits write a new one
		// (see planner.setTasks).
		for ; j >= 0 && done[j].slice == int32(i); j-- {
			w.sl[dst] = wslice{start: done[j].start, end: done[j].end, off: s.off, n: s.n}
			w.sload[dst] = done[j].load
			dst--
		}
	}
	slices.Reverse(w.p.moves[first:]) // recorded from the top down
}

// byKey orders pieces by key. Pieces of different slices do not overlap
// and slices are in key order, so it groups them by slice in one counting
// pass and then sorts each slice's few pieces.
func byKey(pieces []piece, nslices int) []piece {
	end := make([]int32, nslices+1) // end[i+1]: end of slice i's group
	for _, p := range pieces {
		end[p.slice+1]++
	}
	for i := range nslices {
		end[i+1] += end[i]
	}
	out := make([]piece, len(pieces))
	for _, p := range pieces {
		out[end[p.slice]] = p
		end[p.slice]++
	}
	// end[i] is now where slice i's group ends.
	lo := int32(0)
	for i := range nslices {
		switch g := out[lo:end[i]]; {
		case len(g) > 16:
			slices.SortFunc(g, func(a, b piece) int { return cmp.Compare(a.start, b.start) })
		case len(g) > 1:
			for a := 1; a < len(g); a++ { // insertion sort: groups are small
				for b := a; b > 0 && g[b].start < g[b-1].start; b-- {
					g[b], g[b-1] = g[b-1], g[b]
				}
			}
		}
		lo = end[i]
	}
	return out
}

// piece is a part of slice number slice that phase 5 may split further.
type piece struct {
	slice      int32
	li         int32 // the first load entry ending after start
	start, end SliceKey
	load       float64
}

// pieceHeap orders pieces hottest first, then widest, then by key.
type pieceHeap struct{ items []piece }

func (h *pieceHeap) before(a, b *piece) bool {
	if a.load != b.load {
		return a.load > b.load
	}
	if wa, wb := a.end-a.start, b.end-b.start; wa != wb {
		return wa > wb
	}
	return a.start < b.start
}

func (h *pieceHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pieceHeap) push(p piece) {
	h.items = append(h.items, p)
	for i := len(h.items) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.before(&h.items[i], &h.items[parent]) {
			break
		}
		h.items[i], h.items[parent] = h.items[parent], h.items[i]
		i = parent
	}
}

func (h *pieceHeap) pop() {
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	h.down(0)
}

func (h *pieceHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h.items) {
			return
		}
		c := l
		if r := l + 1; r < len(h.items) && h.before(&h.items[r], &h.items[l]) {
			c = r
		}
		if !h.before(&h.items[c], &h.items[i]) {
			return
		}
		h.items[i], h.items[c] = h.items[c], h.items[i]
		i = c
	}
}

// medianKey is the key that cuts [start, end), of load total, into two
// halves of equal load, taking load as even within each entry; it falls
// back to the midpoint when the median is an end of the range.
func medianKey(load Load, start, end SliceKey, total float64) (SliceKey, float64) {
	return medianKeyFrom(load, load.after(start, 0), start, end, total)
}

// medianKeyFrom is medianKey given i, the first entry of load ending after
// start, so that phase 5 need not search for it.
func medianKeyFrom(load Load, i int, start, end SliceKey, total float64) (SliceKey, float64) {
	mid := start + (end-start)/2
	if total <= 0 {
		return mid, 0
	}
	half := total / 2
	var sum float64
	for ; i < len(load) && load[i].Start < end; i++ {
		e := &load[i]
		a, b := max(e.Start, start), min(e.End, end)
		if a >= b {
			continue
		}
		part := e.Load * float64(b-a) / float64(e.End-e.Start)
		if sum+part >= half && part > 0 {
			frac := (half - sum) / part
			if at := a + SliceKey(math.Round(frac*float64(b-a))); a < at && at < b {
				return at, sum + e.Load*float64(at-a)/float64(e.End-e.Start)
			}
			// The median falls on an edge of a narrow entry (a single hot
			// key, say): cut at whichever edge balances the halves better,
			// so the key ends up alone rather than halving empty space.
			best, bestLower, bestPeak := mid, -1.0, math.Inf(1)
			for _, c := range [2]struct {
				at    SliceKey
				lower float64
			}{{a, sum}, {b, sum + part}} {
				if peak := max(c.lower, total-c.lower); start < c.at && c.at < end && peak < bestPeak {
					best, bestLower, bestPeak = c.at, c.lower, peak
				}
			}
			if bestLower < 0 {
				return mid, load.In(start, mid)
			}
			return best, bestLower
		}
		sum += part
	}
	return mid, load.In(start, mid)
}
