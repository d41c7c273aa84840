package assign

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// split is phase 5. Slices with at least SplitLoadFactor times the mean
// slice load (measured when the phase starts) split at their load median,
// and the halves split again while they are still that hot, hottest
// first, as long as the job stays below MaxSlicesPerTask slices per task
// and below MaxSlices.
// A job with fewer than MinSlicesPerTask slices per task then has its
// hottest (and, among equally loaded ones, widest) slices split until it
// reaches that count: splitting moves no key, and the finer slices are
// what later load measurements and moves work with.
func (w *weigher) split() {
	n := len(w.p.live)
	ceiling := w.cfg.sliceCeiling(n)
	floor := min(w.cfg.sliceFloor(n), ceiling)
	if len(w.sl) >= ceiling || w.total == 0 {
		return
	}
	mean := w.total / float64(len(w.sl))
	threshold := w.cfg.SplitLoadFactor * mean
	refine := len(w.sl) < floor
	// Which slices split, and why (see applySplits): from the scratch.
	split := reuse(&w.p.sc.marks, len(w.sl), len(w.sl))
	defer func() { w.p.sc.marks = split }()
	clear(split)
	if !refine {
		if done, count, ok := w.splitInOrder(ceiling, threshold, split); ok {
			w.applySplits(done, split, count, mean)
			return
		}
		clear(split)
	}
	w.splitHottestFirst(ceiling, floor, mean, threshold, refine, split)
}

// splitHottestFirst is split's pass in general: pieces of at least
// threshold load split hottest first (all pieces, when refine: the job
// has fewer than floor slices) until the job has ceiling slices. split,
// zeroed, has an entry per slice for applySplits' marks.
func (w *weigher) splitHottestFirst(ceiling, floor int, mean, threshold float64, refine bool, split []int8) {
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
	if refine {
		// Refining splits at least up to the floor, most pieces more
		// than once.
		splits = max(splits, min(floor, ceiling)-len(w.sl))
	}
	// The heap, the final pieces and their order by key are the scratch's.
	sc := w.p.sc
	h := &pieceHeap{items: reuse(&sc.heap, 0, cands+splits)}
	defer func() { sc.heap = h.items }()
	li := 0 // slices and load entries are both sorted: one sweep finds each first entry
	for i := range w.sl {
		if splittable(i) {
			li = w.load.after(w.sl[i].start, li)
			h.items = append(h.items, piece{slice: int32(i), li: int32(li), start: w.sl[i].start, end: w.sl[i].end, load: w.sload[i]})
		}
	}
	h.init()
	count := len(w.sl)
	done := reuse(&sc.done, 0, 2*splits) // final pieces of split slices
	defer func() { sc.done = done }()
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
	sc.sorted, sc.ends = byKey(reuse(&sc.sorted, len(done), len(done)), reuse(&sc.ends, len(w.sl)+1, len(w.sl)+1), done)
	w.applySplits(sc.sorted, split, count, mean)
}

// splitInOrder is split's pass over a job that has at least its floor of
// slices, so that no piece is split only to refine: every hot piece
// splits, slice by slice in key order and each slice's pieces lower
// first, with no heap and no sort of the pieces after. While the ceiling
// does not stop the splitting, hottest first and key order make the same
// pieces (each piece's split depends on that piece alone); ok is false
// when the ceiling would stop it, and the caller splits hottest first.
// done is the pieces of the slices split, in key order; it marks those
// slices in split (zeroed, an entry per slice) as applySplits reads
// them; count is the slices after. A million
// slices are split in parts at once, each part's pieces in key order
// after the part before's: the same pieces as in one pass.
func (w *weigher) splitInOrder(ceiling int, threshold float64, split []int8) (done []piece, count int, ok bool) {
	budget := ceiling - len(w.sl) // splits the ceiling allows
	k := parts(len(w.sl))
	type result struct {
		done   []piece
		splits int
		ok     bool
	}
	res := make([]result, k)
	// Each part appends its pieces to a buffer of the scratch's, and the
	// parts' pieces are joined in another: done is valid until the next
	// call.
	sc := w.p.sc
	for len(sc.pieces) < k {
		sc.pieces = append(sc.pieces, nil)
	}
	inParts(len(w.sl), k, func(part, lo, hi int) {
		r := &res[part]
		r.done, r.splits, r.ok = w.splitRange(lo, hi, budget, threshold, split, sc.pieces[part][:0])
		if r.ok {
			sc.pieces[part] = r.done
		}
	})
	count = len(w.sl)
	n := 0
	for _, r := range res {
		if !r.ok {
			return nil, 0, false
		}
		count += r.splits
		n += len(r.done)
	}
	if count > ceiling {
		return nil, 0, false
	}
	if k == 1 {
		return res[0].done, count, true
	}
	done = reuse(&sc.joined, 0, n)
	for _, r := range res {
		done = append(done, r.done...)
	}
	sc.joined = done
	return done, count, true
}

// splitRange is splitInOrder over slices [lo, hi): their pieces, in key
// order, appended to done, and the splits made; ok is false once it would
// make more than budget splits.
func (w *weigher) splitRange(lo, hi, budget int, threshold float64, split []int8, done []piece) (_ []piece, splits int, ok bool) {
	type item struct {
		piece
		final bool // not to be split again: a half too narrow or measured whole
	}
	var stack []item
	li := 0 // slices and load entries are both sorted: one sweep finds each first entry
	for i := lo; i < hi; i++ {
		s := &w.sl[i]
		if s.end-s.start < 2 || w.sload[i] < threshold {
			continue
		}
		li = w.load.after(s.start, li)
		stack = append(stack[:0], item{piece: piece{slice: int32(i), li: int32(li), start: s.start, end: s.end, load: w.sload[i]}})
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.final || top.load < threshold {
				done = append(done, top.piece)
				continue
			}
			if splits >= budget {
				return nil, 0, false
			}
			at, lower := medianKeyFrom(w.load, int(top.li), top.start, top.end, top.load)
			lower = min(lower, top.load)
			// As in split: a piece one measurement covers splits once.
			final := w.load.coversFrom(int(top.li), top.start, top.end)
			split[top.slice] = 1
			splits++
			upper := piece{slice: top.slice, li: int32(w.load.after(at, int(top.li))), start: at, end: top.end, load: max(top.load-lower, 0)}
			lowerHalf := piece{slice: top.slice, li: top.li, start: top.start, end: at, load: lower}
			// The lower half is popped, and so done, first.
			stack = append(stack,
				item{piece: upper, final: final || upper.end-upper.start < 2},
				item{piece: lowerHalf, final: final || lowerHalf.end-lowerHalf.start < 2})
		}
	}
	return done, splits, true
}

// applySplits puts done, the pieces of the slices split marks (in key
// order), in their slices' places; the job then has count slices.
func (w *weigher) applySplits(done []piece, split []int8, count int, mean float64) {
	if count == len(w.sl) {
		return
	}
	hotReason := fmt.Sprintf("slice load is at least %g times the mean slice load %.4g; split at load medians until each piece is below that or the job has %d slices per task",
		w.cfg.SplitLoadFactor, mean, w.cfg.MaxSlicesPerTask)
	refineReason := fmt.Sprintf("the job has fewer than %d slices per task; split for finer load measurements", w.cfg.MinSlicesPerTask)
	// Widen in place from the back (when there is capacity, no copy):
	// every slice moves up by the number of pieces added below it.
	old := len(w.sl)
	w.sl = slices.Grow(w.sl, count-old)[:count]
	w.sload = slices.Grow(w.sload, count-old)[:count]
	w.held = nil // the pieces share their slice's tasks
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
	if w.sbytes != nil {
		// Splitting moves no key, so no task's bytes change; the pieces'
		// own bytes are measured afresh.
		w.sbytes = measureBytes(w.sl, w.load)
	}
}

// byKey writes pieces to out (of their length) ordered by key and returns
// out and end, which has an entry per slice and one more and need not be
// zeroed. Pieces of different slices do not overlap and slices are in key
// order, so it groups them by slice in one counting pass and then sorts
// each slice's few pieces.
func byKey(out []piece, end []int32, pieces []piece) ([]piece, []int32) {
	nslices := len(end) - 1
	clear(end) // end[i+1]: end of slice i's group
	for _, p := range pieces {
		end[p.slice+1]++
	}
	for i := range nslices {
		end[i+1] += end[i]
	}
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
	return out, end
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
