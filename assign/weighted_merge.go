package assign

import "slices"

// merge is phase 3. One pass over the slices in key order joins each slice
// to its left neighbour when both are cold; the joined slice keeps the
// task set that moves fewer keys.
func (w *weigher) merge() {
	defer func() { w.held = nil }() // later phases do not keep it
	floor := w.cfg.sliceFloor(len(w.p.live))
	if len(w.sl) <= floor || len(w.sl) < 2 {
		return
	}
	ceiling := w.hottest()
	if w.held == nil {
		w.countHeld()
	}
	budget := keys(w.cfg.MergeChurn)
	var spent uint64
	count := len(w.sl)
	// cold is the load below which two adjacent slices merge: the mean
	// slice load, times MergeLoadFactor, at count slices.
	cold := w.cfg.MergeLoadFactor * w.total / float64(count)
	out, outLoad := w.sl[:1], w.sload[:1]
	var outBytes []float64
	if w.sbytes != nil {
		outBytes = w.sbytes[:1]
	}
	for i := 1; i < len(w.sl); i++ {
		a, b := &out[len(out)-1], w.sl[i]
		la, lb := outLoad[len(out)-1], w.sload[i]
		var ba, bb float64
		if outBytes != nil {
			ba, bb = outBytes[len(out)-1], w.sbytes[i]
		}
		pinned := w.p.pins != nil && (w.p.pinnedTo(a.start, a.end) >= 0 || w.p.pinnedTo(b.start, b.end) >= 0)
		// Joining two slices of one task each, of different tasks, moves
		// the keys of one of them: once what is left of the budget is
		// less than either, they stay apart (mergeTasks would say so; a
		// large job spends the budget early and then meets such pairs by
		// the hundred thousand).
		rem := budget - spent
		apart := a.n == 1 && b.n == 1 && w.p.ids[a.off] != w.p.ids[b.off] && a.end-a.start > rem && b.end-b.start > rem
		if count > floor && !pinned && !apart && la+lb < cold {
			if by, cost, ok := w.mergeTasks(a, la, ba, &b, lb, bb, ceiling, rem); ok {
				off, n := by.off, by.n
				w.recordMerge(a, la, ba, &b, lb, bb, w.p.tasks(by))
				spent += cost
				a.end = b.end
				a.off, a.n = off, n
				outLoad[len(out)-1] = la + lb
				if outBytes != nil {
					outBytes[len(out)-1] = ba + bb
				}
				count--
				cold = w.cfg.MergeLoadFactor * w.total / float64(count)
				continue
			}
		}
		out = append(out, b)
		outLoad = append(outLoad, lb)
		if outBytes != nil {
			outBytes = append(outBytes, bb)
		}
	}
	clear(w.sl[len(out):])
	w.sl, w.sload, w.sbytes = out, outLoad, outBytes
}

// countHeld counts the slices each task serves (w.held): a merge must not
// take a task's last slice, or the next decision would treat the task as
// new and hand it keys again.
func (w *weigher) countHeld() {
	w.held = make([]int32, len(w.p.live))
	for i := range w.sl {
		for _, t := range w.p.tasks(&w.sl[i]) {
			w.held[t]++
		}
	}
}

// mergeTasks picks the tasks to serve the union of adjacent slices a and b
// (of loads la, lb and bytes ba, bb): a's or b's (returned as the slice
// whose tasks they are), whichever moves fewer keys (a's on a tie),
// provided the keys moved fit the budget, no task ends above ceiling and
// every task has room for the state it gains.
func (w *weigher) mergeTasks(a *wslice, la, ba float64, b *wslice, lb, bb float64, ceiling float64, budget uint64) (*wslice, uint64, bool) {
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
			l := w.tload[t] + w.inv[t]*((la+lb)/float64(len(tasks))-share(t, la, at)-share(t, lb, bt))
			if l > ceiling || !w.p.isOpen(t) && gained(t, at, 1)+gained(t, bt, 1) > 0 || !w.p.mem.fits(t, gained(t, at, ba)+gained(t, bt, bb)) {
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

// gained is the bytes task t gains by taking a slice of bytes b that the
// tasks ts serve: b unless t is among them.
func gained(t int32, ts []int32, b float64) float64 {
	if _, ok := slices.BinarySearch(ts, t); ok {
		return 0
	}
	return b
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

// recordMerge updates task loads and bytes for merging a and b into one
// slice served by tasks, and records the moves.
func (w *weigher) recordMerge(a *wslice, la, ba float64, b *wslice, lb, bb float64, tasks []int32) {
	at, bt := w.p.tasks(a), w.p.tasks(b)
	if w.p.mem != nil {
		for _, t := range at {
			w.p.mem.add(t, -gained(t, tasks, ba))
		}
		for _, t := range bt {
			w.p.mem.add(t, -gained(t, tasks, bb))
		}
		for _, t := range tasks {
			w.p.mem.add(t, gained(t, at, ba)+gained(t, bt, bb))
		}
	}
	for _, t := range at {
		w.tload[t] -= la / float64(len(at)) * w.inv[t]
	}
	for _, t := range bt {
		w.tload[t] -= lb / float64(len(bt)) * w.inv[t]
	}
	for _, t := range tasks {
		w.tload[t] += (la + lb) / float64(len(tasks)) * w.inv[t]
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
