package assign

import "slices"

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
	var moved uint64
	i, j := 0, 0
	for i < len(prev.Slices) && j < len(next.Slices) {
		ps, ns := &prev.Slices[i], &next.Slices[j]
		lo, hi := max(ps.Start, ns.Start), min(ps.End, ns.End)
		if hi > lo && !subset(ns.Tasks, ps.Tasks) {
			moved += hi - lo
		}
		switch {
		case ps.End < ns.End:
			i++
		case ps.End > ns.End:
			j++
		default:
			i++
			j++
		}
	}
	return float64(moved) / float64(KeySpaceEnd)
}

// subset reports whether every name in a (sorted) is in b (sorted).
func subset(a, b []string) bool {
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
		if x.Start != y.Start || x.End != y.End || !slices.Equal(x.Tasks, y.Tasks) {
			return false
		}
	}
	return true
}
