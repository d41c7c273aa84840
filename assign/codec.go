package assign

import (
	"encoding/binary"
	"fmt"
)

// Binary encoding of an Assignment, version 2. All integers are uvarints.
//
//	magic       "SLCA"
//	version     2
//	job         len, bytes
//	generation
//	incarnation len, bytes (0 bytes: unknown)
//	tasks      count, then per task: name len, name, addr len, addr
//	slices     count, then per slice: width, task count, task indices
//
// Slices follow each other from key 0, so only widths are stored and a gap
// or an overlap cannot be expressed. A slice's task indices point into the
// task table and are delta-coded: the first as is, each next one as the
// distance from its predecessor minus one, so indices stay ascending.
//
// Version 1 is version 2 without the incarnation; it still decodes, with
// an empty Incarnation.
const (
	codecMagic   = "SLCA"
	codecVersion = 2

	// Sanity caps applied before allocating; far beyond any real job.
	maxEncodedTasks  = 1 << 20
	maxEncodedSlices = 1 << 24
)

// MarshalBinary encodes a valid assignment in slicerd's compact binary
// format. It implements encoding.BinaryMarshaler.
func (a *Assignment) MarshalBinary() ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("encode assignment: %w", err)
	}
	size := len(codecMagic) + 1 + binary.MaxVarintLen64*4 + len(a.Job) + len(a.Incarnation)
	for _, t := range a.Tasks {
		if len(t.Addr) > MaxTaskAddrLen {
			return nil, fmt.Errorf("encode assignment: %w: job %q: task %q has a %d-byte address; the limit is %d", ErrInvalidAddr, a.Job, t.Name, len(t.Addr), MaxTaskAddrLen)
		}
		size += 4 + len(t.Name) + len(t.Addr)
	}
	for _, s := range a.Slices {
		size += 10 + 2*len(s.Tasks)
	}
	b := make([]byte, 0, size)
	b = append(b, codecMagic...)
	b = binary.AppendUvarint(b, codecVersion)
	b = appendString(b, a.Job)
	b = binary.AppendUvarint(b, a.Generation)
	b = appendString(b, a.Incarnation)
	b = binary.AppendUvarint(b, uint64(len(a.Tasks)))
	for _, t := range a.Tasks {
		b = appendString(b, t.Name)
		b = appendString(b, t.Addr)
	}
	b = binary.AppendUvarint(b, uint64(len(a.Slices)))
	for _, s := range a.Slices {
		b = binary.AppendUvarint(b, s.Width())
		b = binary.AppendUvarint(b, uint64(len(s.Tasks)))
		prev := -1
		for _, name := range s.Tasks {
			i, _ := a.TaskIndex(name) // validated: present, and ascending
			b = binary.AppendUvarint(b, uint64(i-prev-1))
			prev = i
		}
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalAssignment decodes and validates an assignment encoded by
// MarshalBinary. Errors wrap ErrCorruptEncoding or ErrInvalidAssignment.
func UnmarshalAssignment(b []byte) (*Assignment, error) {
	a := new(Assignment)
	if err := a.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return a, nil
}

// UnmarshalBinary implements encoding.BinaryUnmarshaler. On error a is left
// unchanged.
func (a *Assignment) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	out, err := d.assignment()
	if err != nil {
		return fmt.Errorf("decode assignment: %w", err)
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("decode assignment: %w", err)
	}
	*a = *out
	return nil
}

type decoder struct {
	b   []byte
	off int
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrCorruptEncoding, d.off, fmt.Sprintf(format, args...))
}

func (d *decoder) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		return 0, d.errorf("truncated before %s", what)
	case n < 0:
		return 0, d.errorf("%s does not fit in 64 bits", what)
	}
	d.off += n
	return v, nil
}

// label names a field in errors. It is formatted only on error, so the
// decoder does not allocate per field.
type label struct {
	what  string
	index int // -1: none
}

func (l label) String() string {
	if l.index < 0 {
		return l.what
	}
	return fmt.Sprintf(l.what, l.index)
}

// count reads an element count and checks it against the bytes left, at
// least minBytes per element, so a forged count cannot make us allocate.
func (d *decoder) count(what label, minBytes, limit int) (int, error) {
	v, err := d.uvarint(what.what)
	if err != nil {
		return 0, err
	}
	if v > uint64(limit) {
		return 0, d.errorf("%s %d exceeds the limit of %d", what, v, limit)
	}
	if v > uint64(d.remaining()/minBytes) {
		return 0, d.errorf("%s %d needs at least %d bytes but only %d remain", what, v, v*uint64(minBytes), d.remaining())
	}
	return int(v), nil
}

func (d *decoder) str(what label, limit int) (string, error) {
	n, err := d.uvarint("string length")
	if err != nil {
		return "", err
	}
	if n > uint64(limit) {
		return "", d.errorf("%s is %d bytes long; the limit is %d", what, n, limit)
	}
	if n > uint64(d.remaining()) {
		return "", d.errorf("%s of %d bytes is truncated; %d bytes remain", what, n, d.remaining())
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s, nil
}

func (d *decoder) assignment() (*Assignment, error) {
	if len(d.b) < len(codecMagic) || string(d.b[:len(codecMagic)]) != codecMagic {
		return nil, d.errorf("missing the %q header; this is not an encoded assignment", codecMagic)
	}
	d.off = len(codecMagic)
	version, err := d.uvarint("format version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 0:
		return nil, d.errorf("format version 0 does not exist")
	case version > codecVersion:
		return nil, d.errorf("format version %d is newer than version %d, the newest this build reads; upgrade slicerd", version, codecVersion)
	}

	a := new(Assignment)
	if a.Job, err = d.str(label{"job name", -1}, MaxJobNameLen); err != nil {
		return nil, err
	}
	if a.Generation, err = d.uvarint("generation"); err != nil {
		return nil, err
	}
	if version >= 2 {
		if a.Incarnation, err = d.str(label{"incarnation", -1}, MaxIncarnationLen); err != nil {
			return nil, err
		}
	}
	// A task takes at least 3 bytes: a name length, a name byte, an address length.
	nt, err := d.count(label{"task count", -1}, 3, maxEncodedTasks)
	if err != nil {
		return nil, err
	}
	a.Tasks = make([]Task, nt)
	for i := range a.Tasks {
		if a.Tasks[i].Name, err = d.str(label{"task %d name", i}, MaxTaskNameLen); err != nil {
			return nil, err
		}
		if a.Tasks[i].Addr, err = d.str(label{"task %d address", i}, MaxTaskAddrLen); err != nil {
			return nil, err
		}
	}
	// A slice takes at least 3 bytes: a width, a task count, a task index.
	ns, err := d.count(label{"slice count", -1}, 3, maxEncodedSlices)
	if err != nil {
		return nil, err
	}
	a.Slices = make([]Slice, ns)
	// The slices' task indices first, then their lists, so that the lists
	// of two tasks or more take one array of exactly the names they hold
	// (TaskLists.Reserve). Both grow with the input, one byte per index at
	// least, never by a count.
	ids := make([]int32, 0, min(d.remaining(), 2*ns))
	counts := make([]int32, ns)
	multi := 0
	var start SliceKey
	for i := range a.Slices {
		w, err := d.uvarint("slice width")
		if err != nil {
			return nil, err
		}
		if w == 0 || w > KeySpaceEnd-start {
			return nil, d.errorf("slice %d at %#x has width %#x; it must be in [1, %#x]", i, start, w, KeySpaceEnd-start)
		}
		k, err := d.count(label{"slice %d task count", i}, 1, nt)
		if err != nil {
			return nil, err
		}
		idx := -1
		for range k {
			delta, err := d.uvarint("task index")
			if err != nil {
				return nil, err
			}
			if delta >= uint64(nt-idx-1) {
				return nil, d.errorf("slice %d names task index %d+%d, past the %d tasks", i, idx+1, delta, nt)
			}
			idx += int(delta) + 1
			ids = append(ids, int32(idx))
		}
		a.Slices[i] = Slice{Start: start, End: start + w}
		counts[i] = int32(k)
		if k > 1 {
			multi += k
		}
		start += w
	}
	if d.remaining() != 0 {
		return nil, d.errorf("%d unexpected bytes after the last slice", d.remaining())
	}
	lists := NewTaskLists(a.Tasks)
	lists.Reserve(multi)
	from := 0
	for i, k := range counts {
		a.Slices[i].Tasks = lists.ofIndexes(ids[from : from+int(k)])
		from += int(k)
	}
	return a, nil
}
