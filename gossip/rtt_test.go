package gossip

import (
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
)

// Vivaldi coordinates learn injected latency: with two Assigners, one near
// a task and one far from it, every member's estimates come to rank them
// the same way, the near one nearer by more than lease.DefaultPreference's
// hysteresis (20% and 1 ms), so that it is preferred everywhere.
func TestRTTFollowsInjectedLatency(t *testing.T) {
	var mu sync.Mutex
	region := map[string]string{} // gossip address → region
	delay := func(from, to string) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if region[from] == region[to] {
			return 500 * time.Microsecond
		}
		return 15 * time.Millisecond
	}
	place := func(n *Node, r string) {
		mu.Lock()
		region[n.GossipAddr()] = r
		mu.Unlock()
	}
	nearA := delayedNode(t, "near", Peer{Roles: []Role{RoleAssigner}, RPCAddr: "127.0.0.1:7001"}, delay)
	farA := delayedNode(t, "far", Peer{Roles: []Role{RoleAssigner}, RPCAddr: "127.0.0.1:7002"}, delay)
	task := delayedNode(t, "kv/t0", Peer{Roles: []Role{RoleTask}, Job: "kv", Task: "t0", RPCAddr: "127.0.0.1:9000"}, delay)
	place(nearA, "east")
	place(task, "east")
	place(farA, "west")
	join(t, farA, nearA)
	join(t, task, nearA)

	if _, ok := nearA.RTT("near", "nobody"); ok {
		t.Error("an RTT estimate for an unknown member")
	}
	for _, n := range []*Node{nearA, farA, task} {
		testwait.For(t, n.Self().Name+" to estimate the near Assigner nearer by the margin", func() bool {
			dn, ok1 := n.RTT("near", "kv/t0")
			df, ok2 := n.RTT("far", "kv/t0")
			return ok1 && ok2 && float64(dn) < float64(df)*(1-0.2) && df-dn > time.Millisecond
		})
		dn, _ := n.RTT("near", "kv/t0")
		df, _ := n.RTT("far", "kv/t0")
		t.Logf("%s estimates near–task %v, far–task %v (injected round trips 1ms and 30ms)", n.Self().Name, dn, df)
	}
}
