package roles

import (
	"testing"

	"github.com/slicerd/slicerd/gossip"
)

func memberNames(peers []gossip.Peer) map[string]bool {
	names := map[string]bool{}
	for _, p := range peers {
		names[p.Name] = true
	}
	return names
}

// A task that gossip wrongly declared failed, and that refuted it from the
// same address, still counts: it must not wait for its next registration.
// The same name from another address does not.
func TestRegisteredTaskSurvivesFalseFailure(t *testing.T) {
	v := newVerifier(nil, "a1", testLogger(t), func() {})
	task := gossip.Peer{Name: "kv/kv-0", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "kv-0", GossipAddr: "127.0.0.1:7001", Status: gossip.StatusAlive}
	if memberNames(v.filter([]gossip.Peer{task}))[task.Name] {
		t.Fatal("an unregistered task is in the view")
	}
	v.register(task, "spiffe://slicerd/task/kv/kv-0")
	for _, status := range []gossip.Status{gossip.StatusAlive, gossip.StatusFailed, gossip.StatusAlive} {
		task.Status = status
		if !memberNames(v.filter([]gossip.Peer{task}))[task.Name] {
			t.Fatalf("the registered task left the view when gossip said %s", status)
		}
	}
	impostor := task
	impostor.GossipAddr = "127.0.0.1:7999"
	if memberNames(v.filter([]gossip.Peer{impostor}))[task.Name] {
		t.Fatal("the task's name from another address is in the view")
	}
	v.prune(nil)
	if memberNames(v.filter([]gossip.Peer{task}))[task.Name] {
		t.Fatal("a registration outlived gossip forgetting the member")
	}
}
