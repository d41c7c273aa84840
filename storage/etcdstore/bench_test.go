package etcdstore_test

import (
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// benchAssignment is the bbolt benchmarks' large job: 100 tasks with 100
// slices each (about 100 KB encoded).
func benchAssignment(gen uint64) *assign.Assignment {
	return storagetest.Assignment("bench", gen, 100, 100)
}

// BenchmarkCommit measures a conditional commit of a 10,000-slice
// assignment to an embedded single-member etcd on loopback: the read of the
// job's keys, then the transaction moving current to previous, synced to
// etcd's WAL.
func BenchmarkCommit(b *testing.B) {
	s := openAt(b, etcdtest.Start(b), etcdstore.Options{})
	a := benchAssignment(1)
	if err := s.Commit(ctx, "bench", 0, a); err != nil {
		b.Fatal(err)
	}
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
	s := openAt(b, etcdtest.Start(b), etcdstore.Options{})
	if err := s.Commit(ctx, "bench", 0, benchAssignment(1)); err != nil {
		b.Fatal(err)
	}
	if err := s.Commit(ctx, "bench", 1, benchAssignment(2)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Load(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommitLoad measures an Assigner's step: load the job, commit
// the next generation on top of it.
func BenchmarkCommitLoad(b *testing.B) {
	s := openAt(b, etcdtest.Start(b), etcdstore.Options{})
	a := benchAssignment(1)
	if err := s.Commit(ctx, "bench", 0, a); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec, err := s.Load(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		a.Generation = rec.Generation() + 1
		if err := s.Commit(ctx, "bench", rec.Generation(), a); err != nil {
			b.Fatal(err)
		}
	}
}
