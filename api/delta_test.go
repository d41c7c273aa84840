package api

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// randomAssignment cuts the key space into n slices, each served by 1-3 of
// the given task names, and lists exactly the tasks the slices name.
func randomAssignment(r *rand.Rand, gen uint64, n int, names []string, addrs map[string]string) *assign.Assignment {
	cuts := map[assign.SliceKey]bool{}
	for len(cuts) < n-1 {
		cuts[assign.SliceKey(1+r.Uint64N(uint64(assign.KeySpaceEnd)-1))] = true
	}
	bounds := []assign.SliceKey{0}
	for c := range cuts {
		bounds = append(bounds, c)
	}
	slices.Sort(bounds)
	bounds = append(bounds, assign.KeySpaceEnd)
	a := &assign.Assignment{Job: "kv", Generation: gen, Incarnation: "inc-1"}
	used := map[string]bool{}
	for i := range n {
		a.Slices = append(a.Slices, assign.Slice{Start: bounds[i], End: bounds[i+1], Tasks: pick(r, names)})
		for _, t := range a.Slices[i].Tasks {
			used[t] = true
		}
	}
	for _, name := range names {
		if used[name] {
			a.Tasks = append(a.Tasks, assign.Task{Name: name, Addr: addrs[name]})
		}
	}
	return a
}

func pick(r *rand.Rand, names []string) []string {
	k := 1 + r.IntN(min(3, len(names)))
	p := r.Perm(len(names))[:k]
	out := make([]string, k)
	for i, j := range p {
		out[i] = names[j]
	}
	slices.Sort(out)
	return out
}

// evolve returns a later generation of a: some slices repainted with
// other tasks, split or merged, and task addresses changed, the way
// load-balancing and membership decisions change an assignment.
func evolve(r *rand.Rand, a *assign.Assignment, names []string, addrs map[string]string) *assign.Assignment {
	next := &assign.Assignment{Job: a.Job, Generation: a.Generation + 1 + r.Uint64N(3), Incarnation: a.Incarnation}
	for i := 0; i < len(a.Slices); i++ {
		s := a.Slices[i]
		switch x := r.IntN(10); {
		case x == 0 && s.End-s.Start > 1: // split
			mid := s.Start + 1 + assign.SliceKey(r.Uint64N(uint64(s.End-s.Start-1)))
			next.Slices = append(next.Slices, assign.Slice{Start: s.Start, End: mid, Tasks: s.Tasks}, assign.Slice{Start: mid, End: s.End, Tasks: pick(r, names)})
		case x == 1 && i+1 < len(a.Slices): // merge with the next one
			next.Slices = append(next.Slices, assign.Slice{Start: s.Start, End: a.Slices[i+1].End, Tasks: s.Tasks})
			i++
		case x == 2: // move
			next.Slices = append(next.Slices, assign.Slice{Start: s.Start, End: s.End, Tasks: pick(r, names)})
		default:
			next.Slices = append(next.Slices, s)
		}
	}
	used := map[string]bool{}
	for _, s := range next.Slices {
		for _, t := range s.Tasks {
			used[t] = true
		}
	}
	moved := names[r.IntN(len(names))]
	for _, name := range names {
		if used[name] {
			addr := addrs[name]
			if name == moved && r.IntN(4) == 0 {
				addr += "0"
			}
			next.Tasks = append(next.Tasks, assign.Task{Name: name, Addr: addr})
		}
	}
	return next
}

func taskNames(n int) ([]string, map[string]string) {
	names := make([]string, n)
	addrs := map[string]string{}
	for i := range n {
		names[i] = "kv-" + strconv.Itoa(i)
		addrs[names[i]] = "10.0.0." + strconv.Itoa(i) + ":7000"
	}
	slices.Sort(names)
	return names, addrs
}

// wire sends m through its protobuf encoding, as a subscriber receives it.
func wire[T any, M interface {
	*T
	proto.Message
}](t testing.TB, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := M(new(T))
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	return back
}

// Applying the delta between any two generations gives the later one
// exactly.
func TestDiffApplyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		names, addrs := taskNames(1 + r.IntN(8))
		base := randomAssignment(r, 1+r.Uint64N(100), 1+r.IntN(60), names, addrs)
		if err := base.Validate(); err != nil {
			t.Fatalf("trial %d: test made an invalid base: %v", trial, err)
		}
		next := evolve(r, base, names, addrs)
		if err := next.Validate(); err != nil {
			t.Fatalf("trial %d: test made an invalid next: %v", trial, err)
		}
		got, err := ApplyDelta(base, wire(t, Diff(base, next)))
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		if !reflect.DeepEqual(got, next) {
			t.Fatalf("trial %d: applied delta gave\n%+v\nwant\n%+v", trial, got, next)
		}
	}
}

// A delta carries only what changed: moving one slice of 10,000 costs one
// slice, not the assignment.
func TestDeltaIsSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	names, addrs := taskNames(10)
	base := randomAssignment(r, 7, 10000, names, addrs)
	next := &assign.Assignment{Job: base.Job, Generation: 8, Incarnation: base.Incarnation, Tasks: base.Tasks, Slices: slices.Clone(base.Slices)}
	next.Slices[5000].Tasks = []string{"kv-9"}
	if !slices.Equal(base.Slices[5000].Tasks, []string{"kv-9"}) {
		next.Slices[5000].Tasks = []string{"kv-8"}
	}
	d := Diff(base, next)
	if len(d.GetSlices()) != 1 || len(d.GetTasks()) != 0 || len(d.GetRemovedTasks()) != 0 {
		t.Fatalf("delta has %d slices, %d tasks, %d removed; want 1, 0, 0", len(d.GetSlices()), len(d.GetTasks()), len(d.GetRemovedTasks()))
	}
	full := proto.Size(&slicerv1.WatchAssignmentResponse{Assignment: ToProto(next)})
	delta := proto.Size(&slicerv1.WatchAssignmentResponse{Delta: d})
	if delta*100 > full {
		t.Errorf("delta is %d bytes, the full assignment %d: over 1%%", delta, full)
	}
}

// A delta for another base, a corrupted one and a malformed one are each
// refused with ErrDelta, and the held assignment is left as it was.
func TestApplyDeltaRejects(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	names, addrs := taskNames(4)
	base := randomAssignment(r, 10, 20, names, addrs)
	next := evolve(r, base, names, addrs)
	for next.Generation == base.Generation || reflect.DeepEqual(next.Slices, base.Slices) {
		next = evolve(r, base, names, addrs)
	}
	keep := proto.Clone(ToProto(base)).(*slicerv1.Assignment)
	good := Diff(base, next)
	for name, mutate := range map[string]func(d *slicerv1.AssignmentDelta){
		"older base (out of order)": func(d *slicerv1.AssignmentDelta) { d.BaseGeneration-- },
		"newer base (a gap)":        func(d *slicerv1.AssignmentDelta) { d.BaseGeneration++ },
		"other incarnation":         func(d *slicerv1.AssignmentDelta) { d.Incarnation = "inc-2" },
		"other job":                 func(d *slicerv1.AssignmentDelta) { d.Job = "other" },
		"not later":                 func(d *slicerv1.AssignmentDelta) { d.Generation = d.BaseGeneration },
		"checksum":                  func(d *slicerv1.AssignmentDelta) { d.Checksum ^= 1 },
		"unknown task":              func(d *slicerv1.AssignmentDelta) { d.Slices[0].Tasks = []string{"nobody"} },
		"a slice dropped":           func(d *slicerv1.AssignmentDelta) { d.Slices = d.Slices[1:] },
		"a slice moved":             func(d *slicerv1.AssignmentDelta) { d.Slices[0].End-- },
		"slices out of order":       func(d *slicerv1.AssignmentDelta) { d.Slices = append(d.Slices, d.Slices[0]) },
		"empty slice":               func(d *slicerv1.AssignmentDelta) { d.Slices[0].End = d.Slices[0].Start },
		"past the key space":        func(d *slicerv1.AssignmentDelta) { d.Slices[0].End = 1<<63 + 1 },
		"unknown removed task":      func(d *slicerv1.AssignmentDelta) { d.RemovedTasks = append(d.RemovedTasks, "nobody") },
		"task twice":                func(d *slicerv1.AssignmentDelta) { d.Tasks = append(d.Tasks, d.Tasks...) },
		"address changed": func(d *slicerv1.AssignmentDelta) {
			d.Tasks = append(d.Tasks, &slicerv1.Task{Name: names[0], Address: "elsewhere:1"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := proto.Clone(good).(*slicerv1.AssignmentDelta)
			if len(d.Slices) == 0 {
				t.Skip("the change moved no slice")
			}
			mutate(d)
			got, err := ApplyDelta(base, d)
			if !errors.Is(err, ErrDelta) {
				t.Fatalf("ApplyDelta = %v, %v; want ErrDelta", got, err)
			}
			if !proto.Equal(ToProto(base), keep) {
				t.Fatal("a refused delta changed the held assignment")
			}
		})
	}
}

// Receive takes a full assignment or a delta, and nothing else.
func TestReceive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	names, addrs := taskNames(3)
	base := randomAssignment(r, 1, 5, names, addrs)
	next := evolve(r, base, names, addrs)
	if got, err := Receive(nil, &slicerv1.WatchAssignmentResponse{Assignment: ToProto(base)}); err != nil || !reflect.DeepEqual(got, base) {
		t.Fatalf("full assignment: %v, %v", got, err)
	}
	if got, err := Receive(base, &slicerv1.WatchAssignmentResponse{Delta: Diff(base, next)}); err != nil || !reflect.DeepEqual(got, next) {
		t.Fatalf("delta: %v, %v", got, err)
	}
	if _, err := Receive(nil, &slicerv1.WatchAssignmentResponse{Delta: Diff(base, next)}); !errors.Is(err, ErrDelta) {
		t.Fatalf("delta without a held assignment: %v", err)
	}
	if _, err := Receive(base, &slicerv1.WatchAssignmentResponse{}); !errors.Is(err, assign.ErrInvalidAssignment) {
		t.Fatalf("empty message: %v", err)
	}
	if _, err := Receive(base, &slicerv1.WatchAssignmentResponse{Assignment: ToProto(next), Delta: Diff(base, next)}); !errors.Is(err, assign.ErrInvalidAssignment) {
		t.Fatalf("both: %v", err)
	}
}

// The checksum covers every field of the canonical form.
func TestChecksumCoversEveryField(t *testing.T) {
	a := &assign.Assignment{Job: "kv", Generation: 3, Incarnation: "i", Tasks: []assign.Task{{Name: "a", Addr: "x:1"}, {Name: "b", Addr: "y:1"}},
		Slices: []assign.Slice{{Start: 0, End: 100, Tasks: []string{"a"}}, {Start: 100, End: assign.KeySpaceEnd, Tasks: []string{"a", "b"}}}}
	sum := Checksum(a)
	for name, change := range map[string]func(a *assign.Assignment){
		"job":           func(a *assign.Assignment) { a.Job = "kw" },
		"incarnation":   func(a *assign.Assignment) { a.Incarnation = "j" },
		"generation":    func(a *assign.Assignment) { a.Generation = 4 },
		"task name":     func(a *assign.Assignment) { a.Tasks[0].Name = "c" },
		"address":       func(a *assign.Assignment) { a.Tasks[1].Addr = "y:2" },
		"boundary":      func(a *assign.Assignment) { a.Slices[0].End, a.Slices[1].Start = 101, 101 },
		"slice tasks":   func(a *assign.Assignment) { a.Slices[1].Tasks = []string{"b"} },
		"tasks shifted": func(a *assign.Assignment) { a.Slices[0].Tasks, a.Slices[1].Tasks = []string{"a", "b"}, []string{"a"} },
	} {
		b := &assign.Assignment{Job: a.Job, Generation: a.Generation, Incarnation: a.Incarnation, Tasks: slices.Clone(a.Tasks), Slices: slices.Clone(a.Slices)}
		change(b)
		if Checksum(b) == sum {
			t.Errorf("%s: checksum unchanged", name)
		}
	}
}

// FuzzApplyDelta feeds arbitrary delta encodings to ApplyDelta: it never
// panics, never changes the held assignment, and what it accepts is a
// valid assignment whose checksum matches, and which Diff reproduces.
func FuzzApplyDelta(f *testing.F) {
	r := rand.New(rand.NewPCG(9, 10))
	names, addrs := taskNames(5)
	base := randomAssignment(r, 4, 12, names, addrs)
	for range 20 {
		b, err := proto.Marshal(Diff(base, evolve(r, base, names, addrs)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	keep := proto.Clone(ToProto(base))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d slicerv1.AssignmentDelta
		if proto.Unmarshal(b, &d) != nil {
			return
		}
		// Most random inputs fail the checksum; correct it half the time
		// so that the apply and validation paths see them too.
		if len(b) > 0 && b[0]&1 == 0 {
			if a, err := applyDelta(base, &d); err == nil {
				d.Checksum = Checksum(a)
			}
		}
		got, err := ApplyDelta(base, &d)
		if !proto.Equal(ToProto(base), keep) {
			t.Fatal("ApplyDelta changed the held assignment")
		}
		if err != nil {
			if !errors.Is(err, ErrDelta) {
				t.Fatalf("error %v does not wrap ErrDelta", err)
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("accepted an invalid result: %v", err)
		}
		if Checksum(got) != d.GetChecksum() {
			t.Fatal("accepted a result whose checksum differs")
		}
		again, err := ApplyDelta(base, wire(t, Diff(base, got)))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("Diff of an accepted result does not reproduce it: %v", err)
		}
	})
}

func BenchmarkDiff(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	names, addrs := taskNames(10)
	base := randomAssignment(r, 1, 10000, names, addrs)
	next := evolve(r, base, names, addrs)
	b.ReportAllocs()
	for b.Loop() {
		Diff(base, next)
	}
}

func BenchmarkApplyDelta(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	names, addrs := taskNames(10)
	base := randomAssignment(r, 1, 10000, names, addrs)
	d := wire(b, Diff(base, evolve(r, base, names, addrs)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ApplyDelta(base, d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChecksum(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	names, addrs := taskNames(10)
	a := randomAssignment(r, 1, 10000, names, addrs)
	b.ReportAllocs()
	for b.Loop() {
		Checksum(a)
	}
}

// TestCommittedAt: the commit time a WatchAssignment message carries, and
// none for a message without it (an older server's), whose encoding a
// commit time of 0 leaves unchanged.
func TestCommittedAt(t *testing.T) {
	a := &slicerv1.Assignment{Job: "kv", Generation: 3}
	old := &slicerv1.WatchAssignmentResponse{Assignment: a}
	if got := CommittedAt(old); !got.IsZero() {
		t.Errorf("CommittedAt of a message without the field = %v, want the zero time", got)
	}
	at := time.Unix(1_700_000_000, 123)
	stamped := &slicerv1.WatchAssignmentResponse{Assignment: a, CommittedUnixNano: CommittedUnixNano(at)}
	if got := CommittedAt(stamped); !got.Equal(at) {
		t.Errorf("CommittedAt = %v, want %v", got, at)
	}
	for _, z := range []time.Time{{}, time.Unix(-5, 0)} {
		if n := CommittedUnixNano(z); n != 0 {
			t.Errorf("CommittedUnixNano(%v) = %d, want 0 (unknown)", z, n)
		}
	}
	unknown := &slicerv1.WatchAssignmentResponse{Assignment: a, CommittedUnixNano: CommittedUnixNano(time.Time{})}
	want, err := proto.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := proto.Marshal(unknown)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("a message with an unknown commit time encodes as %x, an older server's as %x; want the same bytes", got, want)
	}
	// An older subscriber's decoder does not know the field and skips
	// it: GetAssignmentResponse has the same field 1 and nothing else.
	wire, err := proto.Marshal(stamped)
	if err != nil {
		t.Fatal(err)
	}
	var older slicerv1.GetAssignmentResponse
	if err := proto.Unmarshal(wire, &older); err != nil || older.GetAssignment().GetGeneration() != 3 {
		t.Errorf("a stamped message decoded without the field: %v, %v; want generation 3", &older, err)
	}
}
