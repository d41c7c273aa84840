package assign

import (
	"cmp"
	"slices"
	"strconv"
)

// zeroCost stands in for the churn of a move that moves no key, so that
// ranking by gain per key churned still orders free moves by gain. It is a
// fraction of one key.
const zeroCost = 0.5

// loadMove is a phase-4 move of slice number slice: Reassign from task
// from to task to, AddReplica to task to (from is -1), or RemoveReplica of
// task from (to is -1).
type loadMove struct {
	kind     MoveKind
	slice    int32
	from, to int32
}

// candidate is a move phase 4 considers off the hottest task.
type candidate struct {
	loadMove
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
	owned, flat := w.ownedSlices()
	defer func() { w.p.sc.owned = flat }()
	hot := newTaskHeap(w.tload, true)
	cold := w.newReceivers()
	// With one capacity and no task that may refuse a receiver (memory
	// limits, cordons), the best receiver of a slice the hottest task
	// serves alone is the coldest other task, whatever the share: it is
	// found once a step rather than once for each of the task's slices.
	oneClass := len(cold.heaps) == 1 && w.p.mem == nil && w.p.closed == nil
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
			cost := float64(c.cost)
			if w.cfg.Victim == VictimGainPerByte && w.sbytes != nil && c.cost > 0 {
				cost = w.sbytes[c.slice]
			}
			c.score = c.gain / max(cost, zeroCost)
			if best.kind == 0 || c.score > best.score {
				best = c
			}
		}
		alone := int32(-2)  // the best receiver of a slice of h's alone; -2: not looked for
		var alone1 [1]int32 // the tasks of a slice h serves alone
		receiver := func(ts []int32, l, b float64) int32 {
			if !oneClass || len(ts) != 1 {
				return cold.best(ts, l, b)
			}
			if alone == -2 {
				alone = cold.best(ts, l, b)
			}
			return alone
		}
		// Moving or dropping a task's last slice would make it look new
		// to the next decision, which would hand it keys again.
		last := len(owned[h]) <= 1
		for _, o := range owned[h] {
			si, l := o.slice, o.load
			if l == 0 {
				continue
			}
			ts := alone1[:]
			if o.n > 1 {
				ts = w.p.tasks(&w.sl[si])
			} else {
				alone1[0] = h
			}
			r := len(ts)
			sh := l / float64(r)
			width := o.width
			// Shares are loads; times inv they are utilisations.
			ih := w.inv[h]
			sb := w.bytes(si)
			// An operator's pin keeps the slice on its task.
			keep := w.p.pins != nil && w.p.pinnedTo(w.sl[si].start, w.sl[si].end) == h
			if c := receiver(ts, sh, sb); c >= 0 && !last && !keep {
				consider(candidate{loadMove: loadMove{kind: Reassign, slice: si, from: h, to: c}, cost: width,
					gain: lh - max(lh-sh*ih, w.tload[c]+sh*w.inv[c])})
			}
			if ns := l / float64(r+1); r < w.cfg.MaxRedundancy {
				if c := receiver(ts, ns, sb); c >= 0 {
					consider(candidate{loadMove: loadMove{kind: AddReplica, slice: si, from: -1, to: c}, cost: width,
						gain: lh - max(lh-(sh-ns)*ih, w.tload[c]+ns*w.inv[c])})
				}
			}
			if r > minR && !last && !keep {
				ns := l / float64(r-1)
				peak := lh - sh*ih
				for _, t := range ts {
					if t != h {
						peak = max(peak, w.tload[t]+(ns-sh)*w.inv[t])
					}
				}
				consider(candidate{loadMove: loadMove{kind: RemoveReplica, slice: si, from: h, to: -1}, gain: lh - peak})
			}
		}
		if best.kind == 0 {
			if !w.makeRoom(h, owned, hot, cold, budget) {
				return
			}
			continue
		}
		w.apply(best.loadMove, best.cost, w.hottestReason(h, best.score), owned, hot, cold)
	}
}

// effect calls f with each task whose utilisation move m changes, by how
// much, and by how many bytes the state it holds changes. Applying a move
// and planning one (makeRoom) both go through it, so a planned step ends
// at exactly the utilisations it was judged by.
func (w *weigher) effect(m loadMove, f func(t int32, du, db float64)) {
	ts := w.p.tasks(&w.sl[m.slice])
	l := w.sload[m.slice]
	r := len(ts)
	sh := l / float64(r)
	b := w.bytes(m.slice)
	switch m.kind {
	case Reassign:
		f(m.from, -sh*w.inv[m.from], -b)
		f(m.to, sh*w.inv[m.to], b)
	case AddReplica:
		ns := l / float64(r+1)
		for _, t := range ts {
			f(t, (ns-sh)*w.inv[t], 0)
		}
		f(m.to, ns*w.inv[m.to], b)
	case RemoveReplica:
		ns := l / float64(r-1)
		f(m.from, -sh*w.inv[m.from], -b)
		for _, t := range ts {
			if t != m.from {
				f(t, (ns-sh)*w.inv[t], 0)
			}
		}
	}
}

// apply carries out a phase-4 move that moves cost keys, recording it
// with reason.
func (w *weigher) apply(m loadMove, cost uint64, reason string, owned [][]ownedSlice, hot *taskHeap[float64], cold *receivers) {
	w.effect(m, func(t int32, du, db float64) {
		w.tload[t] += du
		if db != 0 {
			w.p.mem.add(t, db)
		}
		hot.fix(t)
		cold.fix(t)
	})
	s := &w.sl[m.slice]
	switch m.kind {
	case Reassign:
		w.p.withoutTask(s, m.from)
		w.p.withTask(s, m.to)
		owned[m.to] = append(owned[m.to], removeSlice(owned, m.from, m.slice))
	case AddReplica:
		w.p.withTask(s, m.to)
		owned[m.to] = append(owned[m.to], w.ownedSlice(m.slice))
	case RemoveReplica:
		w.p.withoutTask(s, m.from)
		removeSlice(owned, m.from, m.slice)
	}
	if m.kind != Reassign { // the slice's other tasks count one more or one fewer
		for _, t := range w.p.tasks(s) {
			i := slices.IndexFunc(owned[t], func(o ownedSlice) bool { return o.slice == m.slice })
			owned[t][i].n = s.n
		}
	}
	w.p.move(m.kind, s, m.from, m.to, reason)
	w.moveChurn += cost
}

// maxCapacityClasses bounds the capacity classes receivers keeps a heap
// for: a job whose tasks have more distinct capacities than this looks
// for receivers by utilisation alone, as if all had one capacity.
const maxCapacityClasses = 8

// receivers finds the task that would end least utilised after taking a
// share of load: the coldest task by utilisation is that task only when
// all tasks have one capacity, since a task of capacity 2 takes a share at
// half the utilisation of one of capacity 1. It keeps a heap of the tasks
// of each capacity, coldest first, and compares their tops.
type receivers struct {
	w     *weigher
	heaps []*taskHeap[float64]
	class []int32 // heap of each task id
	// out and ex are ranked's result and exclusion list, reused from
	// call to call.
	out, ex []int32
}

func (w *weigher) newReceivers() *receivers {
	r := &receivers{w: w, class: make([]int32, len(w.inv))}
	var invs []float64
	var members [][]int32
	for t, inv := range w.inv {
		i := slices.Index(invs, inv)
		if i < 0 {
			i = len(invs)
			invs = append(invs, inv)
			members = append(members, nil)
		}
		members[i] = append(members[i], int32(t))
		r.class[t] = int32(i)
	}
	if len(invs) > maxCapacityClasses {
		members = [][]int32{nil}
		clear(r.class)
	}
	for _, m := range members {
		r.heaps = append(r.heaps, newTaskHeapOf(w.tload, false, m))
	}
	return r
}

// fix restores order after task t's utilisation changed.
func (r *receivers) fix(t int32) { r.heaps[r.class[t]].fix(t) }

// ranked returns, for each capacity, the k coldest tasks not in excl
// (sorted ids), ordered by the utilisation each would end at after taking
// load l, least first. The result is valid until the next call.
func (r *receivers) ranked(excl []int32, l float64, k int) []int32 {
	out := r.out[:0]
	p := r.w.p
	// One exclusion list, grown in place.
	ex := r.ex[:0]
	for _, h := range r.heaps {
		ex = append(ex[:0], excl...)
		for n, try := 0, 0; n < k && try < k+fitTries; try++ {
			t := h.bestExcept(ex)
			if t < 0 {
				break
			}
			ex = slices.Insert(ex, index(ex, t), t)
			if p.isOpen(t) {
				out = append(out, t)
				n++
			}
		}
	}
	slices.SortFunc(out, func(a, b int32) int {
		return cmp.Or(cmp.Compare(r.w.tload[a]+l*r.w.inv[a], r.w.tload[b]+l*r.w.inv[b]), cmp.Compare(a, b))
	})
	r.out, r.ex = out, ex
	return out
}

// best returns the task not in excl (sorted ids) that would be least
// utilised after taking load l and has room for b bytes, ties to the lower
// id; -1 if none. With memory limits it looks at the fitTries coldest
// tasks of each capacity at most: a load move may give up on a receiver
// further down.
func (r *receivers) best(excl []int32, l, b float64) int32 {
	best, bestU := int32(-1), 0.0
	p := r.w.p
	for _, h := range r.heaps {
		t := h.bestExcept(excl)
		if ex := excl; p.mem != nil || p.closed != nil {
			for try := 0; t >= 0 && !(p.isOpen(t) && p.mem.fits(t, b)); try++ {
				if try == fitTries {
					t = -1
					break
				}
				ex = insertID(ex, t)
				t = h.bestExcept(ex)
			}
		}
		if t < 0 {
			continue
		}
		u := r.w.tload[t] + l*r.w.inv[t]
		if best < 0 || u < bestU || (u == bestU && t < best) {
			best, bestU = t, u
		}
	}
	return best
}

// hottestReason is the reason recorded for a move off the hottest task h:
// fmt's "task %q is the hottest (load %.4g); gain %.4g per key moved", or
// with the task's capacity and utilisation when its capacity is not 1,
// spelled with strconv (a steady-state decision records thousands).
func (w *weigher) hottestReason(h int32, score float64) string {
	var buf [160]byte
	b := append(buf[:0], "task "...)
	b = strconv.AppendQuote(b, w.p.live[h].Name)
	b = append(b, " is the hottest (load "...)
	if w.inv[h] == 1 {
		b = strconv.AppendFloat(b, w.tload[h], 'g', 4, 64)
	} else {
		b = strconv.AppendFloat(b, w.tload[h]/w.inv[h], 'g', 4, 64)
		b = append(b, ", capacity "...)
		b = strconv.AppendFloat(b, 1/w.inv[h], 'g', 4, 64)
		b = append(b, ": "...)
		b = strconv.AppendFloat(b, w.tload[h], 'g', 4, 64)
		b = append(b, " per unit"...)
	}
	b = append(b, "); gain "...)
	b = strconv.AppendFloat(b, score, 'g', 4, 64)
	b = append(b, " per key moved"...)
	return string(b)
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

// ownedSlice is a slice a task serves, as phase 4 reads it: its index in
// w.sl and what the scan of a task's slices needs of it, kept beside the
// index so that the scan reads one array in order, not three at random
// (a decision scans the hottest task's slices once a step, thousands of
// steps for a job of ten thousand tasks). Its load and width do not
// change during phase 4; apply keeps n.
type ownedSlice struct {
	slice int32
	n     int32   // the tasks serving it
	load  float64 // w.sload[slice]
	width uint64
}

// ownedSlice is slice si as phase 4 reads it.
func (w *weigher) ownedSlice(si int32) ownedSlice {
	s := &w.sl[si]
	return ownedSlice{slice: si, n: s.n, load: w.sload[si], width: s.end - s.start}
}

// ownedSlices returns the slices each task serves, by task id, in key
// order, as windows of one array with room for ownedSlack more: appending
// to a task's list past that copies only that list. A million slices are
// grouped in parts at once (a counting sort: each part counts its slices'
// tasks, then writes them after the parts before it), in the order one
// pass would. flat is the array of the windows, from the planner's
// scratch, for the caller to give back.
func (w *weigher) ownedSlices() (owned [][]ownedSlice, flat []ownedSlice) {
	n := len(w.p.live)
	k := parts(len(w.sl))
	counts := make([][]int32, k) // by part, then task
	inParts(len(w.sl), k, func(part, lo, hi int) {
		c := make([]int32, n)
		for i := lo; i < hi; i++ {
			for _, t := range w.p.tasks(&w.sl[i]) {
				c[t]++
			}
		}
		counts[part] = c
	})
	// Task t's window starts at start[t]; part p writes its slices of t
	// after those of the parts before it (counts becomes where).
	start := make([]int32, n+1)
	for t := range n {
		at := start[t]
		for _, c := range counts {
			at, c[t] = at+c[t], at
		}
		start[t+1] = at + ownedSlack
	}
	flat = reuse(&w.p.sc.owned, int(start[n]), int(start[n])) // the slack is written before it is read
	inParts(len(w.sl), k, func(part, lo, hi int) {
		next := counts[part]
		for i := lo; i < hi; i++ {
			o := w.ownedSlice(int32(i))
			for _, t := range w.p.tasks(&w.sl[i]) {
				flat[next[t]] = o
				next[t]++
			}
		}
	})
	owned = make([][]ownedSlice, n)
	for t := range n {
		owned[t] = flat[start[t] : start[t+1]-ownedSlack : start[t+1]]
	}
	return owned, flat
}

// ownedSlack is the room ownedSlices leaves after each task's slices: a
// receiver of moves takes a few before its list is copied.
const ownedSlack = 4

// removeSlice removes slice si from task t's slices and returns its entry.
func removeSlice(owned [][]ownedSlice, t, si int32) ownedSlice {
	i := slices.IndexFunc(owned[t], func(o ownedSlice) bool { return o.slice == si })
	o := owned[t][i]
	owned[t] = slices.Delete(owned[t], i, i+1)
	return o
}
