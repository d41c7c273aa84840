package storage_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// The Store contract (round trips, conflicts, invalid arguments, closing,
// cancellation, racing committers) is storagetest's, run by
// TestBoltContract; the tests here are of what only Bolt does: its file
// outlives the process, it opens read-only, and it logs.

func TestReopenKeepsEverything(t *testing.T) {
	s := openTest(t)
	cfg := assign.Config{MinRedundancy: 1, MaxRedundancy: 3}
	if err := s.SetConfig(ctx, "a", cfg); err != nil {
		t.Fatal(err)
	}
	a1, a2 := storagetest.Assignment("a", 1, 3, 2), storagetest.Assignment("a", 2, 4, 2)
	b1 := storagetest.Assignment("b", 9, 10, 10)
	mustCommit(t, s, "a", 0, a1)
	mustCommit(t, s, "a", 1, a2)
	mustCommit(t, s, "b", 0, b1)

	s = reopen(t, s, storage.BoltOptions{})
	rec := mustLoad(t, s, "a")
	if !storagetest.Same(rec.Current, a2) || !storagetest.Same(rec.Previous, a1) || !rec.Config.Equal(cfg) || !rec.Configured {
		t.Fatalf("job a after reopen: %+v", rec)
	}
	if rec := mustLoad(t, s, "b"); !storagetest.Same(rec.Current, b1) || rec.Previous != nil || rec.Configured {
		t.Fatalf("job b after reopen: %+v", rec)
	}
	if jobs, err := s.Jobs(ctx); err != nil || !slices.Equal(jobs, []string{"a", "b"}) {
		t.Fatalf("Jobs after reopen = %q, %v", jobs, err)
	}
	// Writing continues from the stored generation.
	mustCommit(t, s, "a", 2, storagetest.Assignment("a", 3, 1, 1))
}

func TestReadOnly(t *testing.T) {
	s := openTest(t)
	a := storagetest.Assignment("j", 1, 2, 2)
	mustCommit(t, s, "j", 0, a)
	path := s.Path()
	ro := reopen(t, s, storage.BoltOptions{ReadOnly: true})
	// Read-only openers share the file.
	ro2, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("second read-only open: %v", err)
	}
	defer ro2.Close()
	for _, r := range []*storage.Bolt{ro, ro2} {
		if rec := mustLoad(t, r, "j"); !storagetest.Same(rec.Current, a) {
			t.Fatalf("read-only Load: %+v", rec)
		}
	}
	before := readFile(t, path)
	if err := ro.Commit(ctx, "j", 1, storagetest.Assignment("j", 2, 1, 1)); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("read-only Commit: %v, want ErrReadOnly", err)
	}
	if err := ro.SetConfig(ctx, "j", assign.DefaultConfig()); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("read-only SetConfig: %v, want ErrReadOnly", err)
	}
	assertUnchanged(t, path, before)
	// A writer cannot join readers.
	if _, err := storage.OpenBolt(path, storage.BoltOptions{LockTimeout: shortLock}); !errors.Is(err, storage.ErrLocked) {
		t.Fatalf("writer open beside readers: %v, want ErrLocked", err)
	}
}

func TestReadOnlyMissingFile(t *testing.T) {
	dir := t.TempDir()
	_, err := storage.OpenDataDir(dir, storage.BoltOptions{ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
}

// A bbolt file without slicerd's schema is not a data file slicerd made:
// it is refused, read-only or not, and left as it is.
func TestBareBoltFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), storage.DataFileName)
	rawUpdate(t, path, func(*bbolt.Tx) error { return nil })
	before := readFile(t, path)
	for _, ro := range []bool{false, true} {
		_, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: ro})
		if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), "without slicerd's schema") {
			t.Fatalf("open (read-only %v) of a bare bbolt file: %v; want ErrCorrupt", ro, err)
		}
	}
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("the refused file changed")
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, b, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	_ = b.Commit(ctx, "j", 0, storagetest.Assignment("j", 2, 1, 1))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"creating a new data file", "storage opened", "committed", "commit conflict", "storage closed", b.Path()} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}
