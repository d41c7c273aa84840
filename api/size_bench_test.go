package api

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// BenchmarkMillionSliceForms measures what a server holds for a job of
// 10^6 slices on 10,000 tasks in each form it keeps, as the bytes making
// it allocates: the decoded assignment (decoding the store's encoding,
// store-MB long), its protobuf form (ToProto), the protobuf encoding a
// stream sends (wire-MB long) made from that form, and the same encoding
// made from the assignment itself (AppendWatchResponse); and decoding the
// assignment from a message's wire form (from-wire: protobuf's
// unmarshalling, then FromProto, as Clerks, Slicelets and Distributors
// receive it). held-MB is what a decoded assignment keeps on the heap
// once the decoding's garbage is collected.
// docs/benchmarks.md quotes it.
func BenchmarkMillionSliceForms(b *testing.B) {
	a := millionSlices(1)
	enc, err := a.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, "", a, enc)
	// The same job with two tasks a slice, whose lists are not shared
	// across tasks: they take an array of exactly the names they hold.
	two := millionSlices(2)
	enc2, err := two.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, "-r2", two, enc2)
	b.Run("to-proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ToProto(a)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		msg := &slicerv1.WatchAssignmentResponse{Assignment: ToProto(a)}
		var wire []byte
		b.ReportAllocs()
		for b.Loop() {
			if wire, err = proto.Marshal(msg); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(wire))/1e6, "wire-MB")
	})
	b.Run("append", func(b *testing.B) {
		var wire []byte
		b.ReportAllocs()
		for b.Loop() {
			wire = AppendWatchResponse(nil, a, 0)
		}
		b.ReportMetric(float64(len(wire))/1e6, "wire-MB")
	})
}

// millionSlices is the job BenchmarkMillionSliceForms measures: 10^6
// slices on 10,000 tasks, each slice on r tasks at random.
func millionSlices(r int) *assign.Assignment {
	const nTasks, n = 10_000, 1_000_000
	rng := rand.New(rand.NewPCG(1, 2))
	a := &assign.Assignment{Job: "big", Generation: 1, Tasks: make([]assign.Task, nTasks), Slices: make([]assign.Slice, n)}
	for i := range a.Tasks {
		a.Tasks[i] = assign.Task{Name: fmt.Sprintf("task-%05d", i), Addr: fmt.Sprintf("10.0.%d.%d:7070", i>>8, i&255)}
	}
	w := assign.KeySpaceEnd / assign.SliceKey(n)
	for i := range n {
		first := rng.IntN(nTasks - r + 1)
		names := make([]string, r)
		for k := range names {
			names[k] = a.Tasks[first+k].Name
		}
		a.Slices[i] = assign.Slice{Start: assign.SliceKey(i) * w, End: assign.SliceKey(i+1) * w, Tasks: names}
	}
	a.Slices[n-1].End = assign.KeySpaceEnd
	return a
}

// benchDecode measures decoding a, encoded by the store as enc, from the
// store's encoding and from a message, as "decode" and "from-wire"
// followed by suffix.
func benchDecode(b *testing.B, suffix string, a *assign.Assignment, enc []byte) {
	b.Run("decode"+suffix, func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := assign.UnmarshalAssignment(enc); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(enc))/1e6, "store-MB")
		b.ReportMetric(heldMB(func() any { return must(assign.UnmarshalAssignment(enc)) }), "held-MB")
	})
	b.Run("from-wire"+suffix, func(b *testing.B) {
		wire, err := proto.Marshal(ToProto(a))
		if err != nil {
			b.Fatal(err)
		}
		receive := func() *assign.Assignment {
			var m slicerv1.Assignment
			if err := proto.Unmarshal(wire, &m); err != nil {
				b.Fatal(err)
			}
			return must(FromProto(&m))
		}
		b.ReportAllocs()
		for b.Loop() {
			receive()
		}
		b.ReportMetric(heldMB(func() any { return receive() }), "held-MB")
		runtime.KeepAlive(wire)
	})
}

// heldMB is how many megabytes what make returns keeps on the heap after
// a collection.
func heldMB(make func() any) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := make()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1e6
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
