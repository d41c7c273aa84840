package storage_test

import (
	"testing"

	"github.com/slicerd/slicerd/storage/storagetest"
)

// The benchmarks run the storagetest ones against a Bolt in a temporary
// directory; a commit includes the sync to disk.

func BenchmarkCommit(b *testing.B) { storagetest.BenchmarkCommit(b, openTest(b)) }

func BenchmarkLoad(b *testing.B) { storagetest.BenchmarkLoad(b, openTest(b)) }

func BenchmarkCommitLoad(b *testing.B) { storagetest.BenchmarkCommitLoad(b, openTest(b)) }
