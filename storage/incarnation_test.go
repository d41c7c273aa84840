package storage_test

import (
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// writeFormat1 writes a data file as a slicerd before store incarnations
// did: format 1, no incarnation, assignments in codec version 1.
func writeFormat1(t *testing.T, path string, prev, cur *assign.Assignment) {
	t.Helper()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(storage.BucketMeta)
		if err != nil {
			return err
		}
		if err := meta.Put(storage.KeyFormatVersion, storage.EncodeFormatVersion(1)); err != nil {
			return err
		}
		jobs, err := tx.CreateBucket(storage.BucketJobs)
		if err != nil {
			return err
		}
		job, err := jobs.CreateBucket([]byte(cur.Job))
		if err != nil {
			return err
		}
		if err := job.Put(storage.KeyPrevious, storagetest.EncodeV1(t, prev)); err != nil {
			return err
		}
		return job.Put(storage.KeyCurrent, storagetest.EncodeV1(t, cur))
	})
}

// TestUpgradeFormat1 opens a data file of an older slicerd: a writable
// open gives it an incarnation once, which its old assignments then carry;
// a read-only open cannot and says how to upgrade.
func TestUpgradeFormat1(t *testing.T) {
	path := filepath.Join(t.TempDir(), storage.DataFileName)
	prev, cur := storagetest.Assignment("old", 4, 2, 2), storagetest.Assignment("old", 5, 3, 2)
	writeFormat1(t, path, prev, cur)
	before := readFile(t, path)
	if _, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: true}); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("read-only open of a format 1 file: %v, want ErrReadOnly", err)
	}
	assertUnchanged(t, path, before)

	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		t.Fatalf("open of a format 1 file: %v", err)
	}
	inc := s.Incarnation()
	if err := assign.ValidateIncarnation(inc); err != nil {
		t.Fatalf("upgraded file's incarnation %q: %v", inc, err)
	}
	rec := mustLoad(t, s, "old")
	if !storagetest.Same(rec.Current, cur) || !storagetest.Same(rec.Previous, prev) {
		t.Fatalf("upgraded file loads generations %d and %d, want 5 and 4", rec.Current.Generation, rec.Previous.Generation)
	}
	if rec.Current.Incarnation != inc || rec.Previous.Incarnation != inc {
		t.Fatalf("old assignments carry incarnations %q and %q, want the store's %q", rec.Current.Incarnation, rec.Previous.Incarnation, inc)
	}
	mustCommit(t, s, "old", 5, storagetest.Assignment("old", 6, 3, 2))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawView(t, path, func(tx *bbolt.Tx) {
		meta := tx.Bucket(storage.BucketMeta)
		if v, err := storage.DecodeFormatVersion(meta.Get(storage.KeyFormatVersion)); err != nil || v != storage.FormatVersion {
			t.Errorf("format version after the upgrade: %d (%v), want %d", v, err, storage.FormatVersion)
		}
		if got := string(meta.Get(storage.KeyIncarnation)); got != inc {
			t.Errorf("stored incarnation %q, want %q", got, inc)
		}
	})

	for _, ro := range []bool{false, true} {
		r, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: ro})
		if err != nil {
			t.Fatalf("reopen (read-only %v): %v", ro, err)
		}
		if r.Incarnation() != inc {
			t.Errorf("reopened (read-only %v) with incarnation %q, want %q", ro, r.Incarnation(), inc)
		}
		rec := mustLoad(t, r, "old")
		if rec.Current.Generation != 6 || rec.Current.Incarnation != inc || rec.Previous.Incarnation != inc {
			t.Errorf("reopened (read-only %v): generation %d of %q after %q, want 6 of %q", ro, rec.Current.Generation, rec.Current.Incarnation, rec.Previous.Incarnation, inc)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBadIncarnation: a format 2 file whose incarnation is missing or
// malformed is corrupt, and left untouched.
func TestBadIncarnation(t *testing.T) {
	for name, v := range map[string][]byte{"missing": nil, "empty": {}, "not an id": []byte("a b")} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t)
			path := s.Path()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rawUpdate(t, path, func(tx *bbolt.Tx) error {
				if v == nil {
					return tx.Bucket(storage.BucketMeta).Delete(storage.KeyIncarnation)
				}
				return tx.Bucket(storage.BucketMeta).Put(storage.KeyIncarnation, v)
			})
			before := readFile(t, path)
			for _, ro := range []bool{false, true} {
				if _, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: ro}); !errors.Is(err, storage.ErrCorrupt) {
					t.Errorf("open (read-only %v): %v, want ErrCorrupt", ro, err)
				}
			}
			assertUnchanged(t, path, before)
		})
	}
}

// rawView reads the closed data file at path with bbolt directly.
func rawView(t *testing.T, path string, fn func(tx *bbolt.Tx)) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bbolt.Tx) error { fn(tx); return nil }); err != nil {
		t.Fatal(err)
	}
}
