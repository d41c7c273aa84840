package clerk

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/slicerd/slicerd/assign"
)

// makeAssignment builds a valid assignment of job with nTasks tasks and
// nSlices slices of random widths, each on 1–redundancy random tasks.
func makeAssignment(rng *rand.Rand, job string, gen uint64, nTasks, nSlices, redundancy int) *assign.Assignment {
	a := &assign.Assignment{Job: job, Generation: gen}
	for i := range nTasks {
		a.Tasks = append(a.Tasks, assign.Task{Name: fmt.Sprintf("task-%04d", i), Addr: "10.0.0." + strconv.Itoa(i%250) + ":" + strconv.Itoa(7000+i)})
	}
	bounds := map[assign.SliceKey]bool{}
	for len(bounds) < nSlices-1 {
		bounds[1+rng.Uint64N(assign.KeySpaceEnd-1)] = true
	}
	cuts := []assign.SliceKey{0}
	for b := range bounds {
		cuts = append(cuts, b)
	}
	slices.Sort(cuts)
	cuts = append(cuts, assign.KeySpaceEnd)
	for i := 0; i+1 < len(cuts); i++ {
		n := 1 + rng.IntN(redundancy)
		var names []string
		for _, k := range rng.Perm(nTasks)[:min(n, nTasks)] {
			names = append(names, a.Tasks[k].Name)
		}
		slices.Sort(names)
		a.Slices = append(a.Slices, assign.Slice{Start: cuts[i], End: cuts[i+1], Tasks: names})
	}
	return a
}

func TestTableMatchesFind(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 17, 1000, indexFrom - 1, indexFrom, 5000, 70000, -indexFrom, -70000} {
		var a *assign.Assignment
		if n > 0 {
			a = makeAssignment(rng, "job", 1, 7, n, 3)
		} else {
			// Every cut below 2^40: all slices but one in the first
			// bucket of the index.
			n = -n
			a = makeAssignment(rng, "job", 1, 7, n, 3)
			for i := range a.Slices[:n-1] {
				a.Slices[i].End = assign.SliceKey(i+1) << 20
				a.Slices[i+1].Start = a.Slices[i].End
			}
		}
		if err := a.Validate(); err != nil {
			t.Fatal(err)
		}
		tb := NewTable(a)
		keys := []assign.SliceKey{0, assign.KeySpaceEnd - 1}
		for _, s := range a.Slices {
			keys = append(keys, s.Start, s.End-1)
		}
		if tb.idx != nil {
			// Every bucket's first and last slice keys.
			for b := range assign.SliceKey(len(tb.idx) - 1) {
				keys = append(keys, b<<tb.shift, (b+1)<<tb.shift-1)
			}
		} else if n >= indexFrom {
			t.Fatalf("%d slices: no index", n)
		}
		for range 5000 {
			keys = append(keys, assign.HashString(strconv.FormatUint(rng.Uint64(), 36)))
		}
		for _, h := range keys {
			want := a.Find(h)
			got := tb.Lookup(h)
			if got != want {
				t.Fatalf("%d slices: Lookup(%#x) = %d, want %d", n, h, got, want)
			}
			if !slices.Equal(tb.Names(got), a.Slices[want].Tasks) {
				t.Fatalf("Names(%d) = %v, want %v", got, tb.Names(got), a.Slices[want].Tasks)
			}
			for j, name := range a.Slices[want].Tasks {
				k, _ := a.TaskIndex(name)
				if tb.Addrs(got)[j] != a.Tasks[k].Addr {
					t.Fatalf("Addrs(%d)[%d] = %q, want %q", got, j, tb.Addrs(got)[j], a.Tasks[k].Addr)
				}
			}
		}
	}
}

func TestTableAddrsAppendIsolated(t *testing.T) {
	a := makeAssignment(rand.New(rand.NewPCG(3, 4)), "job", 1, 4, 8, 2)
	tb := NewTable(a)
	before := slices.Clone(tb.Addrs(1))
	_ = append(tb.Addrs(0), "intruder")
	if !slices.Equal(tb.Addrs(1), before) {
		t.Fatalf("append to slice 0's addresses changed slice 1's: %v, was %v", tb.Addrs(1), before)
	}
}

// BenchmarkTableLookup is Lookup on random slice keys, for tables from
// ones that fit in the cache to a million slices (8 MB of slice ends).
func BenchmarkTableLookup(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{100, 10_000, 1_000_000} {
		tb := NewTable(makeAssignment(rng, "job", 1, 100, n, 1))
		keys := make([]assign.SliceKey, 1<<16)
		for i := range keys {
			keys[i] = rng.Uint64N(assign.KeySpaceEnd)
		}
		b.Run(fmt.Sprintf("slices=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = tb.Lookup(keys[i&(1<<16-1)])
				i++
			}
		})
	}
}
