package storage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/assign"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	goleak.VerifyTestMain(m)
}

// testAssignment builds a valid assignment of job with nTasks tasks and
// nTasks*slicesPerTask equal slices; every fifth slice has two tasks.
func testAssignment(job string, gen uint64, nTasks, slicesPerTask int) *assign.Assignment {
	a := &assign.Assignment{Job: job, Generation: gen}
	for i := range nTasks {
		a.Tasks = append(a.Tasks, assign.Task{
			Name: fmt.Sprintf("task-%04d", i),
			Addr: fmt.Sprintf("10.0.%d.%d:7070", i/256, i%256),
		})
	}
	n := nTasks * slicesPerTask
	width := assign.KeySpaceEnd / assign.SliceKey(n)
	for i := range n {
		s := assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width}
		if i == n-1 {
			s.End = assign.KeySpaceEnd
		}
		t := i % nTasks
		s.Tasks = []string{a.Tasks[t].Name}
		if i%5 == 0 && nTasks > 1 {
			u := (t + 1) % nTasks
			s.Tasks = []string{a.Tasks[min(t, u)].Name, a.Tasks[max(t, u)].Name}
		}
		a.Slices = append(a.Slices, s)
	}
	if err := a.Validate(); err != nil {
		panic(err)
	}
	return a
}

// openTest opens a fresh store in a temporary directory and closes it at
// the end of the test.
func openTest(t testing.TB) *Bolt {
	t.Helper()
	b, err := OpenDataDir(t.TempDir(), BoltOptions{})
	if err != nil {
		t.Fatalf("OpenDataDir: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func reopen(t testing.TB, b *Bolt, opts BoltOptions) *Bolt {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	nb, err := OpenBolt(b.Path(), opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = nb.Close() })
	return nb
}

func mustCommit(t testing.TB, s Store, job string, prevGen uint64, a *assign.Assignment) {
	t.Helper()
	if err := s.Commit(context.Background(), job, prevGen, a); err != nil {
		t.Fatalf("Commit(%q, %d, gen %d): %v", job, prevGen, a.Generation, err)
	}
}

func mustLoad(t testing.TB, s Store, job string) Record {
	t.Helper()
	rec, err := s.Load(context.Background(), job)
	if err != nil {
		t.Fatalf("Load(%q): %v", job, err)
	}
	return rec
}

func sameAssignment(a, b *assign.Assignment) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Generation == b.Generation && assign.Equal(a, b)
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
