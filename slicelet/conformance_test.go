package slicelet

import (
	"slices"
	"testing"

	"github.com/slicerd/slicerd/api/conformance"
)

// TestConformanceLookup plays api/conformance/lookup.json
// (docs/client-contract.md) from a task's side: for every task of each
// assignment, a Slicelet of that task owns exactly the keys and slice keys
// the vectors route to it.
func TestConformanceLookup(t *testing.T) {
	cases, err := conformance.ReadLookups("../api/conformance/lookup.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		a := c.Assignment
		for _, task := range a.Tasks {
			s := newOffline(t, task.Name)
			a.Job = s.Job() // the vectors' job; the Slicelet checks only its own
			s.install(nil, a)
			ranges, _ := s.Ranges()
			for _, l := range c.Lookups {
				want := slices.Contains(l.Tasks, task.Name)
				if got := inRanges(ranges, l.SliceKey); got != want {
					t.Errorf("%s: task %s owns slice key %d: %v, want %v", c.Name, task.Name, l.SliceKey, got, want)
				}
				if l.Key != nil {
					if got := s.IsAffinitizedKey(l.Key); got != want {
						t.Errorf("%s: task %s owns key %q: %v, want %v", c.Name, task.Name, l.Key, got, want)
					}
				}
			}
		}
	}
}
