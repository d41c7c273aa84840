package clerktest

import (
	"slices"
	"strings"

	"github.com/slicerd/slicerd/assign"
)

// Uniform returns a valid assignment of job that cuts the key space into n
// equal slices and gives slice i to tasks[i%len(tasks)]. tasks must be
// non-empty with valid, distinct names.
func Uniform(job string, generation uint64, tasks []assign.Task, n int) *assign.Assignment {
	a := &assign.Assignment{Job: job, Generation: generation, Tasks: slices.Clone(tasks)}
	slices.SortFunc(a.Tasks, func(x, y assign.Task) int { return strings.Compare(x.Name, y.Name) })
	width := assign.KeySpaceEnd / assign.SliceKey(n)
	for i := range n {
		s := assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width, Tasks: []string{tasks[i%len(tasks)].Name}}
		if i == n-1 {
			s.End = assign.KeySpaceEnd
		}
		a.Slices = append(a.Slices, s)
	}
	return a
}
