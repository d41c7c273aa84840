package roles

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

// firstWithin opens a watch of job at addr and returns the first
// assignment it is sent within d, or nil and the stream's error. (The
// call itself waits for the server's first message: connect-go sends a
// stream's headers with it.)
func firstWithin(t *testing.T, addr, job string, known assign.Version, d time.Duration) (*assign.Assignment, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	stream, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr)).WatchAssignment(ctx,
		connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job, KnownGeneration: known.Generation, KnownIncarnation: known.Incarnation}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	if !stream.Receive() {
		return nil, stream.Err()
	}
	return api.FromProto(stream.Msg().GetAssignment())
}

// Two relays configured as each other's upstream (one list of upstreams
// pushed to every Distributor, the upstreams too) serve the job: a relay
// refuses another relay's stream, so each takes its next source, the
// job's Assigner. Served, each would wait on the other for ever, its
// stream neither failing nor bringing anything.
func TestRelayCycleReachesTheAssigner(t *testing.T) {
	assigner := startAgent(t, testConfig(t, "assigner-1", t.TempDir(), gossip.RoleAssigner, gossip.RoleDistributor))
	taskMember(t, "kv", "t0", assigner.GossipAddr())
	seesTask(t, assigner, "kv", "t0")
	watchJob(t, assigner.RPCAddr(), "kv", false).until(t, "the assignment at the assigner", hasTasks("t0"))

	addrB := testnet.FreeAddr(t)
	acfg := testConfig(t, "relay-a", "", gossip.RoleDistributor)
	acfg.Gossip.Join = []string{assigner.GossipAddr()}
	acfg.DistributorUpstreams = []string{addrB}
	a := startAgent(t, acfg)
	bcfg := testConfig(t, "relay-b", "", gossip.RoleDistributor)
	bcfg.RPCAddr = addrB
	bcfg.Gossip.Join = []string{assigner.GossipAddr()}
	bcfg.DistributorUpstreams = []string{a.RPCAddr()}
	b := startAgent(t, bcfg)
	for _, r := range []*running{a, b} {
		testwait.For(t, "the relays to see the job's assigner", func() bool { _, ok := r.distributor.Assigner("kv"); return ok })
	}

	got, err := firstWithin(t, a.RPCAddr(), "kv", assign.Version{}, 10*time.Second)
	t.Logf("relay-a pulls kv from %q; relay-b from %q", a.distributor.PullsFrom("kv"), b.distributor.PullsFrom("kv"))
	if got == nil {
		t.Fatalf("a subscriber of relay-a got no assignment of kv in 10s (stream error: %v), though the Assigner serves it", err)
	}
}

// A relay whose upstream Distributor is up but cannot pull the job from
// any Assigner (here: the only Assigner in its gossip advertises an RPC
// address that does not answer, as a firewall between the two would do)
// moves on to its next source, the job's Assigner, which it reaches: the
// upstream, holding nothing, tells the streams waiting on it that no
// Assigner answers, rather than keep them open with nothing to send.
func TestRelayLeavesAnUpstreamThatReachesNoAssigner(t *testing.T) {
	assigner := startAgent(t, testConfig(t, "assigner-1", t.TempDir(), gossip.RoleAssigner, gossip.RoleDistributor))
	taskMember(t, "kv", "t0", assigner.GossipAddr())
	seesTask(t, assigner, "kv", "t0")
	watchJob(t, assigner.RPCAddr(), "kv", false).until(t, "the assignment at the assigner", hasTasks("t0"))

	// The upstream's view: an Assigner whose RPC port it cannot reach.
	gcfg := testConfig(t, "unreachable-assigner", t.TempDir(), gossip.RoleAssigner)
	gcfg.AdvertiseRPCAddr = testnet.FreeAddr(t)
	ghost := startAgent(t, gcfg)
	dcfg := testConfig(t, "upstream-d1", "", gossip.RoleDistributor)
	dcfg.Gossip.Join = []string{ghost.GossipAddr()}
	d1 := startAgent(t, dcfg)
	testwait.For(t, "the upstream to see an assigner", func() bool { _, ok := d1.distributor.Assigner("kv"); return ok })

	rcfg := testConfig(t, "relay-r", "", gossip.RoleDistributor)
	rcfg.Gossip.Join = []string{assigner.GossipAddr()}
	rcfg.DistributorUpstreams = []string{d1.RPCAddr()}
	r := startAgent(t, rcfg)
	testwait.For(t, "the relay to see the job's assigner", func() bool { _, ok := r.distributor.Assigner("kv"); return ok })

	got, err := firstWithin(t, r.RPCAddr(), "kv", assign.Version{}, 10*time.Second)
	t.Logf("relay-r pulls kv from %q (upstream-d1 is %s)", r.distributor.PullsFrom("kv"), d1.RPCAddr())
	if got == nil {
		t.Fatalf("a subscriber of relay-r got no assignment of kv in 10s (stream error: %v), though the relay reaches the job's Assigner", err)
	}
}
