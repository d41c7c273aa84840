package assign

import "slices"

// taskHeap orders live tasks by load, least first or (most) most first,
// ties broken by name (task ids follow name order). The planner keeps one
// of each so "least-loaded task not in this slice" and "most-loaded task"
// cost O(log n) even at thousands of tasks.
type taskHeap[L uint64 | float64] struct {
	load     []L     // shared with the planner, indexed by task id
	items    []int32 // heap of task ids
	pos      []int32 // pos[task] is the task's index in items
	most     bool
	frontier []int32 // scratch for bestExcept
}

func newTaskHeap[L uint64 | float64](load []L, most bool) *taskHeap[L] {
	return newTaskHeapOf(load, most, nil)
}

// newTaskHeapOf is newTaskHeap over the tasks in members only (every task
// when nil); fix must be called only for members.
func newTaskHeapOf[L uint64 | float64](load []L, most bool, members []int32) *taskHeap[L] {
	n := len(load)
	if members == nil {
		members = make([]int32, n)
		for i := range n {
			members[i] = int32(i)
		}
	}
	h := &taskHeap[L]{load: load, items: make([]int32, len(members)), pos: make([]int32, n), most: most}
	for i, t := range members {
		h.items[i] = t
		h.pos[t] = int32(i)
	}
	for i := len(members)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	return h
}

// before reports whether task a ranks ahead of task b.
func (h *taskHeap[L]) before(a, b int32) bool {
	la, lb := h.load[a], h.load[b]
	if la != lb {
		return (la < lb) != h.most
	}
	return a < b
}

func (h *taskHeap[L]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i]] = int32(i)
	h.pos[h.items[j]] = int32(j)
}

func (h *taskHeap[L]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.before(h.items[i], h.items[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *taskHeap[L]) down(i int) bool {
	start := i
	n := len(h.items)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.before(h.items[r], h.items[c]) {
			c = r
		}
		if !h.before(h.items[c], h.items[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

// fix restores the heap after task t's load changed.
func (h *taskHeap[L]) fix(t int32) {
	i := int(h.pos[t])
	if !h.down(i) {
		h.up(i)
	}
}

// top returns the first task in heap order.
func (h *taskHeap[L]) top() int32 { return h.items[0] }

// bestExcept returns the first task in heap order that is not in excl
// (sorted ascending), or -1 if every task is excluded. It walks the heap
// best-first without mutating it; the walk visits at most 2·len(excl)+1
// nodes because only excluded nodes are expanded.
func (h *taskHeap[L]) bestExcept(excl []int32) int32 {
	if len(h.items) == 0 {
		return -1
	}
	f := append(h.frontier[:0], 0)
	defer func() { h.frontier = f[:0] }()
	for len(f) > 0 {
		bi := 0
		for i := 1; i < len(f); i++ {
			if h.before(h.items[f[i]], h.items[f[bi]]) {
				bi = i
			}
		}
		node := f[bi]
		f[bi] = f[len(f)-1]
		f = f[:len(f)-1]
		t := h.items[node]
		if _, found := slices.BinarySearch(excl, t); !found {
			return t
		}
		for c := 2*node + 1; c <= 2*node+2 && int(c) < len(h.items); c++ {
			f = append(f, c)
		}
	}
	return -1
}
