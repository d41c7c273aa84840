package assigner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

// Two live members claiming one task name: the one with the lowest gossip
// name is kept, whatever order membership lists them in.
func TestJobTasksDuplicateNamesDeterministic(t *testing.T) {
	var peers []gossip.Peer
	var want []assign.Task
	for i := range 40 {
		task := fmt.Sprintf("t%02d", i)
		for _, member := range []string{"a", "b", "c"} {
			peers = append(peers, gossip.Peer{
				Name: member + "-" + task, Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: task,
				RPCAddr: member + ":1", Status: gossip.StatusAlive,
			})
		}
		want = append(want, assign.Task{Name: task, Addr: "a:1"})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		rng.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
		if got := jobTasks(peers, "kv", true); !slices.Equal(got, want) {
			t.Fatalf("jobTasks kept %v, want the lowest-named member of each task: %v", got, want)
		}
	}
}
