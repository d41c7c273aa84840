package slicelet_test

import (
	"slices"
	"testing"

	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/subset"
)

// TestSliceletStreamsFromItsSubset checks that a task numbered 4 streams
// from the Distributor Rocksteadier picks first for frontend 4 among the
// live Distributors gossip reports, sorted by RPC address.
func TestSliceletStreamsFromItsSubset(t *testing.T) {
	var nodes []*gossip.Node
	srvs := map[string]*clerktest.Server{}
	var rpc []string
	a := clerktest.Uniform(job, 1, tasks, 4)
	for _, name := range []string{"slicerd-1", "slicerd-2", "slicerd-3", "slicerd-4"} {
		n, srv := slicerdNode(t, name, gossip.RoleDistributor)
		srv.Publish(a)
		if len(nodes) > 0 {
			if _, err := n.Join([]string{nodes[0].GossipAddr()}); err != nil {
				t.Fatal(err)
			}
		}
		nodes = append(nodes, n)
		srvs[srv.Addr()] = srv
		rpc = append(rpc, srv.Addr())
	}
	slices.Sort(rpc)
	want := rpc[subset.Rocksteadier(4, len(rpc), 2)[0]]

	cfg := slicelet.DefaultConfig()
	cfg.Job, cfg.Task, cfg.Addr = job, "kv-4", "127.0.0.1:9000"
	cfg.Join = []string{nodes[0].GossipAddr()}
	cfg.Gossip = gossip.TestConfig("replaced")
	cfg.SubsetSize = 2
	sl, err := slicelet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, sl)
	// The Distributors joined each other before the task joined one of
	// them, so the join's state exchange tells the task about all four,
	// and its first round already knows its subset.
	<-r.sl.Joined()
	testwait.For(t, "generation 1", func() bool { return r.sl.Generation() == 1 })
	testwait.For(t, "a stream on the first choice only", func() bool {
		for addr, srv := range srvs {
			want1 := 0
			if addr == want {
				want1 = 1
			}
			if srv.OpenStreams() != want1 {
				return false
			}
		}
		return true
	})
}
