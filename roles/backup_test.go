package roles

import (
	"context"
	"sync"
	"testing"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage"
)

// listingStore is a real store that remembers the contexts Jobs was
// called with.
type listingStore struct {
	storage.Store
	mu   sync.Mutex
	ctxs []context.Context
}

func (s *listingStore) Jobs(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	s.ctxs = append(s.ctxs, ctx)
	s.mu.Unlock()
	return s.Store.Jobs(ctx)
}

func (s *listingStore) calls() []context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]context.Context(nil), s.ctxs...)
}

// New reads nothing from a Backup's store: the Backup lists the store's
// jobs under Run's context, which ends with Run.
func TestBackupReadsStoreUnderRunContext(t *testing.T) {
	bolt, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &listingStore{Store: bolt}
	cfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	cfg.OpenStore = func(bool) (storage.Store, error) { return store, nil }
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(store.calls()); n != 0 {
		t.Fatalf("New listed the store's jobs %d times; reads belong in Run, under its context", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	testwait.For(t, "the backup to list the store's jobs", func() bool { return len(store.calls()) > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := store.calls()[0].Err(); err == nil {
		t.Error("the backup listed the store's jobs under a context that outlives Run")
	}
}
