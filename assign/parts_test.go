package assign

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// A large assignment is validated, converted, measured, built and
// compared in parts at once (see inParts); the decision must not depend
// on how many parts there were.
func TestDecisionsDoNotDependOnProcessors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tasks := testTasks(1000)
	for _, r := range []int{1, 2} {
		prev := scattered(rng, tasks, 3*partMin/len(tasks), r)
		load := powerLoad(rng, len(prev.Slices)/2, 1.5)
		cfg := Config{MinRedundancy: r, MaxRedundancy: r + 1}
		live := tasks[3:] // three departures
		var want *Assignment
		var wantD Decision
		for _, procs := range []int{1, 2, 3} {
			old := runtime.GOMAXPROCS(procs)
			got, d, err := NewWeightedMove().Decide("j", prev, live, load, cfg)
			runtime.GOMAXPROCS(old)
			if err != nil {
				t.Fatal(err)
			}
			if k := parts(len(prev.Slices)); procs > 1 && k == 1 {
				t.Fatalf("%d slices are one part", len(prev.Slices))
			}
			if want == nil {
				want, wantD = got, d
				continue
			}
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(d, wantD) {
				t.Fatalf("redundancy %d: the decision on %d processors differs from the one on 1", r, procs)
			}
		}
		if err := want.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// The error for an invalid assignment is the first a single pass finds,
// wherever the parts fall.
func TestValidateInPartsReportsTheFirstFault(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	a := scattered(rng, testTasks(100), 3*partMin/100, 1)
	n := len(a.Slices)
	a.Slices[n-10].Tasks = []string{"nobody"}
	a.Slices[n/2+1].Start++
	a.Slices[2].Tasks = []string{a.Slices[2].Tasks[0], a.Slices[2].Tasks[0]}
	for _, want := range []string{
		"slice 2: tasks not sorted or duplicated",
		fmt.Sprintf("before slice %d", n/2+1),
		fmt.Sprintf("slice %d names unknown task", n-10),
	} {
		for _, procs := range []int{1, 2, 3} {
			old := runtime.GOMAXPROCS(procs)
			err := a.Validate()
			runtime.GOMAXPROCS(old)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%d processors: got %v, want an error with %q", procs, err, want)
			}
		}
		// Mend the first fault: the next is further on.
		switch {
		case len(a.Slices[2].Tasks) == 2:
			a.Slices[2].Tasks = a.Slices[2].Tasks[:1]
		default:
			a.Slices[n/2+1].Start--
		}
	}
}

// Splitting in key order in parts makes the pieces one pass makes, and
// the ceiling stops it as it stops one pass: when a single part would
// pass it, and when only the parts together would.
func TestSplitInOrderInParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	tasks := testTasks(1000)
	cfg := Config{MinRedundancy: 1, MaxRedundancy: 2}.WithDefaults()
	prev := scattered(rng, tasks, 3*partMin/len(tasks), 1)
	load := powerLoad(rng, 2*len(prev.Slices), 1.5)
	refs, err := prev.validate(true)
	if err != nil {
		t.Fatal(err)
	}
	w := newWeigher(newPlannerRoom(prev, refs, tasks, cfg, 0, new(scratch)), load)
	threshold := cfg.SplitLoadFactor * w.total / float64(len(w.sl))
	type result struct {
		done  []piece
		split []int8
		count int
		ok    bool
	}
	run := func(procs, ceiling int) result {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		if k := parts(len(w.sl)); procs > 1 && k == 1 {
			t.Fatalf("%d slices are one part", len(w.sl))
		}
		r := result{split: make([]int8, len(w.sl))}
		r.done, r.count, r.ok = w.splitInOrder(ceiling, threshold, r.split)
		return r
	}
	one := run(1, math.MaxInt)
	splits := one.count - len(w.sl)
	if !one.ok || splits < 100 {
		t.Fatalf("one pass: ok %v, %d splits; want a job with many", one.ok, splits)
	}
	for _, procs := range []int{2, 3} {
		if got := run(procs, math.MaxInt); !reflect.DeepEqual(got, one) {
			t.Fatalf("on %d processors: %d pieces, %d slices after; one pass: %d, %d", procs, len(got.done), got.count, len(one.done), one.count)
		}
		for _, ceiling := range []int{len(w.sl) + splits, len(w.sl) + splits - 1, len(w.sl) + splits/2, len(w.sl) + 1} {
			want := ceiling >= one.count
			if got := run(procs, ceiling); got.ok != want || got.ok && !reflect.DeepEqual(got, one) {
				t.Fatalf("on %d processors under a ceiling of %d: ok %v, want %v", procs, ceiling, got.ok, want)
			}
		}
	}
}

// Validating an assignment whose slices share lists (as decoded ones do)
// reads the same task indexes and finds the same first fault as when
// every slice has a list of its own: a list met again is not looked up,
// but its slice's range still is checked.
func TestValidateSharedLists(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	for _, r := range []int{1, 2} {
		shared := stored(scattered(rng, testTasks(300), 3*partMin/300, r))
		own := shared.Clone() // every list its own
		for i := range own.Slices {
			own.Slices[i].Tasks = slices.Clone(own.Slices[i].Tasks)
		}
		if sameList(shared.Slices[0].Tasks, own.Slices[0].Tasks) {
			t.Fatal("the clone shares a list")
		}
		n := len(shared.Slices)
		for _, fault := range []struct {
			name string
			do   func(a *Assignment)
		}{
			{"none", func(*Assignment) {}},
			{"gap", func(a *Assignment) { a.Slices[n/2+3].Start++ }},
			{"overlap", func(a *Assignment) { a.Slices[n-7].Start-- }},
			{"empty", func(a *Assignment) { a.Slices[n/3].End = a.Slices[n/3].Start }},
			{"past the end", func(a *Assignment) { a.Slices[n-1].End = a.Slices[n-1].Start; a.Slices[n-2].End = KeySpaceEnd + 1 }},
		} {
			for _, procs := range []int{1, 2, 3} {
				old := runtime.GOMAXPROCS(procs)
				var errs [2]error
				var refs [2][]int32
				for k, a := range []*Assignment{shared, own} {
					b := *a
					b.Slices = slices.Clone(a.Slices)
					fault.do(&b)
					rs, err := b.validate(true)
					errs[k], refs[k] = err, slices.Concat(rs...)
				}
				runtime.GOMAXPROCS(old)
				if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) || !slices.Equal(refs[0], refs[1]) {
					t.Fatalf("r=%d, %s, %d processors: shared lists give %v and %d indexes, own lists %v and %d", r, fault.name, procs, errs[0], len(refs[0]), errs[1], len(refs[1]))
				}
				if (fault.name == "none") != (errs[0] == nil) {
					t.Fatalf("r=%d, %s: %v", r, fault.name, errs[0])
				}
			}
		}
	}
}

// Two lists that begin at the same name of one array but differ in length
// are two lists to the memo.
func TestValidateListsSharingAFirstName(t *testing.T) {
	names := []string{"a", "b"}
	a := &Assignment{Job: "j", Generation: 1, Tasks: []Task{{Name: "a"}, {Name: "b"}}, Slices: []Slice{
		{Start: 0, End: 10, Tasks: names},
		{Start: 10, End: 20, Tasks: names[:1]},
		{Start: 20, End: KeySpaceEnd, Tasks: names},
	}}
	refs, err := a.validate(true)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Concat(refs...); !slices.Equal(got, []int32{0, 1, 0, 0, 1}) {
		t.Fatalf("task indexes %v, want [0 1 0 0 1]", got)
	}
}

// Phase 4's grouping of slices by task, in parts at once, is the one a
// single pass makes: every slice a task serves, in key order, with room
// for ownedSlack more.
func TestOwnedSlicesInParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	tasks := testTasks(700)
	for _, r := range []int{1, 3} {
		prev := scattered(rng, tasks, 3*partMin/len(tasks), r)
		refs, err := prev.validate(true)
		if err != nil {
			t.Fatal(err)
		}
		w := newWeigher(newPlannerRoom(prev, refs, tasks, DefaultConfig(), 0, new(scratch)), powerLoad(rng, len(prev.Slices), 1.5))
		want := make([][]ownedSlice, len(tasks))
		for i := range w.sl {
			s := &w.sl[i]
			for _, task := range w.p.tasks(s) {
				want[task] = append(want[task], ownedSlice{slice: int32(i), n: s.n, load: w.sload[i], width: s.end - s.start})
			}
		}
		for _, procs := range []int{1, 2, 3} {
			old := runtime.GOMAXPROCS(procs)
			got, _ := w.ownedSlices()
			runtime.GOMAXPROCS(old)
			for task := range want {
				if !slices.Equal(got[task], want[task]) || cap(got[task]) != len(want[task])+ownedSlack {
					t.Fatalf("r=%d, %d processors: task %d's slices differ from one pass's (%d of room %d, want %d)", r, procs, task, len(got[task]), cap(got[task]), len(want[task]))
				}
			}
		}
	}
}
