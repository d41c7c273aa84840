package roles

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage"
)

// loadingStore is a real store that counts its Load calls.
type loadingStore struct {
	storage.Store
	loads atomic.Int64
}

func (s *loadingStore) Load(ctx context.Context, job string) (storage.Record, error) {
	s.loads.Add(1)
	return s.Store.Load(ctx, job)
}

// commitGen commits generation gen of job kv over gen-1.
func commitGen(t *testing.T, store storage.Store, gen uint64) {
	t.Helper()
	a, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.Generation = gen
	prev := gen - 1
	if gen == 1 {
		prev = 0
	}
	if err := store.Commit(context.Background(), "kv", prev, a); err != nil {
		t.Fatal(err)
	}
}

// Many Backup watchers of a job share one store poller: one read per tick,
// a new generation reaches them all, a known version gets nothing older,
// and the poller stops with its last watcher.
func TestBackupWatchersShareOnePoller(t *testing.T) {
	bolt, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := &loadingStore{Store: bolt}
	commitGen(t, bolt, 1)
	const tick = 100 * time.Millisecond
	cfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	cfg.BackupPollInterval = tick
	cfg.OpenStore = func(bool) (storage.Store, error) { return store, nil }
	node := startAgent(t, cfg)
	client := slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	var (
		mu   sync.Mutex
		gens = map[int]uint64{}
		wg   sync.WaitGroup
	)
	wctx, stopWatching := context.WithCancel(ctx)
	open := func(i int, known uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The stream's headers arrive with its first message.
			s, err := client.WatchAssignment(wctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: known, KnownIncarnation: bolt.Incarnation()}))
			if err != nil {
				if wctx.Err() == nil {
					t.Errorf("watcher %d: %v", i, err)
				}
				return
			}
			defer s.Close()
			for s.Receive() {
				mu.Lock()
				if g := s.Msg().GetAssignment().GetGeneration(); g <= gens[i] && gens[i] != 0 {
					t.Errorf("watcher %d got generation %d after %d", i, g, gens[i])
				}
				gens[i] = s.Msg().GetAssignment().GetGeneration()
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		open(i, 0)
	}
	all := func(gen uint64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if gens[i] != gen {
					return false
				}
			}
			return true
		}
	}
	testwait.For(t, "every watcher to get generation 1", all(1))
	if c := node.backup.Pollers(); c != 1 {
		t.Fatalf("%d pollers for one job, want 1", c)
	}
	before := store.loads.Load()
	time.Sleep(10 * tick)
	if reads := store.loads.Load() - before; reads > 15 {
		t.Fatalf("%d watchers caused %d store reads in 10 ticks, want about 10", n, reads)
	}

	// A watcher that knows generation 2 gets nothing older.
	open(n, 2)
	commitGen(t, bolt, 2)
	testwait.For(t, "every watcher to get generation 2", all(2))
	time.Sleep(3 * tick)
	mu.Lock()
	if g := gens[n]; g != 0 {
		t.Fatalf("a watcher that knows generation 2 got generation %d", g)
	}
	mu.Unlock()
	commitGen(t, bolt, 3)
	testwait.For(t, "the watcher that knew generation 2 to get 3", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return gens[n] == 3
	})

	stopWatching()
	wg.Wait()
	testwait.For(t, "the poller to stop with its last watcher", func() bool { return node.backup.Pollers() == 0 })
	done := make(chan struct{})
	go func() { node.backup.WaitPollers(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the poller goroutine still runs after its last watcher left")
	}
}

// Stopping the agent ends a Backup stream with UNAVAILABLE "shutting down"
// and stops its poller before Run returns.
func TestBackupWatchStopsWithAgent(t *testing.T) {
	bolt, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commitGen(t, bolt, 1)
	cfg := testConfig(t, "backup-1", "", gossip.RoleBackup)
	cfg.BackupPollInterval = 100 * time.Millisecond
	cfg.OpenStore = func(bool) (storage.Store, error) { return bolt, nil }
	node := startAgent(t, cfg)
	client := slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatalf("no first assignment: %v", s.Err())
	}
	node.stop(t)
	for s.Receive() {
	}
	if code := connect.CodeOf(s.Err()); code != connect.CodeUnavailable {
		t.Fatalf("the stream ended with %v (%v), want unavailable", code, s.Err())
	}
	if c := node.backup.Pollers(); c != 0 {
		t.Fatalf("%d pollers after Run returned", c)
	}
}
