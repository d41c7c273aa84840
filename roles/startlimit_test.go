package roles

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/testwait"
)

// Watches waiting for a job's first assignment say so to the start
// gate, so they hold no place among the starting RPCs
// (--max-starting-rpcs): more of them than there are places all start
// and give their places back, and the node still answers.
func TestWatchesWaitingForAnAssignmentHoldNoPlace(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxStartingRPCs = 4
	node := startAgent(t, cfg)
	if got := node.gate.Limit(); got != 4 {
		t.Fatalf("the node starts %d RPCs at once; want --max-starting-rpcs, 4", got)
	}
	n := 4 + 16
	hc := api.NewH2CClient()
	t.Cleanup(hc.CloseIdleConnections)
	client := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr()))
	jobs := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(node.RPCAddr()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A configured job no task has joined: it has no assignment.
	if _, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: "unassigned", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1},
	})); err != nil {
		t.Fatal(err)
	}
	for range n {
		go func() {
			stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "unassigned"}))
			if err == nil {
				for stream.Receive() {
				}
				if stream.Err() != nil && ctx.Err() == nil {
					t.Errorf("watch: %v", stream.Err())
				}
				stream.Close()
			}
		}()
	}
	l, err := node.distributor.Latest("unassigned")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "every watch to wait for the job's first assignment", func() bool { return l.Subscribers() == n })
	// A watch subscribes just before it says it waits: every place comes
	// back. A watch that did not say so would hold its place until the
	// gate parks it, 100 ms on; a busy machine may make a few that late,
	// but not all of them.
	testwait.For(t, "every watch to give its place back", func() bool { return node.gate.Starting() == 0 })
	if p := node.gate.Parked(); p >= uint64(n) {
		t.Errorf("%d of %d watches were parked: they held their places instead of saying they wait", p, n)
	}
	if _, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "unassigned"})); err != nil {
		t.Errorf("GetJob while the watches wait: %v", err)
	}
}
