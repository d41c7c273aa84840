package assign

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// Task is one server process of a job, as the assignment records it.
type Task struct {
	// Name identifies the task within its job; it is stable across restarts.
	Name string
	// Addr is where clients reach the task (host:port); informational for
	// slicerd, used by Clerks to route.
	Addr string
	// Capacity is how much work the task can do relative to the job's
	// other tasks: one of capacity 2 is meant to carry twice the load of
	// one of capacity 1. 0 means 1. Load-driven decisions balance each
	// task's load divided by its capacity (its utilisation); the
	// membership phases, which weigh every key the same, ignore it. It
	// is an input to decisions only: assignments do not record it, so a
	// Task in an Assignment always has Capacity 0.
	Capacity float64
	// MemoryLimit is the most state, in bytes, the task may hold; 0 means
	// no limit. Where the job's load reports give the keys' state size
	// (LoadEntry.Bytes), weighted-move and Membership place no slice on a
	// task that it would take past its limit, and move slices off a task
	// that is past it, when another task has room (keys never go without
	// an owner: with no room anywhere a slice stays where it is). Like
	// Capacity it is an input only: assignments do not record it.
	MemoryLimit float64
	// Cordoned is an operator's "no new slices": no placement gives a
	// cordoned task a slice or replica it does not already serve, unless
	// a slice's minimum redundancy can be met no other way; it keeps and
	// serves what it has.
	Cordoned bool
	// Draining is "give everything up": a draining task's slices are placed
	// on other tasks as if it had left, and it is given nothing new, while
	// it stays live and serves until its clients hold the new assignment.
	//
	// When no live task is open (neither cordoned nor draining), cordons
	// are ignored, and when every task is draining, so is draining: keys
	// always have an owner. Both are inputs only; assignments record
	// neither. Static and consistent-hash honour Draining only.
	Draining bool
}

// open reports whether t may be given new slices.
func (t Task) open() bool { return !t.Cordoned && !t.Draining }

// Capacity bounds: a task's capacity is 0 (meaning 1) or within
// [MinCapacity, MaxCapacity], so that the ratio of two tasks' capacities
// stays within 10^6 and utilisations stay well within float64's precision.
const (
	MinCapacity = 1e-3
	MaxCapacity = 1e3
)

// ValidateCapacity reports a capacity that is not 0 or within
// [MinCapacity, MaxCapacity] (NaN and infinities included).
func ValidateCapacity(c float64) error {
	if c == 0 || (c >= MinCapacity && c <= MaxCapacity) {
		return nil
	}
	return fmt.Errorf("%w: %v; give a relative capacity between %v and %v (0 or unset means 1)", ErrInvalidCapacity, c, MinCapacity, MaxCapacity)
}

// ValidateMemoryLimit reports a memory limit that is not 0 or within
// [1, MaxBytes] bytes (NaN and infinities included).
func ValidateMemoryLimit(b float64) error {
	if b == 0 || (b >= 1 && b <= MaxBytes) {
		return nil
	}
	return fmt.Errorf("%w: %v; give a limit in bytes between 1 and %d (0 or unset means no limit)", ErrInvalidMemoryLimit, b, int64(MaxBytes))
}

// capacityOf is t's capacity with 0 read as 1.
func capacityOf(t Task) float64 {
	if t.Capacity == 0 {
		return 1
	}
	return t.Capacity
}

// recorded returns t as an assignment records it: without its capacity
// and memory limit.
func (t Task) recorded() Task {
	t.Capacity, t.MemoryLimit, t.Cordoned, t.Draining = 0, 0, false, false
	return t
}

// recorded returns ts as an assignment records them. It returns ts itself
// when no task has a capacity or memory limit.
func recorded(ts []Task) []Task {
	if !slices.ContainsFunc(ts, func(t Task) bool { return t != t.recorded() }) {
		return ts
	}
	out := make([]Task, len(ts))
	for i, t := range ts {
		out[i] = t.recorded()
	}
	return out
}

// Slice is the half-open slice-key range [Start, End) and the tasks that
// serve it. Tasks holds task names in ascending order, without duplicates.
// Slices share Tasks lists (with each other, and with the assignment a
// decision started from), so a list is never written in place: a slice
// that changes tasks gets a new list.
type Slice struct {
	Start SliceKey
	End   SliceKey
	Tasks []string
}

// Width is the number of slice keys in the slice.
func (s Slice) Width() uint64 { return s.End - s.Start }

// Assignment maps every slice key of one job to a set of tasks.
//
// Slices are sorted by Start and tile [0, KeySpaceEnd) exactly: no gap, no
// overlap. Tasks lists every task that some slice names, sorted by Name.
//
// Incarnation names the store that generated the assignment: a store gets a
// new random incarnation when it is created, so an assignment from a
// recreated store, which counts generations from 1 again, is told apart
// from an older one of the same job. Empty means unknown (an assignment
// stored or sent by a slicerd that predates incarnations).
type Assignment struct {
	Job         string
	Generation  uint64
	Incarnation string
	Tasks       []Task
	Slices      []Slice
}

// Version identifies an assignment among all of its job's: the store
// incarnation that generated it and its generation there.
type Version struct {
	Incarnation string
	Generation  uint64
}

// Version returns a's version; the zero Version for nil.
func (a *Assignment) Version() Version {
	if a == nil {
		return Version{}
	}
	return Version{Incarnation: a.Incarnation, Generation: a.Generation}
}

// Supersedes reports whether an assignment at v replaces one held at held.
// Within one incarnation generations only go forward, so v must be higher.
// An assignment from another incarnation than the held one replaces it
// whatever its generation: the store was recreated and the held
// assignment's tasks are gone with it. An empty incarnation in v is
// unknown, not different, and falls back to the generation.
func (v Version) Supersedes(held Version) bool {
	if v.Incarnation != "" && v.Incarnation != held.Incarnation {
		return true
	}
	return v.Generation > held.Generation
}

// Reset reports whether v comes from another incarnation than held, both
// known: an assignment at v replaces the held one as a reset, not a step.
func (v Version) Reset(held Version) bool {
	return v.Incarnation != "" && held.Incarnation != "" && v.Incarnation != held.Incarnation
}

// Clone returns a deep copy of a: it shares no memory with a. The copy's
// task lists are windows of one array rather than a list each, a
// million slices' lists one allocation rather than a million.
func (a *Assignment) Clone() *Assignment {
	if a == nil {
		return nil
	}
	c := &Assignment{Job: a.Job, Generation: a.Generation, Incarnation: a.Incarnation, Tasks: slices.Clone(a.Tasks)}
	c.Slices = make([]Slice, len(a.Slices))
	n := 0
	for _, s := range a.Slices {
		n += len(s.Tasks)
	}
	names := make([]string, 0, n)
	for i, s := range a.Slices {
		from := len(names)
		names = append(names, s.Tasks...)
		c.Slices[i] = Slice{Start: s.Start, End: s.End, Tasks: names[from:len(names):len(names)]}
	}
	return c
}

// Find returns the index of the slice that contains k. The assignment must
// be valid and k < KeySpaceEnd.
func (a *Assignment) Find(k SliceKey) int {
	// The first slice whose End is above k contains it.
	lo, hi := 0, len(a.Slices)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a.Slices[m].End <= k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// TaskIndex returns the position of the named task in a.Tasks.
func (a *Assignment) TaskIndex(name string) (int, bool) {
	return slices.BinarySearchFunc(a.Tasks, name, func(t Task, n string) int {
		return strings.Compare(t.Name, n)
	})
}

// KeepsTask reports whether a task of a is among live (by name). When
// none is, every key of the job moves, and a decision may as well place
// them by load.
func (a *Assignment) KeepsTask(live []Task) bool {
	if a == nil {
		return false
	}
	for _, t := range live {
		if _, ok := a.TaskIndex(t.Name); ok {
			return true
		}
	}
	return false
}

// Settled reports whether a already reflects the live tasks (sorted by
// name, as Config.Controls returns them): every task of a is live at the
// same address and not draining, and every live task a does not list is
// one that takes no new slices (cordoned or draining). Capacities and
// limits are not compared: assignments do not record them. The marks are
// read as decisions read them: with no task open, cordons give way, and
// with every task draining, draining does. A job whose assignment is not
// settled needs a membership decision before load is weighed.
func (a *Assignment) Settled(live []Task) bool {
	if a == nil {
		return false
	}
	if !slices.ContainsFunc(live, Task.open) {
		live = slices.Clone(live)
		giveWay(live)
	}
	i := 0
	for _, t := range live {
		if i < len(a.Tasks) && a.Tasks[i].Name == t.Name {
			if a.Tasks[i].Addr != t.Addr || t.Draining {
				return false
			}
			i++
			continue
		}
		if i < len(a.Tasks) && a.Tasks[i].Name < t.Name {
			return false // a task of a is not live
		}
		if !t.Draining && !t.Cordoned {
			return false // a live task a has not placed yet
		}
	}
	return i == len(a.Tasks)
}

// Validate reports whether a is a well-formed assignment: a valid job name,
// a non-zero generation, a valid incarnation if it has one, slices that tile [0, KeySpaceEnd) with no gap or
// overlap, each naming at least one task, in order and without duplicates,
// and every named task listed once in Tasks.
func (a *Assignment) Validate() error {
	_, err := a.validateInto(false, nil)
	return err
}

// taskRefs are the tasks an assignment's slices name, as indices into its
// Tasks, slice by slice, in len(r) parts: part i holds those of the
// slices inParts gives part i of len(r).
type taskRefs [][]int32

// validate is Validate. With refs, it also returns the tasks every slice
// names as numbers (see taskRefs): a caller that needs them so reads them
// there rather than looking each name up again.
func (a *Assignment) validate(refs bool) (taskRefs, error) {
	return a.validateInto(refs, nil)
}

// validateInto is validate that writes the references into buf's parts
// where they are large enough (a part of n slices needs n), as a
// decision's scratch holds them from the last; what buf's parts held
// before is never read.
func (a *Assignment) validateInto(refs bool, buf taskRefs) (taskRefs, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: nil", ErrInvalidAssignment)
	}
	if err := ValidateJobName(a.Job); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAssignment, err)
	}
	if a.Generation == 0 {
		return nil, fmt.Errorf("%w: job %q: generation 0 is reserved for \"no assignment\"", ErrInvalidAssignment, a.Job)
	}
	if a.Incarnation != "" {
		if err := ValidateIncarnation(a.Incarnation); err != nil {
			return nil, fmt.Errorf("%w: job %q: %w", ErrInvalidAssignment, a.Job, err)
		}
	}
	for i, t := range a.Tasks {
		if err := ValidateTaskName(t.Name); err != nil {
			return nil, fmt.Errorf("%w: job %q: task %d: %w", ErrInvalidAssignment, a.Job, i, err)
		}
		if i > 0 && a.Tasks[i-1].Name >= t.Name {
			return nil, fmt.Errorf("%w: job %q: tasks not sorted or duplicated at %q", ErrInvalidAssignment, a.Job, t.Name)
		}
		if t.Capacity != 0 {
			return nil, fmt.Errorf("%w: job %q: task %q records a capacity; assignments do not", ErrInvalidAssignment, a.Job, t.Name)
		}
		if t.MemoryLimit != 0 || t.Cordoned || t.Draining {
			return nil, fmt.Errorf("%w: job %q: task %q records a memory limit, cordon or drain; assignments do not", ErrInvalidAssignment, a.Job, t.Name)
		}
	}
	if len(a.Slices) == 0 {
		return nil, fmt.Errorf("%w: job %q: no slices", ErrInvalidAssignment, a.Job)
	}
	// One hash lookup per slice task is several times faster than a binary
	// search of string comparisons over the task table.
	known := make(map[string]int32, len(a.Tasks))
	for i, t := range a.Tasks {
		known[t.Name] = int32(i)
	}
	// A million slices are checked in parts at once; the first slice at
	// fault is in the first part that finds one, so the error is the one
	// a single pass would return.
	k := parts(len(a.Slices))
	errs := make([]error, k)
	var out taskRefs
	if refs {
		out = make(taskRefs, k)
	}
	inParts(len(a.Slices), k, func(part, lo, hi int) {
		var ids *[]int32
		if refs {
			var own []int32
			if part < len(buf) && cap(buf[part]) >= hi-lo {
				own = buf[part][:0]
			} else {
				own = make([]int32, 0, hi-lo) // one task a slice is the common case
			}
			ids = &own
		}
		var next SliceKey
		if lo > 0 {
			next = a.Slices[lo-1].End // checked by the part before
		}
		seen := newListMemo(len(a.Tasks))
		for i := lo; i < hi; i++ {
			s := &a.Slices[i]
			// A list met before (slices share lists; see Slice) names the
			// tasks it named then: only the range is left to check.
			if at, ok := seen.find(s.Tasks); ok {
				if !rangeOK(s, next) {
					errs[part] = a.checkRange(i, next)
					return
				}
				if refs {
					if len(s.Tasks) == 1 {
						*ids = append(*ids, (*ids)[at])
					} else {
						*ids = append(*ids, (*ids)[at:at+len(s.Tasks)]...)
					}
				}
				next = s.End
				continue
			}
			at := 0
			if refs {
				at = len(*ids)
			}
			if err := a.checkSlice(i, next, known, ids); err != nil {
				errs[part] = err
				return
			}
			seen.put(s.Tasks, at)
			next = s.End
		}
		if refs {
			out[part] = *ids
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if end := a.Slices[len(a.Slices)-1].End; end != KeySpaceEnd {
		return nil, fmt.Errorf("%w: job %q: gap [%#x, %#x) at the end of the key space", ErrInvalidAssignment, a.Job, end, KeySpaceEnd)
	}
	return out, nil
}

// checkSlice validates slice i, which must start at next, and appends to
// ids, when not nil, the index in known of every task it names.
func (a *Assignment) checkSlice(i int, next SliceKey, known map[string]int32, ids *[]int32) error {
	s := &a.Slices[i]
	if !rangeOK(s, next) {
		return a.checkRange(i, next)
	}
	for j, name := range s.Tasks {
		if j > 0 && s.Tasks[j-1] >= name {
			return fmt.Errorf("%w: job %q: slice %d: tasks not sorted or duplicated at %q", ErrInvalidAssignment, a.Job, i, name)
		}
		k, ok := known[name]
		if !ok {
			return fmt.Errorf("%w: job %q: slice %d names unknown task %q", ErrInvalidAssignment, a.Job, i, name)
		}
		if ids != nil {
			*ids = append(*ids, k)
		}
	}
	return nil
}

// rangeOK reports whether s starts at next, is not empty, ends within
// the key space and names a task: whether checkRange finds nothing.
func rangeOK(s *Slice, next SliceKey) bool {
	return s.Start == next && s.End > s.Start && s.End <= KeySpaceEnd && len(s.Tasks) > 0
}

// checkRange validates slice i's range, which must start at next, and
// that it names a task.
func (a *Assignment) checkRange(i int, next SliceKey) error {
	s := &a.Slices[i]
	switch {
	case s.Start > next:
		return fmt.Errorf("%w: job %q: gap [%#x, %#x) before slice %d", ErrInvalidAssignment, a.Job, next, s.Start, i)
	case s.Start < next:
		return fmt.Errorf("%w: job %q: slice %d starts at %#x, overlapping the previous slice that ends at %#x", ErrInvalidAssignment, a.Job, i, s.Start, next)
	case s.End <= s.Start:
		return fmt.Errorf("%w: job %q: slice %d is empty or inverted [%#x, %#x)", ErrInvalidAssignment, a.Job, i, s.Start, s.End)
	case s.End > KeySpaceEnd:
		return fmt.Errorf("%w: job %q: slice %d ends at %#x, past the key space end %#x", ErrInvalidAssignment, a.Job, i, s.End, KeySpaceEnd)
	case len(s.Tasks) == 0:
		return fmt.Errorf("%w: job %q: slice %d [%#x, %#x) has no task", ErrInvalidAssignment, a.Job, i, s.Start, s.End)
	}
	return nil
}

// listMemo remembers task lists already looked up, by the address of
// their first name: slices share lists (see Slice), and a list met again
// names the same tasks, so they need not be looked up again. It is a
// table of fixed size indexed by that address: a list whose entry another
// list took since is looked up again, which is only slower. Lists of one
// task are usually windows of one array (see TaskLists), whose
// consecutive elements take consecutive entries. Where few lists are met
// again (every slice's list its own), the memo stops after a while,
// costing nothing more.
type listMemo struct {
	lists       []memoEntry
	mask        uintptr
	trial       int // lists to try the memo on before it may stop
	tries, hits int
}

type memoEntry struct {
	first uintptr // the address of the list's first name; 0: no list
	n     int32   // its length
	at    int32   // where its task indexes start in the caller's ids
}

// newListMemo returns a memo for the lists of an assignment of n tasks:
// room for at least twice as many lists as tasks, up to 65,536. It stops
// if, after four lists a task (each task's first list is new to it) or
// 4,096 lists, fewer than half it was asked for were met before.
func newListMemo(n int) listMemo {
	size := 64
	for size < 1<<16 && size < 2*n {
		size *= 2
	}
	return listMemo{lists: make([]memoEntry, size), mask: uintptr(size - 1), trial: max(4096, 4*n)}
}

func (m *listMemo) slot(first uintptr) *memoEntry {
	const name = unsafe.Sizeof("")
	return &m.lists[(first/name^first>>20)&m.mask]
}

// find reports whether list was put and, if so, at what index. The
// checks that need no table are apart, so that they inline.
func (m *listMemo) find(list []string) (int, bool) {
	if len(list) == 0 || m.lists == nil {
		return 0, false
	}
	return m.lookup(list)
}

// lookup is find in the table, counting the tries and hits that stop it.
func (m *listMemo) lookup(list []string) (int, bool) {
	m.tries++
	first := uintptr(unsafe.Pointer(&list[0]))
	e := m.slot(first)
	if e.first != first || int(e.n) != len(list) {
		if m.tries >= m.trial && 2*m.hits < m.tries {
			m.lists = nil
		}
		return 0, false
	}
	m.hits++
	return int(e.at), true
}

// put remembers list, checked, as at.
func (m *listMemo) put(list []string, at int) {
	if len(list) == 0 || m.lists == nil {
		return
	}
	first := uintptr(unsafe.Pointer(&list[0]))
	*m.slot(first) = memoEntry{first: first, n: int32(len(list)), at: int32(at)}
}
