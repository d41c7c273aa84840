package storagetest

import (
	"context"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

// The benchmarks every store runs on the same large job, so that their
// figures compare: each store's benchmark is a one-line call of these with
// a new, empty store.

// benchJob is the benchmarks' job: 100 tasks with 100 slices each, 10,000
// slices (about 100 KB encoded).
const benchJob = "bench"

func benchAssignment(gen uint64) *assign.Assignment {
	return Assignment(benchJob, gen, 100, 100)
}

// BenchmarkCommit measures a conditional commit of a 10,000-slice
// assignment on top of the previous generation. It reports the encoded
// assignment's size as bytes per operation.
func BenchmarkCommit(b *testing.B, s storage.Store) {
	ctx := context.Background()
	a := benchAssignment(1)
	mustCommit(b, s, benchJob, 0, a)
	enc, err := a.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a.Generation = uint64(i) + 2
		if err := s.Commit(ctx, benchJob, uint64(i)+1, a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad measures loading a job whose current and previous are
// 10,000-slice assignments.
func BenchmarkLoad(b *testing.B, s storage.Store) {
	ctx := context.Background()
	mustCommit(b, s, benchJob, 0, benchAssignment(1))
	mustCommit(b, s, benchJob, 1, benchAssignment(2))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Load(ctx, benchJob); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommitLoad measures an Assigner's step on a 10,000-slice job:
// load the job, then commit the next generation on top of it.
func BenchmarkCommitLoad(b *testing.B, s storage.Store) {
	ctx := context.Background()
	a := benchAssignment(1)
	mustCommit(b, s, benchJob, 0, a)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec, err := s.Load(ctx, benchJob)
		if err != nil {
			b.Fatal(err)
		}
		a.Generation = rec.Generation() + 1
		if err := s.Commit(ctx, benchJob, rec.Generation(), a); err != nil {
			b.Fatal(err)
		}
	}
}
