package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestRestoredStoreContinuesAboveItsTasks restores a single-node
// slicerd's data file from a copy taken several generations before, with
// its tasks and a Clerk still running, as an operator recovering from a
// lost disk does. The restored store is the same incarnation at a lower
// generation, which the tasks and the Clerk ignore; the tasks' load
// reports say what they hold, and the Assigner continues above it, so
// the Clerk takes the store's assignment again and routes to the tasks
// that are live now.
func TestRestoredStoreContinuesAboveItsTasks(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "slicerd.db")
	args := []string{"--data-dir", dir, "--rpc-addr", testnet.FreeAddr(t), "--gossip-addr", testnet.FreeAddr(t)}
	node := startSlicerd(t, "node-1", args...)
	addr := node.rpcAddr // the same for every start: --rpc-addr is fixed
	c := runClerk(t, clerk.Config{Job: "kv", Resolver: func() ([]string, []string) { return []string{addr}, nil }})

	tasks := []*kvTask{startKV(t, "kv-0", node.gossipAddr)}
	testwait.Until(t, 30*time.Second, "an assignment over kv-0", func() bool {
		a := c.Assignment()
		return a != nil && len(a.Tasks) == 1
	})
	stop := func() {
		t.Helper()
		node.signal(syscall.SIGTERM)
		if code := node.wait(20 * time.Second); code != 0 {
			t.Fatalf("slicerd exited %d after SIGTERM", code)
		}
	}
	stop()
	backup := filepath.Join(t.TempDir(), "slicerd.db")
	copyFile(t, db, backup)
	node = startSlicerd(t, "node-1", args...)

	// More generations after the copy: two more tasks, one at a time.
	for i := 1; i <= 2; i++ {
		tasks = append(tasks, startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr))
		n := i + 1
		testwait.Until(t, 30*time.Second, fmt.Sprintf("an assignment over %d tasks", n), func() bool {
			a := c.Assignment()
			return a != nil && len(a.Tasks) == n
		})
	}
	held := c.Assignment()

	// The disk is lost; the copy comes back. The tasks and the Clerk
	// keep running through it.
	stop()
	copyFile(t, backup, db)
	node = startSlicerd(t, "node-1", args...)

	testwait.Until(t, 60*time.Second, "the Clerk past the generation it held before the restore", func() bool {
		a := c.Assignment()
		return a.Incarnation == held.Incarnation && a.Generation > held.Generation
	})
	a := c.Assignment()
	if len(a.Tasks) != len(tasks) {
		t.Fatalf("after the restore the Clerk holds generation %d over %d tasks, want all %d live ones", a.Generation, len(a.Tasks), len(tasks))
	}
	code, out := runSlicerd(t, "job", "history", "--addr", node.rpcAddr, "kv")
	if code != 0 {
		t.Fatalf("job history: exit %d: %s", code, out)
	}
	t.Logf("the Clerk held generation %d before the restore and %d after it; history:\n%s", held.Generation, a.Generation, out)
	if !strings.Contains(out, "renumber") {
		t.Errorf("the job's history records no renumbering:\n%s", out)
	}
}
