package storage

import (
	"testing"

	"github.com/slicerd/slicerd/assign"
)

// benchAssignment is a large job: 100 tasks with 100 slices each.
func benchAssignment(gen uint64) *assign.Assignment {
	return testAssignment("bench", gen, 100, 100)
}

// BenchmarkCommit measures a conditional commit of a 10,000-slice
// assignment, including the sync to disk.
func BenchmarkCommit(b *testing.B) {
	s := openTest(b)
	a := benchAssignment(1)
	mustCommit(b, s, "bench", 0, a)
	enc, _ := a.MarshalBinary()
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a.Generation = uint64(i) + 2
		if err := s.Commit(ctx, "bench", uint64(i)+1, a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad measures loading a job whose current and previous are
// 10,000-slice assignments.
func BenchmarkLoad(b *testing.B) {
	s := openTest(b)
	mustCommit(b, s, "bench", 0, benchAssignment(1))
	mustCommit(b, s, "bench", 1, benchAssignment(2))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Load(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
