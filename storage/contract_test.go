package storage_test

import (
	"testing"

	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// TestBoltContract holds Bolt to the contract every Store keeps. bbolt
// locks its file to one opener, so the suite's racing committers share one
// Bolt. A failed write must leave the data file identical, byte for byte.
func TestBoltContract(t *testing.T) {
	storagetest.Run(t, storagetest.Opener{
		Open: func(t *testing.T) storage.Store {
			b, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
			if err != nil {
				t.Fatalf("OpenDataDir: %v", err)
			}
			return b
		},
		Raw: func(t *testing.T, s storage.Store) []byte {
			return readFile(t, s.(*storage.Bolt).Path())
		},
		Reopen: func(t *testing.T, s storage.Store) storage.Store {
			path := s.(*storage.Bolt).Path()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			b, err := storage.OpenBolt(path, storage.BoltOptions{})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return b
		},
	})
}
