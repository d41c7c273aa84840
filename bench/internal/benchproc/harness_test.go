package benchproc

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

func TestSeedStoresTheAssignment(t *testing.T) {
	dir := t.TempDir()
	if err := Seed(context.Background(), dir, "kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:1"}, {Name: "t1", Addr: "127.0.0.1:2"}}, 10000); err != nil {
		t.Fatal(err)
	}
	store, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, err := store.Load(context.Background(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Current == nil || len(rec.Current.Slices) != 10000 || len(rec.Current.Tasks) != 2 {
		t.Fatalf("stored %+v", rec)
	}
	if rec.Config.MinSlicesPerTask < 5000 {
		t.Errorf("config %+v would merge the 10,000 slices of two tasks", rec.Config)
	}
}

func TestLogDir(t *testing.T) {
	given := filepath.Join(t.TempDir(), "a", "b")
	dir, cleanup, err := LogDir("x", given)
	if err != nil || dir != given {
		t.Fatalf("LogDir with a directory: %q, %v", dir, err)
	}
	cleanup()
	if _, err := os.Stat(given); err != nil {
		t.Fatalf("a given directory was removed or not made: %v", err)
	}
	tmp, cleanup, err := LogDir("x", "")
	if err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the temporary directory %s outlived its cleanup: %v", tmp, err)
	}
}

func TestStartedAddrs(t *testing.T) {
	a, err := StartedAddrs(`{"time":"2026-01-01T00:00:00Z","level":"INFO","msg":"slicerd started","rpc_addr":"127.0.0.1:1","gossip_addr":"127.0.0.1:2"}`)
	if err != nil || a.RPC != "127.0.0.1:1" || a.Gossip != "127.0.0.1:2" {
		t.Fatalf("StartedAddrs = %+v, %v", a, err)
	}
	for _, line := range []string{`not json`, `{"msg":"slicerd started","rpc_addr":"127.0.0.1:1"}`} {
		if _, err := StartedAddrs(line); err == nil {
			t.Errorf("StartedAddrs(%q) accepted", line)
		}
	}
}
