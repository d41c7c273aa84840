package etcdstore_test

import (
	"testing"

	"github.com/slicerd/slicerd/storage/etcdstore"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// The benchmarks run the storagetest ones, on the bbolt benchmarks' job,
// against an embedded single-member etcd on loopback.

// BenchmarkCommit: the read of the job's keys, then the transaction moving
// current to previous, synced to etcd's WAL.
func BenchmarkCommit(b *testing.B) {
	storagetest.BenchmarkCommit(b, openAt(b, etcdtest.Start(b), etcdstore.Options{}))
}

func BenchmarkLoad(b *testing.B) {
	storagetest.BenchmarkLoad(b, openAt(b, etcdtest.Start(b), etcdstore.Options{}))
}

// BenchmarkCommitLoad: an Assigner's step, load then commit on top.
func BenchmarkCommitLoad(b *testing.B) {
	storagetest.BenchmarkCommitLoad(b, openAt(b, etcdtest.Start(b), etcdstore.Options{}))
}
