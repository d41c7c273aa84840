package assign

// OwnerIndex lists the slices of an assignment by task, so that cutting
// a task's load report to the keys the task serves (Load.OwnedIn) reads
// that task's slices rather than every slice of the job: at 10,000 tasks
// and a million slices, a report costs its own hundred slices instead of a
// pass over the million. It also keeps each slice's tasks as indexes, so
// that the tasks' loads (TaskLoads, Hottest) are summed without looking
// a name up. An Assigner builds one per generation it holds.
// It is never modified after NewOwnerIndex, so goroutines may share it;
// the assignment it indexes must not change either.
type OwnerIndex struct {
	a *Assignment
	// The indexes of the slices task i of a.Tasks serves are
	// bySlice[first[i]:first[i+1]], in key order.
	first, bySlice []int32
	// ids is the index in a.Tasks of every name of every slice, slice by
	// slice (-1 for a name a does not list): what TaskLoads reads rather
	// than looking every name up.
	ids []int32
}

// NewOwnerIndex indexes the slices of a by task. A slice naming a task a
// does not list (an assignment that would not validate) counts for
// nobody.
func NewOwnerIndex(a *Assignment) *OwnerIndex {
	first, bySlice, ids := indexSlices(a)
	return &OwnerIndex{a: a, first: first, bySlice: bySlice, ids: ids}
}

// TaskLoads is TaskLoads(o.Assignment(), l), to the last bit, with the
// tasks of each slice read from the index rather than looked up by name:
// at a million slices, two-fifths of the time (BenchmarkHottestIndexed).
func (o *OwnerIndex) TaskLoads(l Load) []float64 {
	return sumPerTask(o.a, l, (*LoadEntry).within, true, o.idsOf)
}

// TaskBytes is TaskBytes(o.Assignment(), l), read as TaskLoads is.
func (o *OwnerIndex) TaskBytes(l Load) []float64 {
	if !l.HasBytes() {
		return make([]float64, len(o.a.Tasks))
	}
	return sumPerTask(o.a, l, (*LoadEntry).bytesWithin, false, o.idsOf)
}

// idsOf is the tasks of slice s of o's assignment, given how many names
// the slices before it hold (what sumPerTask passes).
func (o *OwnerIndex) idsOf(s *Slice, before int) []int32 {
	return o.ids[before : before+len(s.Tasks)]
}

// Hottest is Hottest(o.Assignment(), l, live), from o.TaskLoads.
func (o *OwnerIndex) Hottest(l Load, live []Task) (task int, imbalance float64) {
	return HottestOf(o.a, o.TaskLoads(l), live)
}

// Assignment is the assignment o indexes.
func (o *OwnerIndex) Assignment() *Assignment { return o.a }

// indexSlices groups the slices of a by task (a counting sort by task
// index): the slices of a.Tasks[i] are bySlice[first[i]:first[i+1]]; ids
// is the task index of every name of every slice, in order.
func indexSlices(a *Assignment) (first, bySlice, ids []int32) {
	idsOf := a.taskIDs()
	// The task index of every name of every slice, in order.
	ids = make([]int32, 0, len(a.Slices))
	first = make([]int32, len(a.Tasks)+1)
	for i := range a.Slices {
		for _, t := range idsOf(&a.Slices[i]) {
			ids = append(ids, t)
			if t >= 0 {
				first[t+1]++
			}
		}
	}
	for i := 1; i < len(first); i++ {
		first[i] += first[i-1]
	}
	bySlice = make([]int32, first[len(first)-1])
	next := append([]int32(nil), first[:len(a.Tasks)]...)
	k := 0
	for si, s := range a.Slices {
		for range s.Tasks {
			if t := ids[k]; t >= 0 {
				bySlice[next[t]] = int32(si)
				next[t]++
			}
			k++
		}
	}
	return first, bySlice, ids
}

// OwnedIn returns the load of l that falls on keys the indexed
// assignments give task: what l.Owned(task, as...) returns for the
// assignments of idx (nil ones skipped).
func (l Load) OwnedIn(task string, idx ...*OwnerIndex) Load {
	var owned [][2]SliceKey
	for _, o := range idx {
		if o == nil {
			continue
		}
		t, ok := o.a.TaskIndex(task)
		if !ok {
			continue
		}
		for _, si := range o.bySlice[o.first[t]:o.first[t+1]] {
			s := &o.a.Slices[si]
			owned = append(owned, [2]SliceKey{s.Start, s.End})
		}
	}
	return l.cutTo(owned)
}

// taskIDs returns a function giving the indexes in a.Tasks of the tasks
// of a slice of a (-1 for a name a does not list), valid until its next
// call. Names are found in a table built once (by binary search for a few
// tasks), and a list met before (slices share lists) is not looked up
// again (see listMemo).
func (a *Assignment) taskIDs() func(s *Slice) []int32 {
	lookup := func(name string) int32 {
		if i, ok := a.TaskIndex(name); ok {
			return int32(i)
		}
		return -1
	}
	if len(a.Tasks) > 16 {
		known := make(map[string]int32, len(a.Tasks))
		for i, t := range a.Tasks {
			known[t.Name] = int32(i)
		}
		lookup = func(name string) int32 {
			if i, ok := known[name]; ok {
				return i
			}
			return -1
		}
	}
	seen := newListMemo(len(a.Tasks))
	var ids []int32 // the indexes of the lists seen remembers, back to back
	return func(s *Slice) []int32 {
		n := len(s.Tasks)
		if at, ok := seen.find(s.Tasks); ok {
			return ids[at : at+n : at+n]
		}
		at := len(ids)
		if seen.lists == nil {
			// The memo stopped: keep only this list's indexes.
			at, ids = 0, ids[:0]
		}
		for _, name := range s.Tasks {
			ids = append(ids, lookup(name))
		}
		seen.put(s.Tasks, at)
		return ids[at : at+n : at+n]
	}
}
