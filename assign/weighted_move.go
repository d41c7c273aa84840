package assign

import (
	"cmp"
	"fmt"
	"slices"
)

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
