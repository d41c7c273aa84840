package roles

import (
	"context"
	"testing"
	"time"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
)

// Changes may be called between New and Run: the subscription starts
// delivering once gossip has started.
func TestAgentChangesBeforeRun(t *testing.T) {
	a, err := New(context.Background(), testConfig(t, "assigner-1", t.TempDir(), gossip.RoleAssigner))
	if err != nil {
		t.Fatal(err)
	}
	changes, unsubscribe := a.Changes()
	defer unsubscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testwait.For(t, "gossip to start", func() bool { return a.GossipAddr() != "" })
	taskMember(t, "kv", "t0", a.GossipAddr())
	deadline := time.After(20 * time.Second)
	for {
		select {
		case <-changes:
		case <-deadline:
			t.Fatal("no membership change was delivered to a subscription made before Run")
		}
		for _, p := range a.Peers() {
			if p.Job == "kv" && p.Task == "t0" {
				return
			}
		}
	}
}
