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
	v.register(task, nil, "spiffe://slicerd/task/kv/kv-0")
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

// A holder of the gossip key can forge a registered task member's gossip
// state from its own gossip address (new tags, the highest incarnation).
// The view keeps the task as its registration describes it: the same job
// and task at the registered serving address, never the forged one, and
// the forgery is counted. The real task, registering again, is never
// locked out of its name.
func TestForgedTaskClaimsAreIgnored(t *testing.T) {
	v := newVerifier(nil, "a1", testLogger(t), func() {})
	name := gossip.TaskMemberName("kv", "kv-1")
	task := gossip.Peer{Name: name, Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "kv-1",
		GossipAddr: "127.0.0.1:7001", RPCAddr: "127.0.0.1:9001", Status: gossip.StatusAlive}
	v.register(task, &gossip.TaskAttributes{Capacity: 2}, "spiffe://slicerd/task/kv/kv-1")
	task.Capacity = 2
	if got := v.filter([]gossip.Peer{task}); len(got) != 1 || got[0].RPCAddr != task.RPCAddr || v.ForgedClaims() != 0 {
		t.Fatalf("view of the registered task = %+v (forged claims %d); want it at %s, nothing forged", got, v.ForgedClaims(), task.RPCAddr)
	}
	for _, forge := range []struct {
		what string
		edit func(*gossip.Peer)
	}{
		{"serving address", func(p *gossip.Peer) { p.RPCAddr = "127.0.0.1:6666" }},
		{"job", func(p *gossip.Peer) { p.Job = "web" }},
		{"task", func(p *gossip.Peer) { p.Task = "kv-9" }},
		{"roles", func(p *gossip.Peer) { p.Roles = []gossip.Role{gossip.RoleAssigner} }},
		{"capacity", func(p *gossip.Peer) { p.Capacity = 100 }},
		{"memory limit", func(p *gossip.Peer) { p.MemoryLimit = 1 }},
	} {
		forged := task
		forge.edit(&forged)
		before := v.ForgedClaims()
		got := v.filter([]gossip.Peer{forged})
		if len(got) != 1 || got[0].RPCAddr != task.RPCAddr || got[0].Job != "kv" || got[0].Task != "kv-1" ||
			!got[0].Has(gossip.RoleTask) || got[0].Has(gossip.RoleAssigner) || got[0].Capacity != 2 || got[0].MemoryLimit != 0 {
			t.Errorf("forged %s: view = %+v; want task kv-1 of kv at %s as registered", forge.what, got, task.RPCAddr)
		}
		if v.ForgedClaims() != before+1 {
			t.Errorf("forged %s: forged claims went from %d to %d, want one more", forge.what, before, v.ForgedClaims())
		}
	}
	// A forged draining flag is ignored too (not counted: the real one
	// changes in gossip and in the registration at different moments).
	drained := task
	drained.Draining = true
	if got := v.filter([]gossip.Peer{drained}); len(got) != 1 || got[0].Draining {
		t.Errorf("forged draining: view = %+v; want the task not draining, as registered", got)
	}
	// The task moves its serving address and registers again: the view
	// follows the registration, not the tag.
	moved := task
	moved.RPCAddr = "127.0.0.1:9002"
	v.register(moved, &gossip.TaskAttributes{Capacity: 2}, "spiffe://slicerd/task/kv/kv-1")
	stale := task // gossip still carries the forged or old tag
	stale.RPCAddr = "127.0.0.1:6666"
	if got := v.filter([]gossip.Peer{stale}); len(got) != 1 || got[0].RPCAddr != moved.RPCAddr {
		t.Errorf("after registering again at %s the view = %+v", moved.RPCAddr, got)
	}
}
