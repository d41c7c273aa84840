package assign

import (
	"slices"
	"strconv"
)

// Bounds of makeRoom. One call plans at most makeRoomTries ×
// makeRoomReceivers × (capacity classes, at most maxCapacityClasses)
// steps. Each looks at the receiver's makeRoomScan hottest shares (found
// in one pass over its slices, once per receiver and call) and sheds at
// most makeRoomSheds of them; a shed costs at most two receiver look-ups
// and a heap fix for each task it changes.
const (
	// makeRoomTries: the hottest task's slices makeRoom looks for room
	// for, hottest share first.
	makeRoomTries = 4
	// makeRoomReceivers: for each of them, the coldest tasks of each
	// capacity it tries to make room on. The replicas of one hot slice sit
	// at the same utilisation and often have nothing else to shed, so it
	// looks past the first few.
	makeRoomReceivers = 8
	// makeRoomScan: the receiver's hottest shares it may shed.
	makeRoomScan = 16
	// makeRoomSheds: the most of them one step sheds.
	makeRoomSheds = 4
	// makeRoomAbove: steps are tried only while the hottest task's
	// utilisation is more than this fraction above the job's (its load
	// over its capacity). A step moves several keys to take a little off
	// the peak; close to balance that costs more churn than it gains,
	// and single moves still even out what they can.
	makeRoomAbove = 0.05
)

// roomPlan is a step makeRoom may take: its moves in order, the key churn
// they cost, the highest utilisation any task they change ends at, and
// the step's score, gain per key (or byte) moved as phase 4 ranks single
// moves.
type roomPlan struct {
	moves []loadMove
	keys  uint64
	peak  float64
	score float64
	// touched is each task the plan changes, with its utilisation and
	// bytes before, while planRoom plans it.
	touched []touchedTask
}

// touchedTask is a task a plan changes, with its utilisation and bytes
// before the plan.
type touchedTask struct {
	t     int32
	u, by float64
}

// makeRoom is the compound step phase 4 falls back on when no single move
// helps: every task that could take a share of one of the hottest task
// h's slices would end hotter than h is now. Typically h holds a hot key
// alone (on a task of a larger capacity, say) that only a task already
// nearly as busy could share. The step gives such a task c the share (a
// replica, or the slice at MaxRedundancy) and has c shed enough of its own
// slices to end below h: to other tasks, or to h itself, which has just
// given load up, making the step a swap.
//
// c sheds its hottest shares first, each by whichever move takes the most
// load off it: dropping its replica (above MinRedundancy; this moves no
// key), reassigning the slice, or replicating it (below MaxRedundancy),
// since a share too large for any task whole may fit once halved. The
// share goes to the task that would end least utilised, chosen as if the
// step's earlier moves had landed, and only if every task it loads ends
// below both h's present utilisation and c's before the shed. c stops
// shedding once it is no longer the busiest task the step changes.
//
// makeRoom plans such a step for each of h's makeRoomTries hottest slices
// and each of the makeRoomReceivers coldest tasks of each capacity not
// serving it, and takes the step with the best gain (h's utilisation less
// the highest any task it changes ends at) per key moved, or per byte
// under VictimGainPerByte. Every task a step changes ends below h's
// present utilisation, so the sorted vector of utilisations falls and
// phase 4 still ends. A step keeps what single moves keep: pins, cordons
// and drains, memory limits, the redundancy bounds and the churn budget.
// makeRoom tries nothing while h is within makeRoomAbove of the job's
// utilisation, and reports whether it changed anything.
func (w *weigher) makeRoom(h int32, owned [][]ownedSlice, hot *taskHeap[float64], cold *receivers, budget uint64) bool {
	lh := w.tload[h]
	if lh <= (1+makeRoomAbove)*w.total/w.capacity {
		return false
	}
	ceiling := lh - lh*1e-9 // gains below lh·1e-9 are rounding noise, as in moveGreedy
	last := len(owned[h]) <= 1
	w.shares, w.shareOf = w.shares[:0], w.shareOf[:0]
	// The plans' memory is reused from call to call.
	best, plan := &w.room[0], &w.room[1]
	best.moves = best.moves[:0]
	found := false
	w.tries = w.hottestShares(w.tries[:0], owned[h], makeRoomTries)
	for _, si := range w.tries {
		s := &w.sl[si]
		l := w.sload[si]
		r := int(s.n)
		first, give := loadMove{kind: AddReplica, slice: si, from: -1}, l/float64(r+1)
		if r >= w.cfg.MaxRedundancy {
			if last || w.p.pins != nil && w.p.pinnedTo(s.start, s.end) == h {
				continue
			}
			first.kind, first.from, give = Reassign, h, l/float64(r)
		}
		if w.moveChurn+(s.end-s.start) > budget {
			continue
		}
		for _, c := range cold.ranked(w.p.tasks(s), give, makeRoomReceivers) {
			if give*w.inv[c] >= ceiling {
				continue // c would end too hot with nothing else
			}
			mine := w.sharesOf(c, owned[c])
			first.to = c
			if w.planRoom(plan, lh, ceiling, first, mine, cold, budget) && (!found || plan.score > best.score) {
				best.moves = append(best.moves[:0], plan.moves...)
				best.keys, best.peak, best.score = plan.keys, plan.peak, plan.score
				found = true
			}
		}
	}
	if !found {
		return false
	}
	room := roomReason(w.p.live[best.moves[0].to].Name, w.p.live[h].Name)
	for i, m := range best.moves {
		reason := room
		if i == 0 {
			reason = w.hottestReason(h, best.score)
		}
		w.apply(m, w.churnOf(m), reason, owned, hot, cold)
	}
	return true
}

// roomReason is the reason of a step's moves after its first: task c
// makes room for the load of the hottest task h. Spelt as fmt's %q would,
// without its allocations (a large job takes thousands of steps).
func roomReason(c, h string) string {
	var buf [128]byte
	b := append(buf[:0], "task "...)
	b = strconv.AppendQuote(b, c)
	b = append(b, " makes room for load of the hottest task "...)
	b = strconv.AppendQuote(b, h)
	return string(b)
}

// sharesOf returns receiver c's makeRoomScan hottest shares among mine,
// its slices, found once per makeRoom call and kept in w.shares.
func (w *weigher) sharesOf(c int32, mine []ownedSlice) []int32 {
	for _, s := range w.shareOf {
		if s.t == c {
			return w.shares[s.from:s.to:s.to]
		}
	}
	from := len(w.shares)
	w.shares = w.hottestShares(w.shares, mine, makeRoomScan)
	w.shareOf = append(w.shareOf, receiverShares{t: c, from: from, to: len(w.shares)})
	return w.shares[from:len(w.shares):len(w.shares)]
}

// receiverShares says where in w.shares receiver t's hottest shares are.
type receiverShares struct {
	t        int32
	from, to int
}

// hottestShares appends to dst up to k of the slices in mine that have
// load, largest share first, in one pass over mine.
func (w *weigher) hottestShares(dst []int32, mine []ownedSlice, k int) []int32 {
	share := func(si int32) float64 { return w.sload[si] / float64(w.sl[si].n) }
	base := len(dst)
	for _, o := range mine {
		si := o.slice
		if o.load == 0 || len(dst)-base == k && o.load/float64(o.n) <= share(dst[len(dst)-1]) {
			continue
		}
		dst = append(dst, si)
		i := len(dst) - 1
		for ; i > base && share(dst[i-1]) < share(si); i-- {
			dst[i] = dst[i-1]
		}
		dst[i] = si
		dst = dst[:min(len(dst), base+k)]
	}
	return dst
}

// churnOf is the key churn of move m: the width of its slice, unless it
// only drops a replica.
func (w *weigher) churnOf(m loadMove) uint64 {
	if m.kind == RemoveReplica {
		return 0
	}
	return w.sl[m.slice].end - w.sl[m.slice].start
}

// planRoom plans into plan the step that starts with first, a move of one
// of the hottest task's slices (its utilisation lh) onto task c =
// first.to, and then sheds c's slices among mine, c's hottest shares. It
// reports whether the step may be taken: every task it changes ends below
// ceiling, c within its memory limit, and its churn within budget. Planned
// moves change utilisations and bytes as if applied, so that later choices
// see earlier ones; they are undone before it returns.
func (w *weigher) planRoom(plan *roomPlan, lh, ceiling float64, first loadMove, mine []int32, cold *receivers, budget uint64) bool {
	plan.touched = plan.touched[:0]
	do := func(m loadMove) {
		w.effect(m, func(t int32, du, db float64) {
			if !slices.ContainsFunc(plan.touched, func(s touchedTask) bool { return s.t == t }) {
				s := touchedTask{t: t, u: w.tload[t]}
				if w.p.mem != nil {
					s.by = w.p.mem.bytes[t]
				}
				plan.touched = append(plan.touched, s)
			}
			w.tload[t] += du
			if db != 0 {
				w.p.mem.add(t, db)
			}
			cold.fix(t)
		})
		plan.moves = append(plan.moves, m)
		plan.keys += w.churnOf(m)
	}
	defer func() {
		for i := len(plan.touched) - 1; i >= 0; i-- {
			s := plan.touched[i]
			w.tload[s.t] = s.u
			if w.p.mem != nil {
				w.p.mem.bytes[s.t] = s.by
			}
			cold.fix(s.t)
		}
	}()
	// peak is the highest utilisation the step leaves a task other than
	// skip at (-1: any task).
	peak := func(skip int32) float64 {
		var m float64
		for _, s := range plan.touched {
			if s.t != skip {
				m = max(m, w.tload[s.t])
			}
		}
		return m
	}
	c := first.to
	plan.moves, plan.keys = plan.moves[:0], 0
	do(first)
	for _, cj := range mine {
		if len(plan.moves) > makeRoomSheds || w.tload[c] <= peak(c) {
			break
		}
		if m, ok := w.shed(c, cj, min(w.tload[c], ceiling), budget-w.moveChurn-plan.keys, cold); ok {
			do(m)
		}
	}
	plan.peak = peak(-1)
	if plan.peak >= ceiling || w.p.mem.over(c) || w.moveChurn+plan.keys > budget {
		return false
	}
	cost := float64(plan.keys)
	if w.cfg.Victim == VictimGainPerByte && w.sbytes != nil && plan.keys > 0 {
		cost = 0
		for _, m := range plan.moves {
			if m.kind != RemoveReplica {
				cost += w.sbytes[m.slice]
			}
		}
	}
	plan.score = (lh - plan.peak) / max(cost, zeroCost)
	return true
}

// shed returns the move that takes the most of task c's share of slice cj
// off c while every task it loads ends below limit and it moves at most
// room keys: dropping c's replica (above MinRedundancy), reassigning the
// slice, or replicating it (below MaxRedundancy), each to the task that
// would end least utilised. A pin to c keeps the slice on c. It reports
// false when no move fits.
func (w *weigher) shed(c, cj int32, limit float64, room uint64, cold *receivers) (loadMove, bool) {
	s := &w.sl[cj]
	l := w.sload[cj]
	ts := w.p.tasks(s)
	r := len(ts)
	keep := w.p.pins != nil && w.p.pinnedTo(s.start, s.end) == c
	fits := func(m loadMove) bool {
		ok := true
		w.effect(m, func(t int32, du, _ float64) {
			if du > 0 && w.tload[t]+du >= limit {
				ok = false
			}
		})
		return ok
	}
	// Dropping a replica sheds as much as reassigning and moves no key.
	if m := (loadMove{kind: RemoveReplica, slice: cj, from: c, to: -1}); r > min(w.cfg.MinRedundancy, len(w.p.live)) && !keep && fits(m) {
		return m, true
	}
	if s.end-s.start > room {
		return loadMove{}, false
	}
	b := w.bytes(cj)
	if !keep {
		if d := cold.best(ts, l/float64(r), b); d >= 0 {
			if m := (loadMove{kind: Reassign, slice: cj, from: c, to: d}); fits(m) {
				return m, true
			}
		}
	}
	if r < w.cfg.MaxRedundancy {
		if d := cold.best(ts, l/float64(r+1), b); d >= 0 {
			if m := (loadMove{kind: AddReplica, slice: cj, from: -1, to: d}); fits(m) {
				return m, true
			}
		}
	}
	return loadMove{}, false
}
