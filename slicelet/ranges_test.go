package slicelet

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/slicerd/slicerd/assign"
)

func sl(start, end assign.SliceKey) assign.Slice { return assign.Slice{Start: start, End: end} }

func TestDiffRangesTable(t *testing.T) {
	const E = assign.KeySpaceEnd
	for _, tc := range []struct {
		name                 string
		old, new             []assign.Slice
		assigned, unassigned []assign.Slice
	}{
		{"nothing", nil, nil, nil, nil},
		{"first", nil, []assign.Slice{sl(0, 10), sl(20, E)}, []assign.Slice{sl(0, 10), sl(20, E)}, nil},
		{"all gone", []assign.Slice{sl(5, 6)}, nil, nil, []assign.Slice{sl(5, 6)}},
		{"same", []assign.Slice{sl(0, 10)}, []assign.Slice{sl(0, 10)}, nil, nil},
		{"grow both ends", []assign.Slice{sl(10, 20)}, []assign.Slice{sl(5, 25)}, []assign.Slice{sl(5, 10), sl(20, 25)}, nil},
		{"shrink middle", []assign.Slice{sl(0, 30)}, []assign.Slice{sl(0, 10), sl(20, 30)}, nil, []assign.Slice{sl(10, 20)}},
		{"shift", []assign.Slice{sl(0, 10)}, []assign.Slice{sl(5, 15)}, []assign.Slice{sl(10, 15)}, []assign.Slice{sl(0, 5)}},
		{"one new spans many old", []assign.Slice{sl(0, 2), sl(4, 6), sl(8, 10)}, []assign.Slice{sl(1, 9)},
			[]assign.Slice{sl(2, 4), sl(6, 8)}, []assign.Slice{sl(0, 1), sl(9, 10)}},
		{"disjoint", []assign.Slice{sl(0, 5)}, []assign.Slice{sl(10, E)}, []assign.Slice{sl(10, E)}, []assign.Slice{sl(0, 5)}},
	} {
		a, u := diffRanges(tc.old, tc.new)
		if !rangesEqual(a, tc.assigned) || !rangesEqual(u, tc.unassigned) {
			t.Errorf("%s: diff = %v, %v; want %v, %v", tc.name, a, u, tc.assigned, tc.unassigned)
		}
	}
}

func rangesEqual(x, y []assign.Slice) bool {
	return slices.EqualFunc(x, y, func(a, b assign.Slice) bool {
		return a.Start == b.Start && a.End == b.End && a.Tasks == nil && b.Tasks == nil
	})
}

// gridAssignment cuts the key space at multiples of a unit into cells,
// gives each run of cells a random set of tasks, and returns it with the
// cell→tasks map for brute-force checks.
func gridAssignment(rng *rand.Rand, gen uint64, cells int, names []string) *assign.Assignment {
	unit := assign.KeySpaceEnd / assign.SliceKey(cells)
	a := &assign.Assignment{Job: "j", Generation: gen}
	for _, n := range names {
		a.Tasks = append(a.Tasks, assign.Task{Name: n, Addr: n + ":1"})
	}
	for c := 0; c < cells; {
		w := 1 + rng.IntN(3)
		end := min(c+w, cells)
		var ts []string
		for _, n := range names {
			if rng.IntN(2) == 0 {
				ts = append(ts, n)
			}
		}
		if len(ts) == 0 {
			ts = []string{names[rng.IntN(len(names))]}
		}
		s := assign.Slice{Start: assign.SliceKey(c) * unit, End: assign.SliceKey(end) * unit, Tasks: ts}
		if end == cells {
			s.End = assign.KeySpaceEnd
		}
		a.Slices = append(a.Slices, s)
		c = end
	}
	return a
}

func owns(a *assign.Assignment, task string, k assign.SliceKey) bool {
	return slices.Contains(a.Slices[a.Find(k)].Tasks, task)
}

func inRanges(rs []assign.Slice, k assign.SliceKey) bool {
	for _, r := range rs {
		if r.Start <= k && k < r.End {
			return true
		}
	}
	return false
}

// checkNormal verifies rs is sorted, non-empty ranges, none touching.
func checkNormal(t *testing.T, what string, rs []assign.Slice) {
	t.Helper()
	for i, r := range rs {
		if r.Start >= r.End || r.Tasks != nil {
			t.Fatalf("%s: range %d is %v", what, i, r)
		}
		if i > 0 && rs[i-1].End >= r.Start {
			t.Fatalf("%s: ranges %v and %v overlap or touch", what, rs[i-1], r)
		}
	}
}

func TestDiffRangesAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 13))
	names := []string{"a", "b", "c"}
	const cells = 40
	unit := assign.KeySpaceEnd / cells
	for iter := range 500 {
		oldA := gridAssignment(rng, 1, cells, names)
		newA := gridAssignment(rng, 2, cells, names)
		for _, a := range []*assign.Assignment{oldA, newA} {
			if err := a.Validate(); err != nil {
				t.Fatal(err)
			}
		}
		task := names[iter%len(names)]
		oldR, newR := ownedRanges(oldA, task), ownedRanges(newA, task)
		checkNormal(t, "owned", oldR)
		assigned, unassigned := diffRanges(oldR, newR)
		checkNormal(t, "assigned", assigned)
		checkNormal(t, "unassigned", unassigned)
		// Every cell boundary and a point inside every cell.
		for c := range cells {
			for _, k := range []assign.SliceKey{assign.SliceKey(c) * unit, assign.SliceKey(c)*unit + unit/2} {
				o, n := owns(oldA, task, k), owns(newA, task, k)
				if inRanges(oldR, k) != o || inRanges(newR, k) != n {
					t.Fatalf("owned ranges wrong at %#x", k)
				}
				if inRanges(assigned, k) != (n && !o) || inRanges(unassigned, k) != (o && !n) {
					t.Fatalf("iteration %d, task %s, key %#x: old %v new %v, but assigned %v unassigned %v",
						iter, task, k, o, n, assigned, unassigned)
				}
			}
		}
	}
}

func FuzzDiffRanges(f *testing.F) {
	f.Add([]byte{0, 10, 20, 30}, []byte{5, 25})
	f.Add([]byte{}, []byte{1, 2, 3, 4})
	f.Add([]byte{0, 255}, []byte{0, 255})
	f.Fuzz(func(t *testing.T, x, y []byte) {
		toRanges := func(b []byte) []assign.Slice {
			var bounds []assign.SliceKey
			for _, v := range b {
				bounds = append(bounds, assign.SliceKey(v))
			}
			slices.Sort(bounds)
			bounds = slices.Compact(bounds)
			var rs []assign.Slice
			for i := 0; i+1 < len(bounds); i += 2 {
				rs = append(rs, sl(bounds[i], bounds[i+1]))
			}
			// Merge touching ranges, as ownedRanges would.
			var out []assign.Slice
			for _, r := range rs {
				if n := len(out); n > 0 && out[n-1].End == r.Start {
					out[n-1].End = r.End
					continue
				}
				out = append(out, r)
			}
			return out
		}
		old, new := toRanges(x), toRanges(y)
		assigned, unassigned := diffRanges(old, new)
		checkNormal(t, "assigned", assigned)
		checkNormal(t, "unassigned", unassigned)
		for k := assign.SliceKey(0); k < 257; k++ {
			o, n := inRanges(old, k), inRanges(new, k)
			if inRanges(assigned, k) != (n && !o) || inRanges(unassigned, k) != (o && !n) {
				t.Fatalf("key %d: old %v new %v: assigned %v unassigned %v", k, old, new, assigned, unassigned)
			}
		}
	})
}
