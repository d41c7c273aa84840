package assign

import "slices"

// TaskLists hands out the task lists of one assignment's slices so that
// slices naming the same tasks share a list, as Slice allows: every slice
// of one task gets that task's one-name list, and a slice naming the
// tasks the slice before it names gets that slice's list. A decoder of a
// job of a million slices on ten thousand tasks then holds ten thousand
// one-name lists rather than a million, and none of the names its input
// spelled: every list names the tasks with the strings of the task table.
// Decoded that way, such an assignment takes 40 MB rather than 72. A
// TaskLists serves one assignment's decoding, one goroutine at a time.
type TaskLists struct {
	single []string         // single[i:i+1] is task i's list
	index  map[string]int32 // task name -> index; built on first use
	arena  []string         // lists of two tasks or more, back to back
	used   int              // names in arena and in the arenas before it
	made   int              // room in arena and in the arenas before it
	last   []string         // the list of two or more handed out last
	lastID []int32          // its tasks' indices
	ids    []int32          // scratch
}

// NewTaskLists returns lists for slices of an assignment of tasks (sorted
// by name, as Assignment.Tasks).
func NewTaskLists(tasks []Task) *TaskLists {
	l := &TaskLists{single: make([]string, len(tasks))}
	for i, t := range tasks {
		l.single[i] = t.Name
	}
	return l
}

// Of returns a list equal to names, shared as TaskLists says. When a name
// is not a task's, it is a copy of names: validating the assignment then
// says what is wrong with it, as it does with names out of order or
// repeated, which Of keeps as they are.
func (l *TaskLists) Of(names []string) []string {
	if len(names) == 0 {
		return slices.Clone(names)
	}
	if l.index == nil {
		l.index = make(map[string]int32, len(l.single))
		for i, n := range l.single {
			l.index[n] = int32(i)
		}
	}
	l.ids = l.ids[:0]
	for _, n := range names {
		i, ok := l.index[n]
		if !ok {
			return slices.Clone(names)
		}
		l.ids = append(l.ids, i)
	}
	return l.ofIndexes(l.ids)
}

// ofIndexes is Of for the tasks at indices ids (in range).
func (l *TaskLists) ofIndexes(ids []int32) []string {
	if len(ids) == 1 {
		i := ids[0]
		return l.single[i : i+1 : i+1]
	}
	if slices.Equal(ids, l.lastID) {
		return l.last
	}
	if cap(l.arena)-len(l.arena) < len(ids) {
		// A new arena, not a bigger copy: the lists handed out keep the
		// old one, and copying would hold both.
		l.arena = make([]string, 0, max(len(ids), 1024, l.used/4))
		l.made += cap(l.arena)
	}
	from := len(l.arena)
	for _, i := range ids {
		l.arena = append(l.arena, l.single[i])
	}
	l.used += len(ids)
	l.last = l.arena[from:len(l.arena):len(l.arena)]
	l.lastID = append(l.lastID[:0], ids...)
	return l.last
}

// Reserve makes room for lists of two tasks or more that name n tasks in
// all, so that they share one array with no room to spare but what a
// list repeating the one before it (and so sharing it) leaves. A caller
// that knows what its slices name reserves first; without it, lists of
// two tasks or more hold room for up to a quarter more names than they
// hold (or 1,024 names, when that is more).
func (l *TaskLists) Reserve(n int) {
	if cap(l.arena)-len(l.arena) < n {
		l.arena = make([]string, 0, n)
		l.made += n
	}
}
