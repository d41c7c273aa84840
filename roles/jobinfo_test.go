package roles

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
)

// TestJobInfoNamesPreferredAssigner: GetJob says which Assigner generates
// the job, so an operator can tell without reading logs.
func TestJobInfoNamesPreferredAssigner(t *testing.T) {
	a := startAgent(t, testConfig(t, "assigner-1", t.TempDir(), gossip.RoleAssigner, gossip.RoleDistributor))
	taskMember(t, "kv", "t0", a.GossipAddr())
	seesTask(t, a, "kv", "t0")
	watchJob(t, a.RPCAddr(), "kv", false).until(t, "an assignment", hasTasks("t0"))
	jobs := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(a.RPCAddr()))
	resp, err := jobs.GetJob(context.Background(), connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetJob().GetPreferredAssigner(); got != "assigner-1" {
		t.Errorf("GetJob preferred assigner = %q, want assigner-1", got)
	}
}
