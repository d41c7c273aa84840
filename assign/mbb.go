package assign

import (
	"cmp"
	"slices"
)

// MakeBeforeBreak returns the assignment that moves from cur to next
// without taking a key from a live task before its new tasks serve it:
// every key is served by its tasks under next and by its tasks under cur
// that are still among live (in any order). It has next's generation, and
// committing it and then next moves each key once: the first step only
// adds tasks, the second only drops them. It returns nil when no live
// task loses a key from cur to next: next itself breaks nothing. gaining
// lists, sorted, the tasks that serve keys in it they did not serve in cur.
// A task live at another address than cur's has lost what it held there,
// as a failed task has: its keys move at once.
func MakeBeforeBreak(cur, next *Assignment, live []Task) (mid *Assignment, gaining []string) {
	addrs := make(map[string]string, len(live))
	for _, t := range live {
		addrs[t.Name] = t.Addr
	}
	alive := make(map[string]bool, len(cur.Tasks))
	for _, t := range cur.Tasks {
		if a, ok := addrs[t.Name]; ok && a == t.Addr {
			alive[t.Name] = true
		}
	}
	out := &Assignment{Job: next.Job, Generation: next.Generation, Incarnation: next.Incarnation}
	kept := false // a live task of cur serves a key next takes from it
	overlaps(cur.Slices, next.Slices, func(cs, ns *Slice, lo, hi SliceKey) {
		tasks := slices.Clone(ns.Tasks)
		for _, t := range ns.Tasks {
			if k, found := slices.BinarySearch(gaining, t); !found && !slices.Contains(cs.Tasks, t) {
				gaining = slices.Insert(gaining, k, t)
			}
		}
		for _, t := range cs.Tasks {
			if k, found := slices.BinarySearch(tasks, t); !found && alive[t] {
				tasks = slices.Insert(tasks, k, t)
				kept = true
			}
		}
		if n := len(out.Slices); n > 0 && slices.Equal(out.Slices[n-1].Tasks, tasks) {
			out.Slices[n-1].End = hi
		} else {
			out.Slices = append(out.Slices, Slice{Start: lo, End: hi, Tasks: tasks})
		}
	})
	if !kept {
		return nil, nil
	}
	// The task table: next's, and the kept tasks of cur at cur's address.
	used := make(map[string]bool)
	for _, s := range out.Slices {
		for _, t := range s.Tasks {
			used[t] = true
		}
	}
	for _, t := range next.Tasks {
		if used[t.Name] {
			out.Tasks = append(out.Tasks, t)
			delete(used, t.Name)
		}
	}
	for _, t := range cur.Tasks {
		if used[t.Name] {
			out.Tasks = append(out.Tasks, t)
			delete(used, t.Name)
		}
	}
	slices.SortFunc(out.Tasks, func(a, b Task) int { return cmp.Compare(a.Name, b.Name) })
	return out, gaining
}
