package assigner

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/storage"
)

// orderedStore is a real store whose Load runs afterLoad (once) after
// reading, to put another operation between a read and its use.
type orderedStore struct {
	storage.Store
	afterLoad func()
}

func (s *orderedStore) Load(ctx context.Context, job string) (storage.Record, error) {
	rec, err := s.Store.Load(ctx, job)
	if f := s.afterLoad; f != nil {
		s.afterLoad = nil
		f()
	}
	return rec, err
}

// soloAssigner is an Assigner, not running, alone in gossip with store.
func soloAssigner(t *testing.T, store storage.Store) *Assigner {
	t.Helper()
	gcfg := gossip.TestConfig("assigner-1")
	gcfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1"}
	node, err := gossip.Start(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown() })
	return testAssigner(t, testConfig(t, "assigner-1"), store, node, make(chan struct{}))
}

// A refresh that read the stored record before SetJobConfig stored a new
// configuration must not put the older configuration back afterwards: the
// next decision would run on it.
func TestRefreshKeepsConfigSetMeanwhile(t *testing.T) {
	ctx := context.Background()
	bolt := testStore(t)
	store := &orderedStore{Store: bolt}
	old := assign.DefaultConfig()
	if err := store.SetConfig(ctx, "kv", old); err != nil {
		t.Fatal(err)
	}
	a := soloAssigner(t, store)
	j, err := a.job(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}

	next := old
	next.MinRedundancy, next.MaxRedundancy = 2, 3
	store.afterLoad = func() {
		req := connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: api.ConfigToProto(next)})
		if _, err := a.SetJobConfig(ctx, req); err != nil {
			t.Errorf("SetJobConfig: %v", err)
		}
	}
	if err := a.refresh(ctx, "kv"); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	got := j.cfg
	a.mu.Unlock()
	if !got.Equal(next) {
		t.Errorf("after a refresh that read before SetJobConfig, the Assigner decides with %+v, want the configuration set: %+v", got, next)
	}
}
