package assign

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
)

// ErrInvalidLoad marks load measurements that cannot be used.
var ErrInvalidLoad = errors.New("assign: invalid load")

// MaxLoad bounds one measurement. Anything above it is a broken reporter,
// not a hot key, and would drown every real signal if folded in.
const MaxLoad = 1e15

// MaxBytes bounds one report of state size and one task's memory limit:
// 2^50 bytes (a pebibyte) is far beyond any one task's memory, so
// anything above it is a broken reporter.
const MaxBytes = 1 << 50

// LoadEntry says the keys in [Start, End) generated Load units of load
// (requests, CPU seconds, bytes: any additive metric) in one measurement
// window, and that each task serving them holds Bytes bytes of state for
// them (0 when the application does not report state size). Within an
// entry, load and bytes are taken as spread evenly over its keys.
//
// Load is a rate: the loads several tasks report for the same keys add
// up. Bytes is a gauge of what each serving task holds: every replica
// holds the keys' state, so reports of the same keys do not add up (see
// MergeLoads), and a task's memory use is the sum of Bytes over the keys
// it serves.
type LoadEntry struct {
	Start, End SliceKey
	Load       float64
	Bytes      float64
}

// within is the part of e's load that falls in [start, end), taking load
// as spread evenly over the entry's keys: all of it, exactly, when the range
// covers the entry, and none when the two do not overlap. Every sum of load
// over a key range goes through it, so sums over the same range agree to
// the last bit whichever way they are taken.
func (e *LoadEntry) within(start, end SliceKey) float64 {
	a, b := max(e.Start, start), min(e.End, end)
	switch {
	case a >= b:
		return 0
	case a == e.Start && b == e.End:
		return e.Load
	}
	return e.Load * float64(b-a) / float64(e.End-e.Start)
}

// bytesWithin is within for e's Bytes.
func (e *LoadEntry) bytesWithin(start, end SliceKey) float64 {
	a, b := max(e.Start, start), min(e.End, end)
	switch {
	case a >= b || e.Bytes == 0:
		return 0
	case a == e.Start && b == e.End:
		return e.Bytes
	}
	return e.Bytes * float64(b-a) / float64(e.End-e.Start)
}

// Load is a job's measured load over one window: entries sorted by Start
// and not overlapping. Keys no entry covers carry no load. A single hot
// application key is an entry of width one.
type Load []LoadEntry

// Validate checks that l is sorted, non-overlapping, inside the key space,
// and that every load is finite, non-negative and at most MaxLoad and
// every byte count finite, non-negative and at most MaxBytes.
func (l Load) Validate() error {
	_, err := l.validTotal()
	return err
}

// validTotal is Validate and, for a valid load, Total, in one pass.
func (l Load) validTotal() (float64, error) {
	// One test per entry, the common case at a million entries; the
	// entry at fault, if any, is told apart by fault. The comparisons are
	// false for NaN, so it fails them too.
	var prevEnd SliceKey
	var sum float64
	for i := range l {
		e := &l[i]
		if e.End <= e.Start || e.End > KeySpaceEnd || e.Start < prevEnd ||
			!(e.Load >= 0 && e.Load <= MaxLoad) || !(e.Bytes >= 0 && e.Bytes <= MaxBytes) {
			return 0, l.fault(i)
		}
		prevEnd = e.End
		sum += e.Load
	}
	return sum, nil
}

// fault says what is wrong with entry i, the first that Validate finds at
// fault.
func (l Load) fault(i int) error {
	e := l[i]
	switch {
	case e.End <= e.Start:
		return fmt.Errorf("%w: entry %d [%#x, %#x) is empty or inverted", ErrInvalidLoad, i, e.Start, e.End)
	case e.End > KeySpaceEnd:
		return fmt.Errorf("%w: entry %d ends at %#x, past the key space end %#x", ErrInvalidLoad, i, e.End, KeySpaceEnd)
	case i > 0 && e.Start < l[i-1].End:
		return fmt.Errorf("%w: entry %d starts at %#x, inside or before the previous entry ending at %#x; sort and merge entries", ErrInvalidLoad, i, e.Start, l[i-1].End)
	}
	if err := ValidateLoadValue(e.Load); err != nil {
		return fmt.Errorf("entry %d [%#x, %#x): %w", i, e.Start, e.End, err)
	}
	if err := ValidateBytesValue(e.Bytes); err != nil {
		return fmt.Errorf("entry %d [%#x, %#x): %w", i, e.Start, e.End, err)
	}
	return fmt.Errorf("%w: entry %d [%#x, %#x) is at fault", ErrInvalidLoad, i, e.Start, e.End) // unreachable: these are Validate's tests
}

// ValidateLoadValue accepts a finite value in [0, MaxLoad].
func ValidateLoadValue(v float64) error {
	switch {
	case math.IsNaN(v):
		return fmt.Errorf("%w: load is NaN", ErrInvalidLoad)
	case math.IsInf(v, 0):
		return fmt.Errorf("%w: load is infinite", ErrInvalidLoad)
	case v < 0:
		return fmt.Errorf("%w: load %g is negative", ErrInvalidLoad, v)
	case v > MaxLoad:
		return fmt.Errorf("%w: load %g is above the limit %g", ErrInvalidLoad, v, MaxLoad)
	}
	return nil
}

// ValidateBytesValue accepts a finite byte count in [0, MaxBytes].
func ValidateBytesValue(v float64) error {
	switch {
	case math.IsNaN(v):
		return fmt.Errorf("%w: bytes is NaN", ErrInvalidLoad)
	case math.IsInf(v, 0):
		return fmt.Errorf("%w: bytes is infinite", ErrInvalidLoad)
	case v < 0:
		return fmt.Errorf("%w: bytes %g is negative", ErrInvalidLoad, v)
	case v > MaxBytes:
		return fmt.Errorf("%w: bytes %g is above the limit 2^50 (1 PiB); report state in bytes", ErrInvalidLoad, v)
	}
	return nil
}

// Total is the load of the whole key space.
func (l Load) Total() float64 {
	var sum float64
	for _, e := range l {
		sum += e.Load
	}
	return sum
}

// In is the load of the keys in [start, end): every entry overlapping the
// range contributes in proportion to the overlap.
func (l Load) In(start, end SliceKey) float64 { return l.sum(start, end, (*LoadEntry).within) }

// Buckets cuts the key space into n equal ranges, bucket i being
// [i*2^63/n, (i+1)*2^63/n) rounded down, and returns the load in each,
// as In adds it up. n must be at least 1.
func (l Load) Buckets(n int) []float64 {
	out := make([]float64, n)
	start := SliceKey(0)
	for i := range out {
		end := bucketEnd(i, n)
		out[i] = l.In(start, end)
		start = end
	}
	return out
}

// bucketEnd is where bucket i of n (Buckets) ends.
func bucketEnd(i, n int) SliceKey {
	hi, lo := bits.Mul64(uint64(i+1), uint64(KeySpaceEnd))
	q, _ := bits.Div64(hi, lo, uint64(n))
	return SliceKey(q)
}

// AddBuckets adds w times the load of l in each of len(out) buckets, cut
// as Buckets cuts them, to out: Buckets of the merge of several loads,
// each weighed, without merging them (the merge adds up the same loads,
// so the two differ by rounding alone, and by MergeLoads' cap at
// MaxLoad). It costs one pass over l and the buckets, with no
// allocation; l must be valid.
func (l Load) AddBuckets(out []float64, w float64) {
	n := len(out)
	if n == 0 || len(l) == 0 {
		return
	}
	b := 0
	start, end := SliceKey(0), bucketEnd(0, n)
	for i := range l {
		e := &l[i]
		for end <= e.Start && b < n-1 { // buckets before the entry
			b++
			start, end = end, bucketEnd(b, n)
		}
		for {
			out[b] += w * e.within(start, end)
			if end >= e.End || b == n-1 {
				break
			}
			b++
			start, end = end, bucketEnd(b, n)
		}
	}
}

// sum adds part over the entries of l overlapping [start, end).
func (l Load) sum(start, end SliceKey, part func(*LoadEntry, SliceKey, SliceKey) float64) float64 {
	var sum float64
	for i := l.after(start, 0); i < len(l) && l[i].Start < end; i++ {
		sum += part(&l[i], start, end)
	}
	return sum
}

// HasBytes reports whether any entry of l carries a byte count.
func (l Load) HasBytes() bool {
	return slices.ContainsFunc(l, func(e LoadEntry) bool { return e.Bytes > 0 })
}

// BytesIn is the state each task serving all of [start, end) holds for
// those keys: every entry overlapping the range contributes its bytes in
// proportion to the overlap.
func (l Load) BytesIn(start, end SliceKey) float64 {
	return l.sum(start, end, (*LoadEntry).bytesWithin)
}

// covers reports whether a single entry of l spans all of [start, end).
func (l Load) covers(start, end SliceKey) bool {
	return l.coversFrom(l.after(start, 0), start, end)
}

// coversFrom is covers given i, the first entry of l ending after start.
func (l Load) coversFrom(i int, start, end SliceKey) bool {
	return i < len(l) && l[i].Start <= start && l[i].End >= end
}

// after returns the index of the first entry of l ending after k (len(l)
// if none), given that no entry before from does. It gallops from from,
// in steps that double, then searches the last step: an entry d places
// on costs about 2·log2(d) reads, all near from when d is small (slices
// looked up in key order), rather than a search of all of l.
func (l Load) after(k SliceKey, from int) int {
	if from >= len(l) || l[from].End > k {
		return from
	}
	// l[from] ends at or before k; find hi with l[hi] ending after it.
	lo, step := from+1, 1
	hi := lo
	for hi < len(l) && l[hi].End <= k {
		lo = hi + 1
		hi += step
		step *= 2
	}
	hi = min(hi, len(l))
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l[m].End <= k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// TaskLoads returns the load each task of a carries under l, indexed like
// a.Tasks. A slice's load is shared evenly among the tasks serving it.
func TaskLoads(a *Assignment, l Load) []float64 {
	return perTask(a, l, (*LoadEntry).within, true)
}

// TaskBytes returns the state each task of a holds under l, indexed like
// a.Tasks: the bytes of every slice it serves, in full.
func TaskBytes(a *Assignment, l Load) []float64 {
	if !l.HasBytes() {
		return make([]float64, len(a.Tasks))
	}
	return perTask(a, l, (*LoadEntry).bytesWithin, false)
}

// perTask adds up part of l over each slice of a for each task serving
// it, indexed like a.Tasks: the slice's sum shared evenly among its tasks
// when shared, whole to each otherwise. One sweep over a's slices and l
// together (both in key order, as in a valid assignment and load), and
// names looked up as taskIDs does.
func perTask(a *Assignment, l Load, part func(*LoadEntry, SliceKey, SliceKey) float64, shared bool) []float64 {
	idsOf := a.taskIDs()
	return sumPerTask(a, l, part, shared, func(s *Slice, _ int) []int32 { return idsOf(s) })
}

// sumPerTask is perTask with the tasks of each slice given by idsOf (as
// indexes in a.Tasks, -1 for none), called with the slice and the number
// of names the slices before it hold, for the slices with load.
func sumPerTask(a *Assignment, l Load, part func(*LoadEntry, SliceKey, SliceKey) float64, shared bool, idsOf func(s *Slice, before int) []int32) []float64 {
	out := make([]float64, len(a.Tasks))
	j := 0     // the first entry of l ending after the slice's start
	names := 0 // names in the slices before si
	for si := range a.Slices {
		s := &a.Slices[si]
		before := names
		names += len(s.Tasks)
		if len(s.Tasks) == 0 {
			continue
		}
		j = l.after(s.Start, j)
		var sum float64
		for k := j; k < len(l) && l[k].Start < s.End; k++ {
			sum += part(&l[k], s.Start, s.End)
		}
		if sum == 0 {
			continue
		}
		ids := idsOf(s, before)
		if shared {
			sum /= float64(len(s.Tasks))
		}
		for _, i := range ids {
			if i >= 0 {
				out[i] += sum
			}
		}
	}
	return out
}

// BytesMoved is the state tasks gain from prev to next under l: the bytes
// of every key range, once for each task that serves it in next and not in
// prev — what a state handoff has to carry for the move.
func BytesMoved(prev, next *Assignment, l Load) float64 {
	if !l.HasBytes() {
		return 0
	}
	var sum float64
	overlaps(prev.Slices, next.Slices, func(ps, ns *Slice, lo, hi SliceKey) {
		for _, t := range ns.Tasks {
			if _, ok := slices.BinarySearch(ps.Tasks, t); !ok {
				sum += l.BytesIn(lo, hi)
			}
		}
	})
	return sum
}

// MemoryOverage is how far the tasks of a exceed their memory limits
// under l, summed over tasks: each task that holds more bytes than the
// MemoryLimit of the task of the same name in live (in any order)
// contributes the excess. Tasks without a limit contribute nothing.
func MemoryOverage(a *Assignment, l Load, live []Task) float64 {
	var over float64
	forLimited(a, l, live, func(b, limit float64) { over += max(b-limit, 0) })
	return over
}

// MemoryUse is the largest share of its memory limit that a task of a
// with one (in live, in any order) holds under l: above 1, that task is
// past its limit. It is 0 when no task has a limit.
func MemoryUse(a *Assignment, l Load, live []Task) float64 {
	var most float64
	forLimited(a, l, live, func(b, limit float64) { most = max(most, b/limit) })
	return most
}

// forLimited calls f with the bytes and limit of each task of a that has
// a memory limit in live.
func forLimited(a *Assignment, l Load, live []Task, f func(bytes, limit float64)) {
	limits := make(map[string]float64, len(live))
	for _, t := range live {
		if t.MemoryLimit > 0 {
			limits[t.Name] = t.MemoryLimit
		}
	}
	if len(limits) == 0 {
		return
	}
	for i, b := range TaskBytes(a, l) {
		if limit, ok := limits[a.Tasks[i].Name]; ok {
			f(b, limit)
		}
	}
}

// Imbalance is the load of the most loaded task of a over the mean task
// load: 1 is perfectly even. With no load at all it is 1.
func Imbalance(a *Assignment, l Load) float64 { return ImbalanceWith(a, l, nil) }

// ImbalanceWith is Imbalance for tasks of different capacities: the
// utilisation (load / capacity) of the most utilised task of a over the
// job's utilisation (all load / all capacity). Capacities are those of the
// tasks of the same names in live, in any order; a task of a that live
// does not list, or every task with live nil, counts as capacity 1, which
// makes it Imbalance.
func ImbalanceWith(a *Assignment, l Load, live []Task) float64 {
	_, imbalance := Hottest(a, l, live)
	return imbalance
}

// Hottest returns the index in a.Tasks of the most utilised task, and
// ImbalanceWith: its utilisation over the job's. It returns -1 and 1 when
// a has no task or there is no load.
func Hottest(a *Assignment, l Load, live []Task) (task int, imbalance float64) {
	return HottestOf(a, TaskLoads(a, l), live)
}

// HottestOf is Hottest with the tasks' loads already added up: loads is
// TaskLoads(a, l). A caller that needs both does the sweep once.
func HottestOf(a *Assignment, loads []float64, live []Task) (task int, imbalance float64) {
	if len(loads) == 0 {
		return -1, 1
	}
	caps := capacities(a, live)
	var sum, capSum, most float64
	task = -1
	for i, x := range loads {
		sum += x
		capSum += caps[i]
		if u := x / caps[i]; task < 0 || u > most {
			task, most = i, u
		}
	}
	if sum == 0 {
		return -1, 1
	}
	return task, most / (sum / capSum)
}

// capacities returns the capacity of each task of a, from live.
func capacities(a *Assignment, live []Task) []float64 {
	caps := make([]float64, len(a.Tasks))
	byName := make(map[string]float64, len(live))
	for _, t := range live {
		byName[t.Name] = capacityOf(t)
	}
	for i, t := range a.Tasks {
		caps[i] = 1
		if c, ok := byName[t.Name]; ok {
			caps[i] = c
		}
	}
	return caps
}

// Algorithm is a sharding policy. Decide takes the previous assignment (nil
// for a job that has none), the live tasks, the load measured under prev
// and the job's configuration, and returns the next assignment (generation
// prev's + 1, or 1) with a record of what moved and why. Implementations
// are pure and deterministic.
type Algorithm interface {
	Name() string
	Decide(job string, prev *Assignment, live []Task, load Load, cfg Config) (*Assignment, Decision, error)
}

// MergeLoads adds possibly overlapping loads into one sorted,
// non-overlapping Load. An entry that only partly covers a piece
// contributes in proportion to the overlap (load is taken as spread evenly
// over an entry's keys). Sums are capped at MaxLoad so the result
// always validates. Bytes do not add up: a piece's bytes are the largest
// any entry covering it gives (replicas each hold the keys' state, and the
// largest report is the safe one to place by). Each load is sorted and
// every entry ends after it starts, as in a Load that validates.
func MergeLoads(ls ...Load) Load {
	n := 0
	for _, l := range ls {
		n += len(l)
	}
	if n == 0 {
		return nil
	}
	if n < byStartBuckets {
		return mergeSorted(byStart(make(Load, 0, n), ls, n))
	}
	// The entries ordered by Start are needed only until they are merged:
	// at a million entries (a job of 10,000 tasks), 32 MB that each merge
	// would otherwise allocate, zero and leave to the collector.
	buf := mergeBufs.Get().(*[]LoadEntry)
	defer mergeBufs.Put(buf)
	all := byStart(reuse(buf, 0, n), ls, n)
	defer func() { *buf = all }()
	return mergeSorted(all)
}

// mergeBufs holds arrays for byStart's entries between merges of many
// entries (see reuse); a pool lets them go after two collections without
// a merge.
var mergeBufs = sync.Pool{New: func() any { return new([]LoadEntry) }}

// byStartBuckets is the fewest entries byStart deals into buckets rather
// than sorting them whole.
const byStartBuckets = 4096

// mergeSorted is MergeLoads of all, ordered by Start. It goes through
// all a cluster at a time: entries that each start before the ones before
// them in the cluster end (the reports of a slice's replicas, say). A
// cluster's pieces are those between its entries' starts and ends, and
// an entry alone is its own piece, so a million entries of reports that
// do not overlap are never sorted again.
func mergeSorted(all Load) Load {
	out := make(Load, 0, len(all))
	var points []SliceKey
	var active []LoadEntry
	for lo := 0; lo < len(all); {
		end, hi := all[lo].End, lo+1
		for hi < len(all) && all[hi].Start < end {
			end = max(end, all[hi].End)
			hi++
		}
		if e := all[lo]; hi == lo+1 {
			if e.End > e.Start && (e.Load > 0 || e.Bytes > 0) {
				out = append(out, LoadEntry{Start: e.Start, End: e.End, Load: min(e.Load, MaxLoad), Bytes: min(e.Bytes, MaxBytes)})
			}
			lo = hi
			continue
		}
		out, points, active = mergePieces(out, all[lo:hi], points, active)
		lo = hi
	}
	return out
}

// mergePieces appends to out the pieces of entries (ordered by Start):
// one between each two consecutive starts or ends of them, with the load
// of every entry covering it, in the entries' order. points and active
// are scratch, returned for reuse.
func mergePieces(out, entries Load, points []SliceKey, active []LoadEntry) (Load, []SliceKey, []LoadEntry) {
	points = points[:0]
	for _, e := range entries {
		points = append(points, e.Start, e.End)
	}
	slices.Sort(points)
	points = slices.Compact(points)
	active = active[:0]
	next := 0
	for k := 0; k+1 < len(points); k++ {
		p, q := points[k], points[k+1]
		active = slices.DeleteFunc(active, func(e LoadEntry) bool { return e.End <= p })
		for next < len(entries) && entries[next].Start <= p {
			if entries[next].End > p {
				active = append(active, entries[next])
			}
			next++
		}
		var sum, most float64
		for _, e := range active {
			if e.Start == p && e.End == q {
				sum += e.Load
				most = max(most, e.Bytes)
			} else {
				f := float64(q-p) / float64(e.End-e.Start)
				sum += e.Load * f
				most = max(most, e.Bytes*f)
			}
		}
		if sum > 0 || most > 0 {
			out = append(out, LoadEntry{Start: p, End: q, Load: min(sum, MaxLoad), Bytes: min(most, MaxBytes)})
		}
	}
	return out, points, active
}

// byStart returns the n entries of ls ordered by Start, in out, which has
// a capacity of n at least (every entry is written: out may hold
// anything).
// A few thousand are sorted; more (an Assigner merging the reports of
// thousands of tasks) are dealt into buckets by the top bits of Start,
// each then sorted alone: two passes and many small sorts rather than one
// sort of a million entries, several times faster.
func byStart(out Load, ls []Load, n int) Load {
	cmpStart := func(x, y LoadEntry) int { return cmp.Compare(x.Start, y.Start) }
	out = out[:0]
	if n < byStartBuckets {
		for _, l := range ls {
			out = append(out, l...)
		}
		slices.SortFunc(out, cmpStart)
		return out
	}
	// About 8 entries a bucket, at most 2^16 buckets. Slice keys are
	// below 2^63; one past them (a load that would not validate) goes in
	// the last bucket.
	nb := max(8, min(16, bits.Len(uint(n))-3))
	bucket := func(k SliceKey) SliceKey { return min(k>>(63-nb), 1<<nb-1) }
	first := make([]int, 1<<nb+1)
	for _, l := range ls {
		for i := range l {
			first[bucket(l[i].Start)+1]++
		}
	}
	for b := 1; b < len(first); b++ {
		first[b] += first[b-1]
	}
	out = out[:n]
	next := slices.Clone(first[:1<<nb])
	for _, l := range ls {
		for i := range l {
			b := bucket(l[i].Start)
			out[next[b]] = l[i]
			next[b]++
		}
	}
	for b := range 1 << nb {
		switch part := out[first[b]:first[b+1]]; {
		case len(part) > 32: // keys that crowd into a few buckets
			slices.SortFunc(part, cmpStart)
		case len(part) > 1:
			sortByStart(part)
		}
	}
	return out
}

// sortByStart sorts a few entries by Start: an insertion sort, which for
// the handful of entries a bucket of byStart holds is several times
// faster than a general sort calling a comparison for each pair.
func sortByStart(l Load) {
	for i := 1; i < len(l); i++ {
		e := l[i]
		j := i
		for ; j > 0 && l[j-1].Start > e.Start; j-- {
			l[j] = l[j-1]
		}
		l[j] = e
	}
}

// Owned returns the load of l that falls on keys some slice of one of as
// gives task: each entry cut to those keys, its load and bytes taken as
// spread evenly over its keys. It is how an Assigner keeps a task's
// report to the keys the task serves (in the current assignment, or the
// one before while a report spans the change), so that one task cannot
// report load on another's keys. nil assignments are skipped. It reads
// every slice of as; OwnedIn gives the same from indexes built once per
// assignment.
func (l Load) Owned(task string, as ...*Assignment) Load {
	var owned [][2]SliceKey
	for _, a := range as {
		if a == nil {
			continue
		}
		for _, s := range a.Slices {
			if slices.Contains(s.Tasks, task) {
				owned = append(owned, [2]SliceKey{s.Start, s.End})
			}
		}
	}
	return l.cutTo(owned)
}

// cutTo returns the parts of l's entries on keys of the ranges owned
// (half-open, in any order, overlapping or not), as Owned does.
func (l Load) cutTo(owned [][2]SliceKey) Load {
	slices.SortFunc(owned, func(x, y [2]SliceKey) int { return cmp.Compare(x[0], y[0]) })
	merged := owned[:0]
	for _, r := range owned {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	var out Load
	for _, e := range l {
		// The first owned range that ends after the entry starts.
		j, _ := slices.BinarySearchFunc(merged, e.Start, func(r [2]SliceKey, k SliceKey) int { return cmp.Compare(r[1], k+1) })
		for ; j < len(merged) && merged[j][0] < e.End; j++ {
			a, b := max(e.Start, merged[j][0]), min(e.End, merged[j][1])
			if a < b {
				out = append(out, LoadEntry{Start: a, End: b, Load: e.within(a, b), Bytes: e.bytesWithin(a, b)})
			}
		}
	}
	return out
}
