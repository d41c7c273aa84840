package assign

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestLoadIn(t *testing.T) {
	l := Load{
		{Start: 0, End: 100, Load: 10},
		{Start: 200, End: 300, Load: 50},
		{Start: 300, End: 301, Load: 7}, // one hot key
		{Start: KeySpaceEnd - 10, End: KeySpaceEnd, Load: 1},
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		start, end SliceKey
		want       float64
	}{
		{0, KeySpaceEnd, 68},
		{0, 100, 10},
		{0, 50, 5},       // half of the first entry
		{90, 210, 1 + 5}, // tails of two entries
		{100, 200, 0},    // a gap
		{250, 301, 25 + 7},
		{300, 301, 7},
		{301, 400, 0},
		{150, 160, 0},
		{KeySpaceEnd - 5, KeySpaceEnd, 0.5},
		{10, 11, 0.1},
	} {
		if got := l.In(tc.start, tc.end); !near(got, tc.want) {
			t.Errorf("In(%d, %d) = %g, want %g", tc.start, tc.end, got, tc.want)
		}
	}
	if got := l.Total(); got != 68 {
		t.Errorf("Total = %g, want 68", got)
	}
	if got := (Load(nil)).In(0, KeySpaceEnd); got != 0 {
		t.Errorf("empty load In = %g", got)
	}
}

// An entry's load within a range: in proportion to the overlap, all of it
// exactly when the range covers the entry (0.1·3/3 would round to
// 0.10000000000000002), and none for a range that only touches it.
func TestLoadEntryWithin(t *testing.T) {
	e := LoadEntry{Start: 100, End: 103, Load: 0.1}
	for _, tc := range []struct {
		start, end SliceKey
		want       float64
	}{
		{100, 103, 0.1},
		{0, KeySpaceEnd, 0.1},
		{101, 102, 0.1 * 1 / 3},
		{90, 102, 0.1 * 2 / 3},
		{102, 200, 0.1 * 1 / 3},
		{0, 100, 0},   // ends where the entry starts
		{103, 200, 0}, // starts where it ends
		{150, 160, 0},
		{101, 101, 0}, // an empty range
	} {
		if got := e.within(tc.start, tc.end); got != tc.want {
			t.Errorf("within(%d, %d) = %v, want %v", tc.start, tc.end, got, tc.want)
		}
	}
	key := LoadEntry{Start: 7, End: 8, Load: 3.3} // one hot key
	if got := key.within(0, 8); got != 3.3 {
		t.Errorf("a hot key's load within a range holding it = %v, want 3.3", got)
	}
}

// Load.In, the consistent-hash cursor and weighted-move's measure sum the
// same range to the same bits.
func TestLoadSumsAgree(t *testing.T) {
	l := Load{
		{Start: 0, End: 3, Load: 0.1},
		{Start: 3, End: 10, Load: 0.7},
		{Start: 10, End: 11, Load: 3.3},
		{Start: 20, End: KeySpaceEnd, Load: 1.1},
	}
	bounds := []SliceKey{0, 1, 3, 9, 10, 11, 15, 25, KeySpaceEnd / 2, KeySpaceEnd}
	sl := make([]wslice, 0, len(bounds)-1)
	for i := 1; i < len(bounds); i++ {
		sl = append(sl, wslice{start: bounds[i-1], end: bounds[i]})
	}
	measured := measure(make([]float64, len(sl)), sl, l)
	cur := loadCursor{l: l}
	for i, s := range sl {
		in := l.In(s.start, s.end)
		if c := cur.in(s.start, s.end); c != in || measured[i] != in {
			t.Errorf("[%d, %d): In %v, cursor %v, measure %v; want all equal", s.start, s.end, in, c, measured[i])
		}
	}
	if got := l.In(0, 3); got != 0.1 {
		t.Errorf("In over exactly one entry = %v, want its load 0.1", got)
	}
}

// Every fault is rejected, with what is wrong with which entry: the
// first at fault.
func TestLoadValidateRejects(t *testing.T) {
	good := LoadEntry{Start: 0, End: 1, Load: 1}
	for _, tc := range []struct {
		name, want string
		l          Load
	}{
		{"nan", "entry 1 [0x1, 0x2): assign: invalid load: load is NaN", Load{good, {Start: 1, End: 2, Load: math.NaN()}}},
		{"inf", "load is infinite", Load{{Start: 0, End: 1, Load: math.Inf(1)}}},
		{"neg inf", "load is infinite", Load{{Start: 0, End: 1, Load: math.Inf(-1)}}},
		{"negative", "load -1 is negative", Load{{Start: 0, End: 1, Load: -1}}},
		{"huge", "above the limit", Load{{Start: 0, End: 1, Load: MaxLoad * 2}}},
		{"bytes nan", "bytes is NaN", Load{{Start: 0, End: 1, Bytes: math.NaN()}}},
		{"bytes inf", "bytes is infinite", Load{{Start: 0, End: 1, Bytes: math.Inf(1)}}},
		{"bytes negative", "bytes -2 is negative", Load{{Start: 0, End: 1, Bytes: -2}}},
		{"bytes huge", "bytes 2.251799813685248e+15 is above", Load{{Start: 0, End: 1, Bytes: MaxBytes * 2}}},
		{"empty", "entry 0 [0x5, 0x5) is empty or inverted", Load{{Start: 5, End: 5, Load: 1}}},
		{"inverted", "is empty or inverted", Load{{Start: 6, End: 5, Load: 1}}},
		{"past end", "past the key space end", Load{{Start: 0, End: KeySpaceEnd + 1, Load: 1}}},
		{"unsorted", "entry 1 starts at 0x0, inside or before the previous entry ending at 0x14", Load{{Start: 10, End: 20, Load: 1}, {Start: 0, End: 5, Load: 1}}},
		{"overlap", "entry 1 starts at 0xa", Load{{Start: 0, End: 20, Load: 1}, {Start: 10, End: 30, Load: 1}}},
		{"the first fault", "entry 1 [0x1, 0x2): assign: invalid load: load -1 is negative", Load{good, {Start: 1, End: 2, Load: -1}, {Start: 2, End: 2}}},
	} {
		err := tc.l.Validate()
		if !errors.Is(err, ErrInvalidLoad) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want ErrInvalidLoad saying %q", tc.name, err, tc.want)
		}
	}
	ok := Load{{Start: 0, End: 10, Load: 0}, {Start: 10, End: 20, Load: MaxLoad}, {Start: 30, End: KeySpaceEnd, Load: 1}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid load rejected: %v", err)
	}
}

func TestImbalance(t *testing.T) {
	a := &Assignment{Job: "j", Generation: 1,
		Tasks: []Task{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		Slices: []Slice{
			{Start: 0, End: 100, Tasks: []string{"a"}},
			{Start: 100, End: 200, Tasks: []string{"b", "c"}},
			{Start: 200, End: KeySpaceEnd, Tasks: []string{"c"}},
		}}
	if got := Imbalance(a, nil); got != 1 {
		t.Errorf("no load: Imbalance = %g, want 1", got)
	}
	// a carries 60, b 10, c 10 + 20: mean 100/3.
	l := Load{{Start: 0, End: 100, Load: 60}, {Start: 100, End: 200, Load: 20}, {Start: 200, End: 300, Load: 20}}
	loads := TaskLoads(a, l)
	for i, want := range []float64{60, 10, 30} {
		if !near(loads[i], want) {
			t.Errorf("TaskLoads[%d] = %g, want %g", i, loads[i], want)
		}
	}
	if got := Imbalance(a, l); !near(got, 60/(100.0/3)) {
		t.Errorf("Imbalance = %g, want %g", got, 60/(100.0/3))
	}
	even := Load{{Start: 0, End: 100, Load: 20}, {Start: 100, End: 200, Load: 40}}
	if got := Imbalance(a, even); !near(got, 1) {
		t.Errorf("even: Imbalance = %g, want 1", got)
	}
}

// TaskLoads and TaskBytes, which sweep the slices and the load together
// and look each task list up once, give exactly what adding each slice's
// In (or BytesIn) to its tasks, found by TaskIndex, gives: on jobs of few
// and of many tasks (a name table either way), one to three tasks a
// slice, lists shared by consecutive slices or not, slices finer and
// coarser than the load's entries, and a slice naming a task the
// assignment does not list (counted for nobody).
func TestTaskLoadsMatchPerSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 60 {
		tasks := testTasks([]int{3, 16, 17, 200}[round%4])
		a := scattered(rng, tasks, 1+rng.IntN(20), 1+rng.IntN(3))
		for i := 1; i < len(a.Slices); i++ {
			if rng.IntN(3) == 0 {
				a.Slices[i].Tasks = a.Slices[i-1].Tasks // a shared list
			}
		}
		if round%5 == 4 {
			a.Slices[rng.IntN(len(a.Slices))].Tasks = []string{"t99999"}
		}
		load := withBytes(rng, powerLoad(rng, 1+rng.IntN(3*len(a.Slices)), 1.5), 1e3)
		wantLoads, wantBytes := make([]float64, len(a.Tasks)), make([]float64, len(a.Tasks))
		for _, s := range a.Slices {
			share, bytes := load.In(s.Start, s.End)/float64(len(s.Tasks)), load.BytesIn(s.Start, s.End)
			for _, name := range s.Tasks {
				if i, ok := a.TaskIndex(name); ok {
					wantLoads[i] += share
					wantBytes[i] += bytes
				}
			}
		}
		if got := TaskLoads(a, load); !slices.Equal(got, wantLoads) {
			t.Fatalf("round %d (%d tasks, %d slices, %d entries): TaskLoads %v, want %v", round, len(a.Tasks), len(a.Slices), len(load), got, wantLoads)
		}
		if got := TaskBytes(a, load); !slices.Equal(got, wantBytes) {
			t.Fatalf("round %d: TaskBytes %v, want %v", round, got, wantBytes)
		}
	}
}

// MergeLoads of many entries (dealt into buckets by Start before they are
// sorted) gives what sorting them all at once gives: the same pieces, and
// sums equal but for the order in which entries of one start add up. The
// reports overlap (replicas), share starts, cross bucket bounds, cluster
// in a few buckets and reach the end of the key space.
func TestMergeLoadsManyAsSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for round := range 12 {
		var parts []Load
		n := 0
		for n < 5000+rng.IntN(20000) {
			// A report: sorted entries, disjoint, some cut from one place.
			var l Load
			k := SliceKey(rng.Uint64N(KeySpaceEnd))
			if round%3 == 1 {
				k = SliceKey(rng.Uint64N(1 << 50)) // a few buckets only
			}
			for range 1 + rng.IntN(60) {
				w := SliceKey(1 + rng.Uint64N([]uint64{10, 1 << 20, 1 << 45}[rng.IntN(3)]))
				if k >= KeySpaceEnd-w {
					break
				}
				l = append(l, LoadEntry{Start: k, End: k + w, Load: rng.Float64() * 100, Bytes: float64(rng.IntN(3)) * 10})
				k += w + SliceKey(rng.Uint64N(2)*rng.Uint64N(1<<20))
			}
			parts = append(parts, l)
			if rng.IntN(4) == 0 {
				parts = append(parts, slices.Clone(l)) // a replica's report
			}
			n += len(l)
		}
		parts = append(parts, Load{{Start: KeySpaceEnd - 5, End: KeySpaceEnd, Load: 1}})
		all := slices.Concat(parts...)
		slices.SortFunc(all, func(x, y LoadEntry) int { return cmp.Compare(x.Start, y.Start) })
		want := mergeSorted(all)
		got := MergeLoads(parts...)
		if len(got) != len(want) {
			t.Fatalf("round %d (%d entries): %d pieces, want %d", round, len(all), len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Start != w.Start || g.End != w.End || g.Bytes != w.Bytes || math.Abs(g.Load-w.Load) > 1e-9*max(1, w.Load) {
				t.Fatalf("round %d, piece %d: %+v, want %+v", round, i, g, w)
			}
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("round %d: the merge does not validate: %v", round, err)
		}
	}
}

// FuzzLoadValidate decodes entries of 24 bytes (start, end, load bits) and
// checks that whatever Validate accepts behaves: In never exceeds Total,
// is additive, and is never negative or NaN.
func FuzzLoadValidate(f *testing.F) {
	entry := func(start, end uint64, load float64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, start)
		b = binary.LittleEndian.AppendUint64(b, end)
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(load))
	}
	f.Add(entry(0, KeySpaceEnd, 1))
	f.Add(append(entry(0, 10, 3), entry(10, 11, 1e9)...))
	f.Add(append(entry(10, 20, 1), entry(0, 5, 1)...))
	f.Add(entry(0, 1, math.NaN()))
	f.Add(entry(5, 5, 1))
	f.Add(append(entry(0, 100, 5), entry(50, 200, 5)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l Load
		for ; len(b) >= 24; b = b[24:] {
			l = append(l, LoadEntry{
				Start: binary.LittleEndian.Uint64(b),
				End:   binary.LittleEndian.Uint64(b[8:]),
				Load:  math.Float64frombits(binary.LittleEndian.Uint64(b[16:])),
			})
		}
		if err := l.Validate(); err != nil {
			if !errors.Is(err, ErrInvalidLoad) {
				t.Fatalf("Validate error %v is not ErrInvalidLoad", err)
			}
			return
		}
		total := l.Total()
		all := l.In(0, KeySpaceEnd)
		if math.IsNaN(all) || all < 0 || !near(all, total) {
			t.Fatalf("In(whole key space) = %g, Total = %g", all, total)
		}
		mid := KeySpaceEnd / 3
		if lo, hi := l.In(0, mid), l.In(mid, KeySpaceEnd); lo < 0 || hi < 0 || !near(lo+hi, total) {
			t.Fatalf("In halves %g + %g != Total %g", lo, hi, total)
		}
	})
}

func TestLoadBuckets(t *testing.T) {
	quarter := KeySpaceEnd / 4
	l := Load{
		{Start: 0, End: 100, Load: 10},                      // bucket 0
		{Start: quarter - 50, End: quarter + 50, Load: 8},   // half in bucket 0, half in 1
		{Start: 3 * quarter, End: 3*quarter + 1, Load: 5},   // a hot key, first of bucket 3
		{Start: KeySpaceEnd - 1, End: KeySpaceEnd, Load: 1}, // the last key
		{Start: quarter, End: 3 * quarter, Load: 20},        // buckets 1 and 2, evenly
	}
	// The entries overlap, so each is binned alone and the results added.
	want := []float64{14, 4 + 10, 10, 6}
	var got [4]float64
	for _, e := range l {
		for i, v := range (Load{e}).Buckets(4) {
			got[i] += v
		}
	}
	for i := range want {
		if !near(got[i], want[i]) {
			t.Fatalf("buckets = %v, want %v", got, want)
		}
	}
	one := Load{{Start: 0, End: KeySpaceEnd, Load: 3}}.Buckets(1)
	if len(one) != 1 || one[0] != 3 {
		t.Fatalf("one bucket = %v, want [3]", one)
	}
	// Uneven bucket widths (2^63 is not a multiple of 3) still add up.
	var sum float64
	for _, v := range (Load{{Start: 0, End: KeySpaceEnd, Load: 9}}).Buckets(3) {
		sum += v
	}
	if !near(sum, 9) {
		t.Fatalf("three buckets add up to %g, want 9", sum)
	}
}

// AddBuckets of several weighed loads adds up to Buckets of their merge:
// entries within one bucket, across many, on bucket edges, at the ends of
// the key space, and more buckets than entries.
func TestAddBucketsAsBucketsOfTheMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	for round := range 300 {
		n := []int{1, 2, 3, 7, 64, 1000}[round%6]
		var weighed []Load
		out := make([]float64, n)
		for range 1 + rng.IntN(4) {
			var l Load
			k := SliceKey(0)
			for k < KeySpaceEnd {
				var w SliceKey
				switch rng.IntN(4) {
				case 0: // a key or a few
					w = 1 + SliceKey(rng.IntN(3))
				case 1: // up to a bucket edge or just past it
					w = max(bucketEnd(rng.IntN(n), n)-k, 1) + SliceKey(rng.IntN(2))
				default:
					w = 1 + SliceKey(rng.Uint64N(uint64(KeySpaceEnd/SliceKey(1+rng.IntN(20)))))
				}
				w = min(w, KeySpaceEnd-k)
				if rng.IntN(3) > 0 {
					l = append(l, LoadEntry{Start: k, End: k + w, Load: rng.Float64() * 100})
				}
				k += w
			}
			weight := []float64{1, 0.5, rng.Float64()}[rng.IntN(3)]
			l.AddBuckets(out, weight)
			scaled := slices.Clone(l)
			for i := range scaled {
				scaled[i].Load *= weight
			}
			weighed = append(weighed, scaled)
		}
		want := MergeLoads(weighed...).Buckets(n)
		for i := range want {
			if math.Abs(out[i]-want[i]) > 1e-9*math.Max(1, math.Abs(want[i])) {
				t.Fatalf("round %d, %d buckets: bucket %d is %g, Buckets of the merge %g", round, n, i, out[i], want[i])
			}
		}
	}
}

// Owned keeps the parts of a task's report on keys one of the given
// assignments gives it, load and bytes cut in proportion to the keys.
func TestLoadOwned(t *testing.T) {
	prev := &Assignment{Slices: []Slice{{0, 100, []string{"a"}}, {100, 200, []string{"b"}}, {200, KeySpaceEnd, []string{"a", "b"}}}}
	cur := &Assignment{Slices: []Slice{{0, 50, []string{"a"}}, {50, 150, []string{"b"}}, {150, KeySpaceEnd, []string{"b"}}}}
	report := Load{{Start: 10, End: 20, Load: 5}, {Start: 40, End: 60, Load: 20, Bytes: 200}, {Start: 120, End: 130, Load: 7}, {Start: 190, End: 210, Load: 10}}
	for _, tc := range []struct {
		name string
		as   []*Assignment
		want Load
	}{
		{"current only", []*Assignment{cur}, Load{{10, 20, 5, 0}, {40, 50, 10, 100}}},
		{"current and previous", []*Assignment{cur, prev}, Load{{10, 20, 5, 0}, {40, 60, 20, 200}, {200, 210, 5, 0}}},
		{"none", []*Assignment{nil}, nil},
	} {
		if got := report.Owned("a", tc.as...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Owned(a) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := report.Owned("b", cur); !slices.Equal(got, Load{{50, 60, 10, 100}, {120, 130, 7, 0}, {190, 210, 10, 0}}) {
		t.Errorf("Owned(b) = %v", got)
	}
}

// after finds the first entry ending after a key from any starting point
// no later than it, as a linear search would.
func TestLoadAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 2, 5, 17, 1000} {
		l := make(Load, n)
		var k SliceKey
		for i := range l {
			k += 1 + SliceKey(rng.IntN(4))
			l[i] = LoadEntry{Start: k, End: k + 1 + SliceKey(rng.IntN(3))}
			k = l[i].End
		}
		linear := func(key SliceKey) int {
			for i, e := range l {
				if e.End > key {
					return i
				}
			}
			return n
		}
		for key := SliceKey(0); key <= k+1; key++ {
			want := linear(key)
			for from := 0; from <= want; from++ {
				if got := l.after(key, from); got != want {
					t.Fatalf("%d entries: after(%d, %d) = %d, want %d", n, key, from, got, want)
				}
			}
		}
	}
}

// mergeSorted, cluster by cluster, gives exactly (bit for bit) what one
// pass over all the entries' starts and ends gives: reports alone, side
// by side, overlapping in part or whole (replicas), nested, sharing
// starts and ends, with gaps, zero loads, bytes and loads past MaxLoad.
func TestMergeSortedByClusters(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	for round := range 300 {
		var parts []Load
		for range 1 + rng.IntN(8) {
			var l Load
			k := SliceKey(rng.Uint64N(1000))
			for range rng.IntN(30) {
				w := SliceKey(1 + rng.Uint64N(50))
				e := LoadEntry{Start: k, End: k + w, Load: float64(rng.IntN(4)) * rng.Float64() * 100}
				switch rng.IntN(10) {
				case 0:
					e.Load = MaxLoad * 0.75
				case 1:
					e.Bytes = float64(rng.IntN(1000))
				}
				l = append(l, e)
				k += w + SliceKey(rng.Uint64N(3)*rng.Uint64N(40))
			}
			parts = append(parts, l)
			if rng.IntN(3) == 0 {
				parts = append(parts, slices.Clone(l))
			}
		}
		all := slices.Concat(parts...)
		slices.SortStableFunc(all, func(x, y LoadEntry) int { return cmp.Compare(x.Start, y.Start) })
		// One pass over every start and end of all the entries.
		want, _, _ := mergePieces(nil, all, nil, nil)
		got := mergeSorted(all)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d (%d entries): %d pieces %v, want %d %v", round, len(all), len(got), got, len(want), want)
		}
	}
}

// byStart orders into a buffer it is given whatever the buffer held: a
// buffer of garbage (a merge's pooled array from another job) gives the
// order a new array gives, for entries sorted whole and dealt into
// buckets.
func TestByStartIntoDirtyBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	for _, n := range []int{10, byStartBuckets - 1, byStartBuckets, 30000} {
		var parts []Load
		for total := 0; total < n; {
			k := min(n-total, 1+rng.IntN(50))
			l := make(Load, k)
			start := SliceKey(rng.Uint64N(KeySpaceEnd / 2))
			for i := range l {
				l[i] = LoadEntry{Start: start, End: start + 1 + SliceKey(rng.Uint64N(1<<30)), Load: rng.Float64()}
				start = l[i].End + SliceKey(rng.Uint64N(1<<30))
			}
			parts = append(parts, l)
			total += k
		}
		want := byStart(make(Load, 0, n), parts, n)
		dirty := make(Load, 2*n)
		for i := range dirty {
			dirty[i] = LoadEntry{Start: rng.Uint64(), End: rng.Uint64(), Load: math.NaN(), Bytes: -1}
		}
		if got := byStart(dirty, parts, n); !slices.Equal(got, want) || &got[0] != &dirty[0] {
			t.Fatalf("%d entries: ordered into a dirty buffer, %d entries (its own array: %v), not those a new array gets", n, len(got), &got[0] == &dirty[0])
		}
	}
}

// Merges running at once each take their own buffer from the pool (go
// test -race watches them).
func TestConcurrentMergesOwnTheirBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 15))
	loads := make([][]Load, 4)
	wants := make([]Load, len(loads))
	for j := range loads {
		for range 20 + 10*j {
			loads[j] = append(loads[j], powerLoad(rng, 200, 1.5))
		}
		wants[j] = MergeLoads(loads[j]...)
	}
	errs := make(chan string, len(loads))
	var wg sync.WaitGroup
	for j := range loads {
		wg.Go(func() {
			for range 5 {
				if got := MergeLoads(loads[j]...); !slices.Equal(got, wants[j]) {
					errs <- fmt.Sprintf("merge %d: %d pieces beside other merges, %d alone", j, len(got), len(wants[j]))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
