package assign

import (
	"fmt"
	"slices"
)

// Initial builds generation 1 of a job's assignment. With no load measured
// yet every key is assumed to weigh the same, so the key space is cut into
// one equal range per task (the last absorbs the division remainder), and
// range i goes to task i and, for redundancy r, to the r-1 tasks after it in
// name order. Every task therefore serves r ranges. When r reaches n every
// range has the same tasks, and the ranges are kept as a single slice, the
// form Rebalance would merge them into.
func Initial(job string, tasks []Task, cfg Config) (*Assignment, error) {
	if err := ValidateJobName(job); err != nil {
		return nil, fmt.Errorf("initial assignment: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("initial assignment for job %q: %w", job, err)
	}
	live, err := sortedTasks(job, cfg.Controls(tasks))
	if err != nil {
		return nil, fmt.Errorf("initial assignment: %w", err)
	}
	return evenSplit(job, 1, openTasks(live), cfg), nil
}

// evenSplit is Initial without validation; live is sorted and non-empty.
func evenSplit(job string, gen uint64, live []Task, cfg Config) *Assignment {
	n := len(live)
	r := min(cfg.MinRedundancy, n)
	width := KeySpaceEnd / SliceKey(n)
	a := &Assignment{Job: job, Generation: gen, Tasks: recorded(live), Slices: make([]Slice, n)}
	names := make([]string, n*r) // one backing array for every slice's task list
	for i := range n {
		start := SliceKey(i) * width
		end := start + width
		if i == n-1 {
			end = KeySpaceEnd
		}
		ts := names[i*r : (i+1)*r : (i+1)*r]
		for j := range r {
			ts[j] = live[(i+j)%n].Name
		}
		slices.Sort(ts) // the window may wrap past the last task
		a.Slices[i] = Slice{Start: start, End: end, Tasks: ts}
	}
	if r == n && n > 1 {
		a.Slices = []Slice{{Start: 0, End: KeySpaceEnd, Tasks: a.Slices[0].Tasks}}
	}
	return a
}
