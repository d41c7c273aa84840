package api

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// AppendWatchResponse writes exactly what proto.Marshal writes for the
// message it stands for, whatever is empty, zero or large in it.
func TestAppendWatchResponseIsProtoMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	cases := map[string]*assign.Assignment{
		"one slice": {Job: "j", Generation: 1, Tasks: []assign.Task{{Name: "a", Addr: "h:1"}},
			Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{"a"}}}},
		"no address, incarnation": {Job: "j", Generation: 7, Incarnation: "inc-1", Tasks: []assign.Task{{Name: "a"}, {Name: "b", Addr: "h:2"}},
			Slices: []assign.Slice{{Start: 0, End: 5, Tasks: []string{"a", "b"}}, {Start: 5, End: assign.KeySpaceEnd, Tasks: []string{"b"}}}},
		"zero generation and empty job (not valid, still encoded)": {Slices: []assign.Slice{{Tasks: []string{""}}}},
		"nothing": {},
	}
	for _, n := range []int{3, 1000, 70_000} {
		tasks := make([]assign.Task, 1+rng.IntN(300))
		for i := range tasks {
			tasks[i] = assign.Task{Name: fmt.Sprintf("task-%04d-%s", i, bytes.Repeat([]byte("x"), rng.IntN(200))), Addr: fmt.Sprintf("10.0.0.%d:%d", i%256, rng.IntN(65536))}
		}
		a := &assign.Assignment{Job: "big", Generation: rng.Uint64(), Incarnation: "i", Tasks: tasks, Slices: make([]assign.Slice, n)}
		w := assign.KeySpaceEnd / assign.SliceKey(n)
		for i := range a.Slices {
			var names []string
			for k := range 1 + rng.IntN(3) {
				names = append(names, tasks[(i+k)%len(tasks)].Name)
			}
			a.Slices[i] = assign.Slice{Start: assign.SliceKey(i) * w, End: assign.SliceKey(i+1) * w, Tasks: names}
		}
		a.Slices[n-1].End = assign.KeySpaceEnd
		cases[fmt.Sprintf("%d slices", n)] = a
	}
	for name, a := range cases {
		for _, committed := range []int64{0, 1, 1_790_000_000_123_456_789, -5} {
			want, err := proto.Marshal(&slicerv1.WatchAssignmentResponse{Assignment: ToProto(a), CommittedUnixNano: committed})
			if err != nil {
				t.Fatal(err)
			}
			for _, prefix := range [][]byte{nil, []byte("prefix"), make([]byte, 3, len(want)+10)} {
				got := AppendWatchResponse(bytes.Clone(prefix), a, committed)
				if !bytes.Equal(got[:len(prefix)], prefix) || !bytes.Equal(got[len(prefix):], want) {
					t.Fatalf("%s, committed %d, prefix %q: encoding differs from proto.Marshal (%d bytes, want %d)", name, committed, prefix, len(got)-len(prefix), len(want))
				}
			}
		}
	}
}
