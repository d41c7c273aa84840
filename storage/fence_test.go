package storage_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

func leaseState(epoch uint64, rest ...byte) []byte {
	return append(binary.BigEndian.AppendUint64(nil, epoch), rest...)
}

// TestBoltFence: the epoch a lease write stored is the one a fenced commit
// must carry, epochs never go back, and plain commits are not fenced.
func TestBoltFence(t *testing.T) {
	b := openTest(t)
	a := func(gen uint64) *assign.Assignment { return storagetest.Assignment("j", gen, 2, 2) }
	if err := b.CommitFenced(ctx, "j", 1, 0, a(1)); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("fenced commit with no lease stored: got %v, want ErrFenced", err)
	}
	if err := b.PutLeaseState(ctx, "j", leaseState(4, 'x')); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, b.Path())
	if err := b.CommitFenced(ctx, "j", 3, 0, a(1)); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("fenced commit under an old epoch: got %v, want ErrFenced", err)
	}
	if !bytes.Equal(before, readFile(t, b.Path())) {
		t.Fatal("a fenced-out commit changed the data file")
	}
	if err := b.CommitFenced(ctx, "j", 4, 0, a(1)); err != nil {
		t.Fatalf("fenced commit under the stored epoch: %v", err)
	}
	if err := b.Commit(ctx, "j", 1, a(2)); err != nil {
		t.Fatalf("an unfenced commit: %v", err)
	}
	if err := b.PutLeaseState(ctx, "j", leaseState(3)); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("a lease state with a lower epoch: got %v, want ErrFenced", err)
	}
	if err := b.PutLeaseState(ctx, "j", []byte{1, 2}); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("a lease state of 2 bytes: got %v, want ErrInvalid", err)
	}
	if err := b.PutLeaseState(ctx, "bad/name", leaseState(1)); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("a lease state for an invalid job name: got %v, want ErrInvalid", err)
	}
	states, err := b.LeaseStates(ctx)
	if err != nil || len(states) != 1 || !bytes.Equal(states["j"], leaseState(4, 'x')) {
		t.Fatalf("LeaseStates = %x, %v", states, err)
	}
	if got, err := b.LeaseState(ctx, "j"); err != nil || !bytes.Equal(got, leaseState(4, 'x')) {
		t.Fatalf("LeaseState(j) = %x, %v", got, err)
	}
	if got, err := b.LeaseState(ctx, "none"); err != nil || got != nil {
		t.Fatalf("LeaseState of a job with none stored = %x, %v; want nil", got, err)
	}
	// Deleting the job keeps its epoch: a new job of the name is fenced
	// by the same lease.
	if err := b.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitFenced(ctx, "j", 3, 0, a(1)); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("fenced commit under an old epoch after Delete: got %v, want ErrFenced", err)
	}
	b = reopen(t, b, storage.BoltOptions{})
	if err := b.CommitFenced(ctx, "j", 4, 0, a(1)); err != nil {
		t.Fatalf("fenced commit after reopening: %v", err)
	}
}

// TestBoltFenceCorrupt: an unreadable lease state is reported, and the
// fenced commit writes nothing.
func TestBoltFenceCorrupt(t *testing.T) {
	b := openTest(t)
	err := b.DB().Update(func(tx *bbolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("leases"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("j"), []byte{1, 2, 3})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CommitFenced(ctx, "j", 1, 0, storagetest.Assignment("j", 1, 1, 1)); !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("fenced commit over a corrupt lease state: got %v, want ErrCorrupt", err)
	}
	if _, err := b.LeaseStates(ctx); !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("LeaseStates over a corrupt lease state: got %v, want ErrCorrupt", err)
	}
	if _, err := b.LeaseState(ctx, "j"); !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("LeaseState of a corrupt lease state: got %v, want ErrCorrupt", err)
	}
	if _, err := b.Load(ctx, "j"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Load after the refused commit: got %v, want ErrNotFound", err)
	}
}
