package slicelet

import "github.com/slicerd/slicerd/assign"

// ownedRanges returns the key ranges of a whose slices name task, sorted,
// with adjacent ranges merged. The returned slices carry no Tasks.
func ownedRanges(a *assign.Assignment, task string) []assign.Slice {
	var out []assign.Slice
	for _, s := range a.Slices {
		if !hasTask(s.Tasks, task) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End == s.Start {
			out[n-1].End = s.End
			continue
		}
		out = append(out, assign.Slice{Start: s.Start, End: s.End})
	}
	return out
}

// hasTask reports whether the sorted names include task. Slices name few
// tasks, so a scan beats a binary search.
func hasTask(names []string, task string) bool {
	for _, n := range names {
		if n == task {
			return true
		}
	}
	return false
}

// diffRanges compares two sorted, disjoint, merged range lists and returns
// what new covers and old does not (assigned) and what old covers and new
// does not (unassigned), both sorted and merged.
func diffRanges(old, new []assign.Slice) (assigned, unassigned []assign.Slice) {
	return subtract(new, old), subtract(old, new)
}

// intersect returns the parts of x inside y.
func intersect(x, y []assign.Slice) []assign.Slice { return subtract(x, subtract(x, y)) }

// subtract returns the parts of x outside y, in one sweep over both. The
// pieces of one x range are separated by y ranges and the x ranges by
// gaps, so the result needs no merging.
func subtract(x, y []assign.Slice) []assign.Slice {
	var out []assign.Slice
	j := 0
	for _, r := range x {
		start := r.Start
		for j < len(y) && y[j].End <= start {
			j++
		}
		for j < len(y) && y[j].Start < r.End {
			if y[j].Start > start {
				out = append(out, assign.Slice{Start: start, End: y[j].Start})
			}
			start = max(start, y[j].End)
			if y[j].End >= r.End {
				break // y[j] may reach into the next x range; keep it
			}
			j++
		}
		if start < r.End {
			out = append(out, assign.Slice{Start: start, End: r.End})
		}
	}
	return out
}

// DiffRanges returns the ranges in next but not in prev (gained) and those
// in prev but not in next (lost). Both inputs must be sorted and merged,
// as Ranges returns them.
func DiffRanges(prev, next []assign.Slice) (gained, lost []assign.Slice) {
	return diffRanges(prev, next)
}
