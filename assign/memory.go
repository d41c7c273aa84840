package assign

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// memory is what placement knows of the live tasks' memory: each task's
// limit and the state it holds, from the bytes of the job's load reports.
// A planner has one only when some task has a limit and the reports give
// bytes; otherwise every task has room for anything and placement is
// exactly as without limits.
type memory struct {
	load  Load
	limit []float64 // by task id; +Inf for a task without a limit
	bytes []float64 // by task id: the bytes of every slice it serves
}

// newMemory returns the memory of p's tasks under load, or nil.
func newMemory(p *planner, load Load) *memory {
	if !slices.ContainsFunc(p.live, func(t Task) bool { return t.MemoryLimit > 0 }) || !load.HasBytes() {
		return nil
	}
	m := &memory{load: load, limit: make([]float64, len(p.live)), bytes: make([]float64, len(p.live))}
	for t, task := range p.live {
		m.limit[t] = math.Inf(1)
		if task.MemoryLimit > 0 {
			m.limit[t] = task.MemoryLimit
		}
	}
	for i, b := range measureBytes(p.slices, load) {
		for _, t := range p.tasks(&p.slices[i]) {
			m.bytes[t] += b
		}
	}
	return m
}

// measureBytes returns the bytes of each slice of sl (sorted, tiling)
// under load, in one sweep over both.
func measureBytes(sl []wslice, load Load) []float64 {
	return sweep(make([]float64, len(sl), cap(sl)), sl, load, (*LoadEntry).bytesWithin)
}

// fits reports whether task t has room for b more bytes. Without limits
// every task has room.
func (m *memory) fits(t int32, b float64) bool {
	return m == nil || m.bytes[t]+b <= m.limit[t]
}

// of is the bytes of slice s; 0 without limits.
func (m *memory) of(s *wslice) float64 {
	if m == nil {
		return 0
	}
	return m.load.BytesIn(s.start, s.end)
}

// add records that task t holds b more bytes (b < 0: fewer).
func (m *memory) add(t int32, b float64) {
	if m != nil {
		m.bytes[t] += b
	}
}

// over reports whether task t holds more than its limit.
func (m *memory) over(t int32) bool { return m != nil && m.bytes[t] > m.limit[t] }

// fitTries bounds the heap walk leastFit takes before it looks at every
// task: a job whose least-loaded tasks are all full pays a linear scan.
const fitTries = 16

// leastWhere returns the least-loaded task (by key count) not in excl
// (sorted ids) for which ok holds, or -1 if there is none.
func (p *planner) leastWhere(excl []int32, ok func(int32) bool) int32 {
	t := p.least.bestExcept(excl)
	if t < 0 || ok(t) {
		return t
	}
	ex := excl
	for range fitTries {
		ex = insertID(ex, t)
		if t = p.least.bestExcept(ex); t < 0 || ok(t) {
			return t
		}
	}
	best := int32(-1)
	for u := range int32(len(p.live)) {
		if _, in := slices.BinarySearch(excl, u); in || !ok(u) {
			continue
		}
		if best < 0 || p.load[u] < p.load[best] {
			best = u
		}
	}
	return best
}

// leastFit returns the least-loaded open task not in excl (sorted ids)
// with room for b bytes, or -1 if there is none.
func (p *planner) leastFit(excl []int32, b float64) int32 {
	if p.mem == nil && p.closed == nil {
		return p.least.bestExcept(excl)
	}
	return p.leastWhere(excl, func(t int32) bool { return p.isOpen(t) && p.mem.fits(t, b) })
}

// placeFor is where a slice of b bytes that must have another task goes:
// the least-loaded open task with room for it, else the least-loaded open
// one, else the least-loaded one not draining (a cordon gives way to the
// slice's redundancy), else none (-1): a draining task takes nothing
// while another task stays (with every task draining, none is; see
// sortedTasks). The relief phase moves a slice placed without room on when
// room appears.
func (p *planner) placeFor(excl []int32, b float64) int32 {
	if t := p.leastFit(excl, b); t >= 0 || p.closed == nil && p.mem == nil {
		return t
	}
	if t := p.leastWhere(excl, p.isOpen); t >= 0 {
		return t
	}
	return p.leastWhere(excl, func(t int32) bool { return !p.live[t].Draining })
}

// relieveMemory moves slices off every task that holds more bytes than its
// limit: it drops the task's replica of a slice that has more than
// min(MinRedundancy, live tasks) tasks, or reassigns the slice to the
// least-loaded task with room for it. It takes the smallest slice that
// brings the task within its limit, else the largest that moves, so the
// fewest bytes travel; it never takes a task's last slice. What cannot be
// placed anywhere stays (keys always have an owner).
func (p *planner) relieveMemory() {
	if p.mem == nil {
		return
	}
	minR := min(p.cfg.MinRedundancy, len(p.live))
	type cand struct {
		slice int
		bytes float64
	}
	// The slices of the tasks past their limits, in one pass: relief
	// moves slices only to tasks with room, which never go past theirs,
	// and splits none, so the lists stay valid throughout.
	over := make(map[int32]int) // task id → index in lists
	for t := range int32(len(p.live)) {
		if p.mem.over(t) {
			over[t] = len(over)
		}
	}
	if len(over) == 0 {
		return
	}
	lists := make([][]cand, len(over))
	helds := make([]int, len(over))
	sb := measureBytes(p.slices, p.mem.load)
	for si := range p.slices {
		for _, t := range p.tasks(&p.slices[si]) {
			if k, ok := over[t]; ok {
				helds[k]++
				if sb[si] > 0 {
					lists[k] = append(lists[k], cand{si, sb[si]})
				}
			}
		}
	}
	for t := range int32(len(p.live)) {
		k, ok := over[t]
		if !ok {
			continue
		}
		cands, held := lists[k], helds[k]
		slices.SortFunc(cands, func(a, b cand) int { return cmp.Or(cmp.Compare(a.bytes, b.bytes), cmp.Compare(a.slice, b.slice)) })
		reason := fmt.Sprintf("task %q holds %.4g bytes, above its memory limit %.4g", p.live[t].Name, p.mem.bytes[t], p.mem.limit[t])
		// done marks the candidates that moved, and those that cannot:
		// room only shrinks while t sheds.
		done := make([]bool, len(cands))
		shed := func(k int) bool {
			if done[k] {
				return false
			}
			done[k] = true
			c := cands[k]
			s := &p.slices[c.slice]
			if int(s.n) > minR {
				p.removeTask(c.slice, t)
				p.move(RemoveReplica, s, t, -1, reason)
				return true
			}
			if r := p.leastFit(p.tasks(s), c.bytes); r >= 0 {
				p.removeTask(c.slice, t)
				p.addTask(c.slice, r)
				p.move(Reassign, s, t, r, reason)
				return true
			}
			return false
		}
		for ; p.mem.over(t) && held > 1; held-- {
			// The smallest slice that brings t within its limit first,
			// then the larger ones, then the smaller ones largest first.
			first, _ := slices.BinarySearchFunc(cands, p.mem.bytes[t]-p.mem.limit[t], func(c cand, x float64) int { return cmp.Compare(c.bytes, x) })
			moved := false
			for k := first; k < len(cands) && !moved; k++ {
				moved = shed(k)
			}
			for k := first - 1; k >= 0 && !moved; k-- {
				moved = shed(k)
			}
			if !moved {
				break
			}
		}
	}
}
