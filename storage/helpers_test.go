package storage_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	goleak.VerifyTestMain(m)
}

var ctx = context.Background()

// openTest opens a fresh store in a temporary directory and closes it at
// the end of the test.
func openTest(t testing.TB) *storage.Bolt {
	t.Helper()
	b, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatalf("OpenDataDir: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func reopen(t testing.TB, b *storage.Bolt, opts storage.BoltOptions) *storage.Bolt {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	nb, err := storage.OpenBolt(b.Path(), opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = nb.Close() })
	return nb
}

func mustCommit(t testing.TB, s storage.Store, job string, prevGen uint64, a *assign.Assignment) {
	t.Helper()
	if err := s.Commit(ctx, job, prevGen, a); err != nil {
		t.Fatalf("Commit(%q, %d, gen %d): %v", job, prevGen, a.Generation, err)
	}
}

func mustLoad(t testing.TB, s storage.Store, job string) storage.Record {
	t.Helper()
	rec, err := s.Load(ctx, job)
	if err != nil {
		t.Fatalf("Load(%q): %v", job, err)
	}
	return rec
}

// readFile returns the data file's bytes; a failed write must leave them
// unchanged.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func assertUnchanged(t testing.TB, path string, before []byte) {
	t.Helper()
	if after := readFile(t, path); !bytes.Equal(before, after) {
		t.Fatalf("data file %s changed (%d bytes before, %d after)", path, len(before), len(after))
	}
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
