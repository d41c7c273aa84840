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
)

// TestWatchSendsAnotherIncarnation: a subscriber that holds an assignment
// of another store incarnation, with a higher generation than the store
// has reached (it watched the store before it was recreated), gets the
// current assignment from the Distributor and the Backup at once, not
// after the store passes its generation.
func TestWatchSendsAnotherIncarnation(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	cur := watchJob(t, node.RPCAddr(), "kv", false).until(t, "the first assignment", hasTasks("t0"))
	inc := node.store.Incarnation()
	if inc == "" || cur.Incarnation != inc {
		t.Fatalf("the assignment carries incarnation %q, want the store's %q", cur.Incarnation, inc)
	}

	for _, backup := range []bool{false, true} {
		for _, known := range []assign.Version{
			{Incarnation: "an-older-store", Generation: cur.Generation + 100},
			{Incarnation: "", Generation: cur.Generation + 100},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			req := connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: known.Generation, KnownIncarnation: known.Incarnation})
			var stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse]
			var err error
			if backup {
				stream, err = slicerv1connect.NewBackupServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr())).WatchAssignment(ctx, req)
			} else {
				stream, err = slicerv1connect.NewDistributorServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr())).WatchAssignment(ctx, req)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !stream.Receive() {
				t.Fatalf("backup %v, known %+v: the stream ended without an assignment: %v", backup, known, stream.Err())
			}
			got := stream.Msg().GetAssignment()
			if got.GetIncarnation() != inc || got.GetGeneration() < cur.Generation {
				t.Fatalf("backup %v, known %+v: got generation %d of %q, want the current one of %q", backup, known, got.GetGeneration(), got.GetIncarnation(), inc)
			}
			stream.Close()
			cancel()
		}
	}
}
