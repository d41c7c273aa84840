package demo

import (
	"fmt"
	"io"

	"github.com/slicerd/slicerd/assign"
)

// PrintAssignment writes a human summary of a, as the demo and 'slicerd
// job watch' print it: each task's share of the key space, then the slices
// when there are few enough to read.
func PrintAssignment(w io.Writer, a *assign.Assignment) {
	share := make(map[string]uint64, len(a.Tasks))
	count := make(map[string]int, len(a.Tasks))
	for _, s := range a.Slices {
		for _, t := range s.Tasks {
			share[t] += s.Width()
			count[t]++
		}
	}
	fmt.Fprintf(w, "job %s generation %d: %d slices over %d tasks\n", a.Job, a.Generation, len(a.Slices), len(a.Tasks))
	for _, t := range a.Tasks {
		pct := 100 * float64(share[t.Name]) / float64(assign.KeySpaceEnd)
		fmt.Fprintf(w, "  %-16s %-22s %6.2f%% of keys in %d slices\n", t.Name, t.Addr, pct, count[t.Name])
	}
	const maxShown = 16
	if len(a.Slices) <= maxShown {
		for _, s := range a.Slices {
			fmt.Fprintf(w, "    [%#016x, %#016x) %v\n", s.Start, s.End, s.Tasks)
		}
	}
}
