package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// DeltaVersion is the delta format this package writes and applies; a
// subscriber sets it as WatchAssignmentRequest.delta_version.
const DeltaVersion = 1

// ErrDelta is the class of every error ApplyDelta returns: the delta does
// not apply to the held assignment, or applying it did not give the
// assignment the server meant. The subscriber keeps what it holds and
// watches again with known_generation 0 to get the full assignment.
var ErrDelta = errors.New("assignment delta does not apply")

// Checksum is the XXH64 of a's canonical form, as AssignmentDelta.checksum
// defines it. It reads a and allocates nothing per slice.
func Checksum(a *assign.Assignment) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [16]byte
	str := func(s string) {
		_, _ = d.WriteString(s)
		_, _ = d.Write([]byte{0})
	}
	str(a.Job)
	str(a.Incarnation)
	binary.BigEndian.PutUint64(buf[:8], a.Generation)
	_, _ = d.Write(buf[:8])
	for _, t := range a.Tasks {
		str(t.Name)
		str(t.Addr)
	}
	for _, s := range a.Slices {
		binary.BigEndian.PutUint64(buf[:8], uint64(s.Start))
		binary.BigEndian.PutUint64(buf[8:], uint64(s.End))
		_, _ = d.Write(buf[:])
		for _, t := range s.Tasks {
			str(t)
		}
		_, _ = d.Write([]byte{0xFF})
	}
	return d.Sum64()
}

// Diff returns the delta that turns base into next, or nil when there is
// none: the two are of different jobs or incarnations, or next is not a
// later generation. Both must be valid assignments.
func Diff(base, next *assign.Assignment) *slicerv1.AssignmentDelta {
	if base == nil || next == nil || base.Job != next.Job || base.Incarnation != next.Incarnation || next.Generation <= base.Generation {
		return nil
	}
	d := &slicerv1.AssignmentDelta{
		Job:            next.Job,
		Incarnation:    next.Incarnation,
		BaseGeneration: base.Generation,
		Generation:     next.Generation,
		Checksum:       Checksum(next),
	}
	// A slice of next that base has as is (same range, same tasks) is left
	// out; since next's slices are disjoint, no painted slice touches it.
	j := 0
	for _, s := range next.Slices {
		for j < len(base.Slices) && base.Slices[j].Start < s.Start {
			j++
		}
		if j < len(base.Slices) && base.Slices[j].End == s.End && base.Slices[j].Start == s.Start && slices.Equal(base.Slices[j].Tasks, s.Tasks) {
			continue
		}
		d.Slices = append(d.Slices, &slicerv1.Slice{Start: uint64(s.Start), End: uint64(s.End), Tasks: s.Tasks})
	}
	held := make(map[string]string, len(base.Tasks))
	for _, t := range base.Tasks {
		held[t.Name] = t.Addr
	}
	for _, t := range next.Tasks {
		addr, ok := held[t.Name]
		if !ok || addr != t.Addr {
			d.Tasks = append(d.Tasks, &slicerv1.Task{Name: t.Name, Address: t.Addr})
		}
		delete(held, t.Name)
	}
	for _, t := range base.Tasks {
		if _, gone := held[t.Name]; gone {
			d.RemovedTasks = append(d.RemovedTasks, t.Name)
		}
	}
	return d
}

// ApplyDelta returns the assignment d turns base into, validated and
// checked against d's checksum; base is not modified, and the result
// shares the task lists of base's untouched slices. Every failure wraps
// ErrDelta: a delta for another job, incarnation or base generation (out
// of order, or a gap), a malformed one, or one whose result is not the
// assignment the server meant (its checksum differs).
func ApplyDelta(base *assign.Assignment, d *slicerv1.AssignmentDelta) (*assign.Assignment, error) {
	switch {
	case d == nil:
		return nil, fmt.Errorf("%w: message has no delta", ErrDelta)
	case base == nil:
		return nil, fmt.Errorf("%w: no assignment is held to apply it to", ErrDelta)
	case d.GetJob() != base.Job:
		return nil, fmt.Errorf("%w: it is of job %q, the held assignment of job %q", ErrDelta, d.GetJob(), base.Job)
	case d.GetIncarnation() != base.Incarnation || d.GetBaseGeneration() != base.Generation:
		return nil, fmt.Errorf("%w: it applies to generation %d of incarnation %q, the held assignment is generation %d of %q",
			ErrDelta, d.GetBaseGeneration(), d.GetIncarnation(), base.Generation, base.Incarnation)
	case d.GetGeneration() <= base.Generation:
		return nil, fmt.Errorf("%w: it leads to generation %d, not later than its base %d", ErrDelta, d.GetGeneration(), base.Generation)
	}
	a, err := applyDelta(base, d)
	if err != nil {
		return nil, err
	}
	if sum := Checksum(a); sum != d.GetChecksum() {
		return nil, fmt.Errorf("%w: the result's checksum is %016x, the delta says %016x", ErrDelta, sum, d.GetChecksum())
	}
	return a, nil
}

// applyDelta is ApplyDelta without the checksum: base's version was
// checked.
func applyDelta(base *assign.Assignment, d *slicerv1.AssignmentDelta) (*assign.Assignment, error) {
	paint := d.GetSlices()
	var prevEnd uint64
	for i, p := range paint {
		if p.GetStart() >= p.GetEnd() || p.GetEnd() > uint64(assign.KeySpaceEnd) || (i > 0 && p.GetStart() < prevEnd) {
			return nil, fmt.Errorf("%w: slice %d [%#x, %#x) is empty, beyond the key space, or not after the one before", ErrDelta, i, p.GetStart(), p.GetEnd())
		}
		prevEnd = p.GetEnd()
	}

	removed := make(map[string]bool, len(d.GetRemovedTasks()))
	for _, name := range d.GetRemovedTasks() {
		removed[name] = true
	}
	for _, t := range base.Tasks {
		delete(removed, t.Name)
	}
	for name := range removed {
		return nil, fmt.Errorf("%w: it removes task %q, which the held assignment does not list", ErrDelta, name)
	}
	for _, name := range d.GetRemovedTasks() {
		removed[name] = true
	}
	upserted := make(map[string]bool, len(d.GetTasks()))
	tasks := make([]assign.Task, 0, len(base.Tasks)+len(d.GetTasks()))
	for _, t := range d.GetTasks() {
		if upserted[t.GetName()] {
			return nil, fmt.Errorf("%w: task %q is listed twice", ErrDelta, t.GetName())
		}
		upserted[t.GetName()] = true
		tasks = append(tasks, assign.Task{Name: t.GetName(), Addr: t.GetAddress()})
	}
	for _, t := range base.Tasks {
		if !removed[t.Name] && !upserted[t.Name] {
			tasks = append(tasks, t)
		}
	}
	slices.SortFunc(tasks, func(x, y assign.Task) int {
		switch {
		case x.Name < y.Name:
			return -1
		case x.Name > y.Name:
			return 1
		}
		return 0
	})

	// Painted slices get their lists from the new task table, shared as
	// assign.TaskLists shares them (a task's one-name list, a list naming
	// what the painted slice before names); the held slices keep theirs.
	lists := assign.NewTaskLists(tasks)
	lists.Reserve(multiNames(paint))
	out := make([]assign.Slice, 0, len(base.Slices)+len(paint))
	held := base.Slices
	i := 0
	// keep copies the held slices' parts within [from, to).
	keep := func(from, to assign.SliceKey) {
		for i < len(held) && held[i].End <= from {
			i++
		}
		for k := i; k < len(held) && held[k].Start < to; k++ {
			out = append(out, assign.Slice{Start: max(held[k].Start, from), End: min(held[k].End, to), Tasks: held[k].Tasks})
		}
	}
	var pos assign.SliceKey
	for _, p := range paint {
		start, end := assign.SliceKey(p.GetStart()), assign.SliceKey(p.GetEnd())
		if start > pos {
			keep(pos, start)
		}
		out = append(out, assign.Slice{Start: start, End: end, Tasks: lists.Of(p.GetTasks())})
		pos = end
	}
	if pos < assign.KeySpaceEnd {
		keep(pos, assign.KeySpaceEnd)
	}

	a := &assign.Assignment{Job: base.Job, Generation: d.GetGeneration(), Incarnation: base.Incarnation, Tasks: tasks, Slices: out}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%w: the result is not a valid assignment: %w", ErrDelta, err)
	}
	return a, nil
}

// Receive returns the assignment a WatchAssignment message carries: its
// full assignment (validated, as FromProto does), or its delta applied to
// held. A message with both or neither is rejected; a delta that does not
// apply returns an error wrapping ErrDelta.
func Receive(held *assign.Assignment, m *slicerv1.WatchAssignmentResponse) (*assign.Assignment, error) {
	switch {
	case m.GetAssignment() != nil && m.GetDelta() != nil:
		return nil, fmt.Errorf("%w: message has both an assignment and a delta", assign.ErrInvalidAssignment)
	case m.GetDelta() != nil:
		return ApplyDelta(held, m.GetDelta())
	}
	return FromProto(m.GetAssignment())
}

// CommittedAt returns when the Assigner committed the generation a
// WatchAssignment message brings (its committed_unix_nano, by the
// Assigner's clock), or the zero time when the message does not say.
func CommittedAt(m *slicerv1.WatchAssignmentResponse) time.Time {
	return CommittedTime(m.GetCommittedUnixNano())
}

// CommittedTime is a committed_unix_nano as a time: the zero time for 0
// (unknown) or less.
func CommittedTime(n int64) time.Time {
	if n > 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// CommittedUnixNano is t as a committed_unix_nano: 0 for the zero time.
func CommittedUnixNano(t time.Time) int64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return 0
	}
	return t.UnixNano()
}
