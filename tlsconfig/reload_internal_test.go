package tlsconfig

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/identity"
)

// countHandler counts log records by level.
type countHandler struct {
	mu     sync.Mutex
	counts map[slog.Level]int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Level]++
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

func (h *countHandler) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[l]
}

// TestRecheckReadsChangedFilesOnce drives the recheck interval with a fake
// clock: a change is picked up at the first look after the interval (even
// when the new files have the old ones' sizes and times), and
// broken files are read and reported once, not at every look.
func TestRecheckReadsChangedFilesOnce(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	issue := func(node string) Files {
		t.Helper()
		f, err := ca.IssueFiles(dir, "agent", caFile, Leaf{IDs: []identity.ID{{Role: identity.Assigner, Node: node}}, Validity: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	files := issue("n1")
	logs := &countHandler{counts: map[slog.Level]int{}}
	s, err := Load(files, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s.now = func() time.Time { return now }
	node := func() string {
		ids := s.IDs()
		if len(ids) != 1 {
			t.Fatalf("IDs = %v, want one", ids)
		}
		return ids[0].Node
	}

	// The renewed files carry the old ones' modification times, as a
	// renewal within one tick of the kernel's file clock does (n1 and n2
	// are of one size): contents decide.
	var mods []time.Time
	for _, p := range []string{files.Cert, files.Key} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, fi.ModTime())
	}
	issue("n2")
	for i, p := range []string{files.Cert, files.Key} {
		if err := os.Chtimes(p, mods[i], mods[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got := node(); got != "n1" {
		t.Fatalf("within the recheck interval IDs name %s, want the loaded n1", got)
	}
	now = now.Add(recheck)
	if got := node(); got != "n2" {
		t.Fatalf("after the recheck interval IDs name %s, want the renewed n2", got)
	}
	if n := logs.count(slog.LevelInfo); n != 1 {
		t.Fatalf("%d reload lines logged, want 1", n)
	}

	if err := os.WriteFile(files.Cert, []byte("truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		now = now.Add(recheck)
		if got := node(); got != "n2" {
			t.Fatalf("with a broken certificate file IDs name %s, want the previous n2", got)
		}
	}
	if n := logs.count(slog.LevelError); n != 1 {
		t.Fatalf("a broken file unchanged over 5 rechecks logged %d errors, want 1", n)
	}

	issue("n3")
	now = now.Add(recheck)
	if got := node(); got != "n3" {
		t.Fatalf("after the file was fixed IDs name %s, want n3", got)
	}
}
