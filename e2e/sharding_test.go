package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestTaskFailureMovesKeys runs an assigner, a distributor and three example
// tasks as separate processes, SIGKILLs one task, and checks that every key
// maps to a live task once gossip has detected the failure.
func TestTaskFailureMovesKeys(t *testing.T) {
	assigner := startSlicerd(t, "assigner-1", "--role", "assigner", "--data-dir", t.TempDir())
	distributor := startSlicerd(t, "distributor-1", "--role", "distributor", "--join", assigner.gossipAddr)

	tasks := map[string]*kvTask{}
	for i := range 3 {
		name := fmt.Sprintf("kv-%d", i)
		tasks[name] = startKV(t, name, assigner.gossipAddr)
	}

	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{distributor.rpcAddr}})

	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	// allOn reports whether every key routes to a task in live, and all of
	// live are used.
	allOn := func(live map[string]bool) bool {
		a := c.Assignment()
		if a == nil {
			return false
		}
		used := map[string]bool{}
		for _, k := range keys {
			names := a.Slices[a.Find(assign.HashString(k))].Tasks
			for _, n := range names {
				if !live[n] {
					return false
				}
				used[n] = true
			}
			if addrs := c.AssignedTasksString(k); len(addrs) != len(names) {
				return false
			}
		}
		return len(used) == len(live)
	}

	live := map[string]bool{"kv-0": true, "kv-1": true, "kv-2": true}
	testwait.Until(t, 30*time.Second, "an assignment over all three tasks", func() bool { return allOn(live) })
	before := c.Assignment()
	for _, task := range before.Tasks {
		if task.Addr != tasks[task.Name].addr {
			t.Errorf("task %s has address %s in the assignment, but serves on %s", task.Name, task.Addr, tasks[task.Name].addr)
		}
	}

	tasks["kv-1"].signal(syscall.SIGKILL)
	tasks["kv-1"].wait(10 * time.Second)
	delete(live, "kv-1")
	took := testwait.Until(t, 30*time.Second, "every key on a live task after kv-1 was killed", func() bool { return allOn(live) })
	after := c.Assignment()
	t.Logf("keys left the killed task %v after SIGKILL (generation %d -> %d)", took.Round(time.Millisecond), before.Generation, after.Generation)

	if after.Generation <= before.Generation {
		t.Errorf("generation went from %d to %d", before.Generation, after.Generation)
	}
	// Only the dead task's keys moved: every slice point of the old
	// assignment that kv-1 did not serve keeps its tasks.
	for _, s := range before.Slices {
		if slices.Contains(s.Tasks, "kv-1") {
			continue
		}
		for _, k := range []assign.SliceKey{s.Start, s.End - 1, s.Start + s.Width()/2} {
			got := after.Slices[after.Find(k)].Tasks
			if !slices.Equal(got, s.Tasks) {
				t.Errorf("key %#x moved from %v to %v though its task is alive", k, s.Tasks, got)
			}
		}
	}
	if churn := assign.Churn(before, after); churn > 0.34+1e-9 {
		t.Errorf("churn %.3f is more than the killed task's share", churn)
	}

	// The survivors and slicerd shut down cleanly on SIGTERM.
	for _, name := range []string{"kv-0", "kv-2"} {
		tasks[name].signal(syscall.SIGTERM)
		if code := tasks[name].wait(20 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", name, code)
		}
	}
	for _, n := range []*slicerdNode{distributor, assigner} {
		n.signal(syscall.SIGTERM)
		if code := n.wait(20 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", n.name, code)
		}
		n.waitLine(time.Second, `"msg":"left gossip"`)
	}
}
