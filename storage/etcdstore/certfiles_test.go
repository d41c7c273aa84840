package etcdstore

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// TestCertFilesReload: the files are checked at most once per
// certReloadInterval; a change is picked up at the next check even when the
// new file has the old one's size and time, and a file caught half-written
// keeps the previous version in use.
func TestCertFilesReload(t *testing.T) {
	dir := t.TempDir()
	cert, key, caFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	ca1, ca2 := etcdtest.NewCA(t, "one"), etcdtest.NewCA(t, "two")
	ca1.IssueTo(t, "first", cert, key)
	replace(t, ca1.CertFile, caFile)
	f, err := newCertFiles(TLS{CAFile: caFile, CertFile: cert, KeyFile: key}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	f.now = func() time.Time { return now }
	leaf := func() string {
		_, c := f.current()
		if c == nil || c.Leaf == nil {
			t.Fatal("no client certificate")
		}
		return c.Leaf.Subject.CommonName
	}
	trusts := func(ca *etcdtest.CA) bool {
		pool, _ := f.current()
		want, err := readPool(ca.CertFile)
		if err != nil {
			t.Fatal(err)
		}
		return pool.Equal(want)
	}
	if got := leaf(); got != "first" || !trusts(ca1) {
		t.Fatalf("first read: certificate %q, trusts one: %v", got, trusts(ca1))
	}

	// The new files carry the old ones' modification times, as a rotation
	// within one tick of the kernel's file clock does: contents decide.
	stamps := map[string]time.Time{}
	for _, p := range []string{cert, key, caFile} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		stamps[p] = fi.ModTime()
	}
	ca2.IssueTo(t, "second", cert, key)
	replace(t, ca2.CertFile, caFile)
	for p, mod := range stamps {
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	if got := leaf(); got != "first" || !trusts(ca1) {
		t.Errorf("within the interval: certificate %q, trusts one: %v; want the files read at most once per %v", got, trusts(ca1), certReloadInterval)
	}
	now = now.Add(certReloadInterval)
	if got := leaf(); got != "second" || !trusts(ca2) {
		t.Errorf("after the interval: certificate %q, trusts two: %v; want the new files", got, trusts(ca2))
	}

	// A half-written rotation: the key is not yet the certificate's.
	ca1.IssueTo(t, "third", cert, filepath.Join(dir, "other-key.pem"))
	now = now.Add(certReloadInterval)
	if got := leaf(); got != "second" {
		t.Errorf("with a mismatched key: certificate %q, want the previous one kept", got)
	}
	ca1.IssueTo(t, "fourth", cert, key)
	now = now.Add(certReloadInterval)
	if got := leaf(); got != "fourth" {
		t.Errorf("once whole again: certificate %q, want fourth", got)
	}
}

// replace writes src's content to dst in one rename.
func replace(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}
