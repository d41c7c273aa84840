package gossip

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
)

// A node started again with its rejoin file, at the address it had, rejoins
// the members it knew at once: a task whose only seed it is need not wait
// for a push-pull exchange to be known again.
func TestRejoinAfterRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gossip.members")
	cfg := TestConfig("node")
	cfg.PushPullInterval = time.Hour // only the rejoin can tell the node about the task
	cfg.RejoinFile = file
	cfg.Self = Peer{Roles: []Role{RoleAssigner}, RPCAddr: "127.0.0.1:1"}
	cfg.Logger = testlog.Logger(t)
	node, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tcfg := TestConfig(TaskMemberName("kv", "kv-0"))
	tcfg.PushPullInterval = time.Hour
	tcfg.Self = Peer{Roles: []Role{RoleTask}, Job: "kv", Task: "kv-0", RPCAddr: "127.0.0.1:2"}
	task, err := Start(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { task.Shutdown() })
	if _, err := task.Join([]string{node.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	knows := func(n *Node) func() bool {
		return func() bool {
			for _, p := range n.Peers() {
				if p.Name == tcfg.NodeName && p.Status == StatusAlive {
					return true
				}
			}
			return false
		}
	}
	testwait.For(t, "the node to see the task", knows(node))
	testwait.For(t, "the node to record the task", func() bool {
		addrs, err := readRejoinFile(file)
		return err == nil && len(addrs) == 1 && addrs[0] == task.GossipAddr()
	})
	addr := node.GossipAddr()
	node.Shutdown() // no leave: a crash, as far as gossip can tell
	cfg.BindAddr = addr
	node, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown() })
	testwait.For(t, "the restarted node to know the task again", knows(node))
}

// The sample keeps the members still live, so a change elsewhere leaves
// the file as it is.
func TestNextSampleKeepsLiveMembers(t *testing.T) {
	live := map[string]bool{}
	for i := range 40 {
		live[fmt.Sprintf("127.0.0.1:%d", 7000+i)] = true
	}
	first := nextSample(nil, maps.Clone(live))
	if len(first) != rejoinSample {
		t.Fatalf("sample of %d live members: %d addresses, want %d", len(live), len(first), rejoinSample)
	}
	var outside string
	for a := range live {
		if !slices.Contains(first, a) {
			outside = a
			break
		}
	}
	delete(live, outside) // a member outside the sample leaves
	if again := nextSample(first, maps.Clone(live)); !slices.Equal(again, first) {
		t.Errorf("a member outside the sample left, and the sample changed: %v → %v", first, again)
	}
	delete(live, first[0]) // one inside leaves: replaced, the rest kept
	again := nextSample(first, maps.Clone(live))
	if len(again) != rejoinSample || slices.Contains(again, first[0]) {
		t.Errorf("after %s left: %v", first[0], again)
	}
	kept := 0
	for _, a := range first[1:] {
		if slices.Contains(again, a) {
			kept++
		}
	}
	if kept != rejoinSample-1 {
		t.Errorf("kept %d of the %d members still live", kept, rejoinSample-1)
	}
}
