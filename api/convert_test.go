package api

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

func TestConfigRoundTrip(t *testing.T) {
	for name, c := range map[string]assign.Config{
		"defaults pinned":    assign.DefaultConfig(),
		"zeros mean default": {MinRedundancy: 1, MaxRedundancy: 1},
		"every field": {
			MinRedundancy: 2, MaxRedundancy: 5, MinSlicesPerTask: 20, MaxSlicesPerTask: 300,
			MergeChurn: 0.02, MoveChurn: 0.15, MergeLoadFactor: 0.5, SplitLoadFactor: 3, SuppressBelow: 1000,
			MaxSlices: 5000,
		},
		"limits": {
			MinRedundancy: assign.MaxRedundancyLimit, MaxRedundancy: assign.MaxRedundancyLimit,
			MinSlicesPerTask: assign.MaxSlicesPerTaskLimit, MaxSlicesPerTask: assign.MaxSlicesPerTaskLimit,
			MergeChurn: 1, MoveChurn: 1, MergeLoadFactor: 1e6, SplitLoadFactor: 1e6, SuppressBelow: assign.MaxLoad,
			MaxSlices: assign.MaxSlicesLimit,
		},
		"drained and cordoned": {MinRedundancy: 1, MaxRedundancy: 1, Drained: []string{"kv-1", "kv-7"}, Cordoned: []string{"kv-2"}},
		"gain-per-byte":        {MinRedundancy: 1, MaxRedundancy: 2, Victim: assign.VictimGainPerByte},
		"make-before-break":    {MinRedundancy: 1, MaxRedundancy: 2, HandoffDeadlineMS: 2500},
		"pinned":               {MinRedundancy: 1, MaxRedundancy: 1, Pins: []assign.Pin{{Start: 0, End: 10, Task: "kv-1", Reason: "why"}, {Start: 99, End: assign.KeySpaceEnd, Task: "kv-2"}}},
	} {
		t.Run(name, func(t *testing.T) {
			// Through the wire encoding, as a client and server see it.
			b, err := proto.Marshal(ConfigToProto(c))
			if err != nil {
				t.Fatal(err)
			}
			var p slicerv1.JobConfig
			if err := proto.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
			got, err := ConfigFromProto(&p)
			if err != nil {
				t.Fatalf("ConfigFromProto: %v", err)
			}
			if !got.Equal(c) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
			}
		})
	}
}

// A strong job's configuration round-trips; affinity is written as the
// unset value, as configurations from before the field have it.
func TestConsistencyRoundTrip(t *testing.T) {
	strong := assign.Config{MinRedundancy: 1, MaxRedundancy: 1, Consistency: assign.Strong}
	p := ConfigToProto(strong)
	if p.GetConsistency() != slicerv1.Consistency_CONSISTENCY_STRONG {
		t.Fatalf("strong written as %v", p.GetConsistency())
	}
	back, err := ConfigFromProto(p)
	if err != nil || !back.Equal(strong) {
		t.Fatalf("round trip of a strong config = %+v, %v", back, err)
	}
	if got := ConfigToProto(assign.DefaultConfig()).GetConsistency(); got != slicerv1.Consistency_CONSISTENCY_UNSPECIFIED {
		t.Errorf("affinity written as %v, want unset", got)
	}
	p.Consistency = slicerv1.Consistency_CONSISTENCY_AFFINITY
	if back, err := ConfigFromProto(p); err != nil || back.IsStrong() {
		t.Errorf("explicit affinity read as %+v, %v", back, err)
	}
}

func TestConfigFromProtoRejects(t *testing.T) {
	valid := func() *slicerv1.JobConfig { return &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 2} }
	for name, tc := range map[string]struct {
		edit func(*slicerv1.JobConfig)
		want string
	}{
		"min redundancy 0":      {func(p *slicerv1.JobConfig) { p.MinRedundancy = 0 }, "min redundancy is 0"},
		"max below min":         {func(p *slicerv1.JobConfig) { p.MinRedundancy = 3 }, "below min redundancy"},
		"redundancy too high":   {func(p *slicerv1.JobConfig) { p.MaxRedundancy = 1 << 31 }, "above the limit"},
		"min slices too high":   {func(p *slicerv1.JobConfig) { p.MinSlicesPerTask = math.MaxUint32 }, "min slices per task"},
		"max slices too high":   {func(p *slicerv1.JobConfig) { p.MaxSlicesPerTask = 10001 }, "max slices per task"},
		"max slices below min":  {func(p *slicerv1.JobConfig) { p.MinSlicesPerTask, p.MaxSlicesPerTask = 100, 60 }, "below min slices per task"},
		"max slices below dflt": {func(p *slicerv1.JobConfig) { p.MaxSlicesPerTask = 10 }, "below min slices per task 50"},
		"job max slices high":   {func(p *slicerv1.JobConfig) { p.MaxSlices = assign.MaxSlicesLimit + 1 }, "max slices"},
		"merge churn above 1":   {func(p *slicerv1.JobConfig) { p.MergeChurn = 1.5 }, "merge churn"},
		"move churn negative":   {func(p *slicerv1.JobConfig) { p.MoveChurn = -0.1 }, "move churn"},
		"move churn NaN":        {func(p *slicerv1.JobConfig) { p.MoveChurn = math.NaN() }, "move churn"},
		"merge factor infinite": {func(p *slicerv1.JobConfig) { p.MergeLoadFactor = math.Inf(1) }, "merge load factor"},
		"split factor at 1":     {func(p *slicerv1.JobConfig) { p.SplitLoadFactor = 1 }, "split load factor"},
		"suppress negative":     {func(p *slicerv1.JobConfig) { p.SuppressBelow = -1 }, "suppress below"},
		"strong replicated": {func(p *slicerv1.JobConfig) { p.Consistency = slicerv1.Consistency_CONSISTENCY_STRONG },
			"max redundancy must be 1, not 2"},
		"unknown consistency": {func(p *slicerv1.JobConfig) { p.Consistency = 7 }, "consistency 7"},
		"drained unsorted":    {func(p *slicerv1.JobConfig) { p.DrainedTasks = []string{"b", "a"} }, "drained tasks are not sorted and unique"},
		"cordoned twice":      {func(p *slicerv1.JobConfig) { p.CordonedTasks = []string{"a", "a"} }, "cordoned tasks are not sorted and unique"},
		"drained bad name":    {func(p *slicerv1.JobConfig) { p.DrainedTasks = []string{"a/b"} }, "drained task 0"},
		"too many drained":    {func(p *slicerv1.JobConfig) { p.DrainedTasks = make([]string, 1025) }, "1025 drained or cordoned tasks"},
		"too many pins":       {func(p *slicerv1.JobConfig) { p.Pins = make([]*slicerv1.KeyPin, 1025) }, "1025 pins"},
		"pins overlap": {func(p *slicerv1.JobConfig) {
			p.Pins = []*slicerv1.KeyPin{{Start: 0, End: 10, Task: "a"}, {Start: 5, End: 12, Task: "b"}}
		}, "overlaps"},
	} {
		t.Run(name, func(t *testing.T) {
			p := valid()
			tc.edit(p)
			_, err := ConfigFromProto(p)
			if !errors.Is(err, assign.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ConfigFromProto(%v) = %v, want ErrInvalidConfig mentioning %q", p, err, tc.want)
			}
		})
	}
	if _, err := ConfigFromProto(nil); !errors.Is(err, assign.ErrInvalidConfig) {
		t.Errorf("ConfigFromProto(nil) = %v, want ErrInvalidConfig", err)
	}
}

// FuzzConfigFromProto: whatever arrives on the wire is either rejected or
// a configuration that validates and survives a round trip unchanged.
func FuzzConfigFromProto(f *testing.F) {
	f.Add(uint32(1), uint32(1), uint32(0), uint32(0), 0.0, 0.0, 0.0, 0.0, 0.0)
	f.Add(uint32(2), uint32(3), uint32(50), uint32(150), 0.01, 0.09, 1.0, 2.0, 100.0)
	f.Add(uint32(0), uint32(70), uint32(20000), uint32(1), -1.0, math.NaN(), math.Inf(1), 0.5, -3.0)
	f.Fuzz(func(t *testing.T, minR, maxR, minS, maxS uint32, mergeC, moveC, mergeF, splitF, suppress float64) {
		p := &slicerv1.JobConfig{
			MinRedundancy: minR, MaxRedundancy: maxR, MinSlicesPerTask: minS, MaxSlicesPerTask: maxS,
			MergeChurn: mergeC, MoveChurn: moveC, MergeLoadFactor: mergeF, SplitLoadFactor: splitF, SuppressBelow: suppress,
		}
		c, err := ConfigFromProto(p)
		if err != nil {
			if !errors.Is(err, assign.ErrInvalidConfig) {
				t.Fatalf("error %v is not ErrInvalidConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted %+v that does not validate: %v", c, err)
		}
		if back := ConfigToProto(c); !proto.Equal(back, p) {
			t.Fatalf("round trip changed %v to %v", p, back)
		}
	})
}

func TestAssignmentRoundTrip(t *testing.T) {
	a, err := assign.Initial("demo", []assign.Task{{Name: "a", Addr: "10.0.0.1:1"}, {Name: "b", Addr: "10.0.0.2:1"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, inc := range []string{"", "0123456789abcdef0123456789abcdef"} {
		a.Incarnation = inc
		got, err := FromProto(ToProto(a))
		if err != nil {
			t.Fatal(err)
		}
		if !assign.Equal(got, a) || got.Version() != a.Version() {
			t.Fatalf("round trip of incarnation %q gave %+v, want %+v", inc, got.Version(), a.Version())
		}
	}
	p := ToProto(a)
	p.Incarnation = "not an id"
	if _, err := FromProto(p); !errors.Is(err, assign.ErrInvalidAssignment) {
		t.Fatalf("FromProto of a malformed incarnation: %v, want ErrInvalidAssignment", err)
	}
}

// TestReceivedListsAreShared: an assignment received whole (FromProto) or
// as a delta (ApplyDelta) gives the slices of one task one list, and
// consecutive slices of the same tasks one list, spelled with the task
// table's strings rather than the message's copies of the names.
func TestReceivedListsAreShared(t *testing.T) {
	w := assign.KeySpaceEnd / 6
	tasks := []assign.Task{{Name: "a", Addr: "10.0.0.1:1"}, {Name: "b", Addr: "10.0.0.2:1"}, {Name: "c", Addr: "10.0.0.3:1"}}
	a := &assign.Assignment{Job: "j", Generation: 3, Tasks: tasks, Slices: []assign.Slice{
		{Start: 0, End: w, Tasks: []string{"a"}}, {Start: w, End: 2 * w, Tasks: []string{"b", "c"}},
		{Start: 2 * w, End: 3 * w, Tasks: []string{"b", "c"}}, {Start: 3 * w, End: 4 * w, Tasks: []string{"c"}},
		{Start: 4 * w, End: 5 * w, Tasks: []string{"a"}}, {Start: 5 * w, End: assign.KeySpaceEnd, Tasks: []string{"a", "c"}},
	}}
	got, err := FromProto(wire(t, ToProto(a)))
	if err != nil {
		t.Fatal(err)
	}
	if !assign.Equal(got, a) {
		t.Fatalf("FromProto gave %+v, want %+v", got, a)
	}
	s := got.Slices
	if !sameArray(s[0].Tasks, s[4].Tasks) || !sameArray(s[1].Tasks, s[2].Tasks) || sameArray(s[2].Tasks, s[5].Tasks) {
		t.Fatal("FromProto: lists are not shared as they should be")
	}
	checkSpelledBy(t, got)

	next := *got
	next.Generation++
	next.Slices = slices.Clone(got.Slices)
	next.Slices[3].Tasks = []string{"a", "b"}
	next.Slices[4].Tasks = []string{"a", "b"}
	next.Slices[5].Tasks = []string{"b"}
	applied, err := ApplyDelta(got, wire(t, Diff(got, &next)))
	if err != nil {
		t.Fatal(err)
	}
	if !assign.Equal(applied, &next) {
		t.Fatalf("ApplyDelta gave %+v, want %+v", applied, &next)
	}
	s = applied.Slices
	if !sameArray(s[3].Tasks, s[4].Tasks) {
		t.Fatal("ApplyDelta: painted slices of the same tasks do not share a list")
	}
	if !sameArray(s[0].Tasks, got.Slices[0].Tasks) {
		t.Fatal("ApplyDelta: a held slice does not keep its list")
	}
	checkSpelledBy(t, applied)
}

// sameArray reports whether lists a and b are one list, not equal copies.
func sameArray(a, b []string) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// checkSpelledBy fails t unless every name of a's lists is the string of
// its task table, and no list has room to be appended to in place.
func checkSpelledBy(t *testing.T, a *assign.Assignment) {
	t.Helper()
	table := make(map[string]*byte, len(a.Tasks))
	for _, task := range a.Tasks {
		table[task.Name] = unsafe.StringData(task.Name)
	}
	for i, s := range a.Slices {
		for _, n := range s.Tasks {
			if table[n] != unsafe.StringData(n) {
				t.Fatalf("slice %d: name %q is not the task table's string", i, n)
			}
		}
		if cap(s.Tasks) != len(s.Tasks) {
			t.Fatalf("slice %d: list %v has room to append in place", i, s.Tasks)
		}
	}
}

// TestToProtoSharesLists: the wire form shares the assignment's task
// lists, with no room to append to them, and says what a copy would.
func TestToProtoSharesLists(t *testing.T) {
	w := assign.KeySpaceEnd / 3
	names := append(make([]string, 0, 8), "a", "b")
	a := &assign.Assignment{Job: "j", Generation: 2, Tasks: []assign.Task{{Name: "a"}, {Name: "b"}}, Slices: []assign.Slice{
		{Start: 0, End: w, Tasks: names}, {Start: w, End: 2 * w, Tasks: names[:1]}, {Start: 2 * w, End: assign.KeySpaceEnd, Tasks: []string{"b"}},
	}}
	p := ToProto(a)
	for i, s := range p.GetSlices() {
		if got := s.GetTasks(); &got[0] != &a.Slices[i].Tasks[0] || cap(got) != len(got) {
			t.Fatalf("slice %d: the message's list is a copy, or has room to append (%d of %d)", i, len(got), cap(got))
		}
	}
	if got, err := FromProto(wire(t, p)); err != nil || !assign.Equal(got, a) {
		t.Fatalf("FromProto(ToProto) = %+v, %v; want %+v", got, err, a)
	}
}
