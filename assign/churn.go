package assign

import (
	"cmp"
	"slices"
)

// Churn is the fraction of the key space, in [0, 1] and weighted by slice
// width, whose tasks in next include a task that did not serve the key in
// prev: the keys some task must newly load. Dropping a replica costs
// nothing. A nil prev counts every key of next as moved; a nil next, none.
func Churn(prev, next *Assignment) float64 {
	if next == nil || len(next.Slices) == 0 {
		return 0
	}
	if prev == nil || len(prev.Slices) == 0 {
		return 1
	}
	// In parts of next at once, each against the slices of prev its keys
	// fall in: a sum of integers, the same in any order.
	k := parts(len(next.Slices))
	moved := make([]uint64, k)
	inParts(len(next.Slices), k, func(part, lo, hi int) {
		ns := next.Slices[lo:hi]
		from, to := 0, len(prev.Slices)
		if k > 1 {
			from, to = prev.Find(ns[0].Start), prev.Find(ns[len(ns)-1].End-1)+1
		}
		overlaps(prev.Slices[from:to], ns, func(ps, ns *Slice, lo, hi SliceKey) {
			if !sameList(ns.Tasks, ps.Tasks) && !subset(ns.Tasks, ps.Tasks) {
				moved[part] += hi - lo
			}
		})
	})
	var sum uint64
	for _, m := range moved {
		sum += m
	}
	return float64(sum) / float64(KeySpaceEnd)
}

// overlaps calls visit for every non-empty range [lo, hi) where a slice
// of a meets a slice of b, in key order. Both lists must be sorted and
// contiguous.
func overlaps(a, b []Slice, visit func(sa, sb *Slice, lo, hi SliceKey)) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		sa, sb := &a[i], &b[j]
		if lo, hi := max(sa.Start, sb.Start), min(sa.End, sb.End); hi > lo {
			visit(sa, sb, lo, hi)
		}
		switch {
		case sa.End < sb.End:
			i++
		case sa.End > sb.End:
			j++
		default:
			i++
			j++
		}
	}
}

// subset reports whether every element of a (sorted) is in b (sorted).
func subset[T cmp.Ordered](a, b []T) bool {
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			return false
		}
		j++
	}
	return true
}

// Equal reports whether a and b assign the same job's keys the same way:
// same job, same tasks at the same addresses, same slices. The generation
// is ignored.
func Equal(a, b *Assignment) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Job != b.Job || !slices.Equal(a.Tasks, b.Tasks) || len(a.Slices) != len(b.Slices) {
		return false
	}
	for i := range a.Slices {
		x, y := &a.Slices[i], &b.Slices[i]
		if x.Start != y.Start || x.End != y.End || !sameList(x.Tasks, y.Tasks) && !slices.Equal(x.Tasks, y.Tasks) {
			return false
		}
	}
	return true
}

// sameList reports whether a and b are one list: slices share their task
// lists (see Slice), and comparing the lists' first elements' addresses
// is much cheaper than comparing their names.
func sameList(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
