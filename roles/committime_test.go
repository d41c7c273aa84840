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
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/internal/metrics/metricstest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// watchAssigner streams job's assignments straight from an Assigner, as
// a Distributor does, with deltas.
func watchAssigner(t *testing.T, addr, job string) *rawWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hc := api.NewH2CClient()
	stream, err := slicerv1connect.NewAssignerServiceClient(hc, api.RPCURL(addr)).WatchAssignment(ctx,
		connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job, DeltaVersion: api.DeltaVersion}))
	return followRaw(t, hc, cancel, stream, err)
}

// last is the last of msgs.
func last(msgs []rawMsg) rawMsg { return msgs[len(msgs)-1] }

// TestCommitTimeTravelsToSubscribers: the Assigner stamps each generation
// it commits with its commit time, the Distributor passes the stamp on
// (in deltas too) and times commit → send from it; a generation read from
// the store, as after a restart, carries none.
func TestCommitTimeTravelsToSubscribers(t *testing.T) {
	acfg := testConfig(t, "assigner-1", t.TempDir(), gossip.RoleAssigner)
	assigner := startAgent(t, acfg)
	reg := metrics.NewRegistry()
	dcfg := testConfig(t, "distributor-1", "", gossip.RoleDistributor)
	dcfg.Gossip.Join = []string{assigner.GossipAddr()}
	dcfg.Registerer = reg
	distributor := startAgent(t, dcfg)
	taskMember(t, "kv", "t0", assigner.GossipAddr())
	seesTask(t, assigner, "kv", "t0")
	testwait.For(t, "distributor to see the assigner", func() bool {
		_, ok := distributor.distributor.Assigner("kv")
		return ok
	})

	fromAssigner := watchAssigner(t, assigner.RPCAddr(), "kv")
	fromDist := watchRaw(t, distributor.RPCAddr(), "kv", false, true)
	fromAssigner.until(t, "t0's assignment from the assigner", hasTasks("t0"))
	fromDist.until(t, "t0's assignment from the distributor", hasTasks("t0"))

	before := time.Now()
	taskMember(t, "kv", "t1", assigner.GossipAddr())
	got := last(fromAssigner.until(t, "t1's generation from the assigner", hasTasks("t0", "t1")))
	am, a := got.msg, got.a
	got = last(fromDist.until(t, "t1's generation from the distributor", hasTasks("t0", "t1")))
	dm, d := got.msg, got.a
	if d.Generation != a.Generation {
		t.Fatalf("first generation with t1: %d from the distributor, %d from the assigner", d.Generation, a.Generation)
	}
	committed := am.GetCommittedUnixNano()
	if committed < before.UnixNano() {
		t.Errorf("the assigner stamped generation %d committed at %d, before the task that caused it joined (%d)", a.Generation, committed, before.UnixNano())
	}
	if dm.GetCommittedUnixNano() != committed {
		t.Errorf("the distributor passed on commit time %d, the assigner sent %d", dm.GetCommittedUnixNano(), committed)
	}
	if dm.GetDelta() == nil {
		t.Errorf("the distributor sent the update as a full assignment; the test means to check a delta's commit time")
	}
	// The distributor's stream was open when the generation arrived: its
	// send was timed from the commit.
	testwait.For(t, "a commit-to-send delay", func() bool {
		v, _ := metricstest.Value(t, reg, "slicerd_distributor_commit_to_send_seconds")
		return v >= 1
	})

	// Restarted (with a long grace, so it commits nothing new), the
	// Assigner serves the stored generation, whose commit time it does
	// not know.
	assigner.stop(t)
	acfg.StartupGrace = time.Hour
	assigner = startAgent(t, acfg)
	got = last(watchAssigner(t, assigner.RPCAddr(), "kv").until(t, "the stored assignment", func(*assign.Assignment) bool { return true }))
	m, again := got.msg, got.a
	if again.Generation != a.Generation {
		t.Fatalf("after the restart the assigner serves generation %d, want the stored %d", again.Generation, a.Generation)
	}
	if n := m.GetCommittedUnixNano(); n != 0 {
		t.Errorf("a generation read from the store carries commit time %d, want 0 (unknown)", n)
	}
}
