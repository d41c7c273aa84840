// Package assignertest holds what the Assigner's tests and the agent's
// tests of it share: a skewed true load, the report a task would send
// under it, and checks of what a new assignment moved.
package assignertest

import (
	"slices"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// Skewed is a job's true load per second: 90% of it on the first sixth of
// the key space, the rest spread over everything else. Under the initial
// even split over three tasks, the first task carries almost all of it.
func Skewed() assign.Load {
	hot := assign.KeySpaceEnd / 6
	return assign.Load{{Start: 0, End: hot, Load: 900}, {Start: hot, End: assign.KeySpaceEnd, Load: 100}}
}

// ReportFor is what task's Slicelet would report over a window of the given
// length under a: the true load of each slice it serves, shared evenly
// among the slice's tasks.
func ReportFor(a *assign.Assignment, task string, truth assign.Load, window float64) *slicerv1.ReportLoadRequest {
	req := &slicerv1.ReportLoadRequest{Job: a.Job, Task: task, Generation: a.Generation, WindowSeconds: window}
	for _, s := range a.Slices {
		for _, name := range s.Tasks {
			if name != task {
				continue
			}
			l := truth.In(s.Start, s.End) / float64(len(s.Tasks)) * window
			if b := truth.BytesIn(s.Start, s.End); l > 0 || b > 0 {
				req.Slices = append(req.Slices, &slicerv1.SliceLoad{Start: s.Start, End: s.End, Load: l, Bytes: b})
			}
		}
	}
	return req
}

// MovedOnlyFrom returns the first key range whose tasks changed from prev
// to next other than by losing only gone (a departed task) or by gaining
// only came (a joiner); ok when there is none.
func MovedOnlyFrom(prev, next *assign.Assignment, gone, came string) (lo, hi assign.SliceKey, ok bool) {
	var at []assign.SliceKey
	for _, a := range []*assign.Assignment{prev, next} {
		for _, s := range a.Slices {
			at = append(at, s.Start)
		}
	}
	at = append(at, assign.KeySpaceEnd)
	slices.Sort(at)
	at = slices.Compact(at)
	for i := 0; i+1 < len(at); i++ {
		ps, ns := prev.Slices[prev.Find(at[i])], next.Slices[next.Find(at[i])]
		var lost, gained []string
		for _, t := range ps.Tasks {
			if !slices.Contains(ns.Tasks, t) {
				lost = append(lost, t)
			}
		}
		for _, t := range ns.Tasks {
			if !slices.Contains(ps.Tasks, t) {
				gained = append(gained, t)
			}
		}
		switch {
		case len(lost) == 0 && len(gained) == 0:
		case gone != "" && slices.Equal(lost, []string{gone}):
		case came != "" && slices.Equal(gained, []string{came}):
		default:
			return at[i], at[i+1], false
		}
	}
	return 0, 0, true
}

func SameRouting(a, b *assign.Assignment) bool {
	x, y := a.Clone(), b.Clone()
	x.Generation, y.Generation = 0, 0
	return assign.Equal(x, y)
}

// TaskNames are the names in a's task table, in its order.
func TaskNames(a *assign.Assignment) []string {
	var names []string
	for _, t := range a.Tasks {
		names = append(names, t.Name)
	}
	return names
}

// HasTasks matches an assignment whose task table holds exactly names,
// in that order.
func HasTasks(names ...string) func(*assign.Assignment) bool {
	return func(a *assign.Assignment) bool { return slices.Equal(TaskNames(a), names) }
}
