package e2e

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestClerkFollowsRecreatedStore runs slicerd (all roles, one node) with a
// data dir and a Clerk watching job kv through several generations, then
// stops slicerd and its tasks, deletes the data dir and starts slicerd
// again with a new task. The new store counts generations from 1 again,
// below what the Clerk holds; the Clerk must still take the new store's
// assignment (another incarnation) and route every key to the new task,
// not keep routing to the dead ones.
func TestClerkFollowsRecreatedStore(t *testing.T) {
	dir := t.TempDir()
	node := startSlicerd(t, "node-1", "--data-dir", dir)
	var rpcAddr atomic.Value
	rpcAddr.Store(node.rpcAddr)

	c := runClerk(t, clerk.Config{Job: "kv", Resolver: func() ([]string, []string) {
		return []string{rpcAddr.Load().(string)}, nil
	}})

	// One task at a time, so the job goes through several generations.
	var old []*kvTask
	for i := range 3 {
		old = append(old, startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr))
		n := i + 1
		testwait.Until(t, 30*time.Second, fmt.Sprintf("an assignment over %d tasks", n), func() bool {
			a := c.Assignment()
			return a != nil && len(a.Tasks) == n
		})
	}
	held := c.Assignment()
	if held.Generation < 3 || held.Incarnation == "" {
		t.Fatalf("the Clerk holds generation %d of incarnation %q; want at least 3, of a known incarnation", held.Generation, held.Incarnation)
	}

	// Recreate the store: stop slicerd and every task, delete the data dir.
	node.signal(syscall.SIGTERM)
	if code := node.wait(20 * time.Second); code != 0 {
		t.Fatalf("slicerd exited %d after SIGTERM", code)
	}
	for _, k := range old {
		k.signal(syscall.SIGKILL)
		k.wait(10 * time.Second)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	node = startSlicerd(t, "node-1", "--data-dir", dir)
	rpcAddr.Store(node.rpcAddr)
	fresh := startKV(t, "kv-new", node.gossipAddr)

	testwait.Until(t, 60*time.Second, "the Clerk on the recreated store's assignment", func() bool {
		a := c.Assignment()
		return a.Incarnation != held.Incarnation && len(a.Tasks) == 1 && a.Tasks[0].Name == "kv-new"
	})
	now := c.Assignment()
	if now.Generation >= held.Generation {
		t.Fatalf("the recreated store reached generation %d, not below the old %d: the test proves nothing", now.Generation, held.Generation)
	}
	t.Logf("the Clerk moved from generation %d of incarnation %s to generation %d of incarnation %s",
		held.Generation, held.Incarnation, now.Generation, now.Incarnation)
	for i := range 500 {
		k := fmt.Sprintf("user:%d", i)
		if addrs := c.AssignedTasksString(k); len(addrs) != 1 || addrs[0] != fresh.addr {
			t.Fatalf("key %s routes to %v, want the new task at %s", k, addrs, fresh.addr)
		}
		if names := now.Slices[now.Find(assign.HashString(k))].Tasks; len(names) != 1 || names[0] != "kv-new" {
			t.Fatalf("key %s is assigned to %v, want kv-new", k, names)
		}
	}
}
