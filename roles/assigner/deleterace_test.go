package assigner

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/storage"
)

// commitHookBolt is the real bbolt store with a hook run just before a
// fenced commit reaches it (every other method is the store's own).
type commitHookBolt struct {
	*storage.Bolt
	beforeCommit func()
}

func (s *commitHookBolt) CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	if f := s.beforeCommit; f != nil {
		s.beforeCommit = nil
		f()
	}
	return s.Bolt.CommitRecorded(ctx, job, epoch, prevGen, next, e)
}

// A job deleted (`job delete`) while its Assigner's decision, taken when
// the job's task was alive, is on its way to the store stays deleted: the
// decision finds the job forgotten and writes nothing. (Written, it would
// be the job's first assignment, which a commit over generation 0 makes
// whether or not the job's bucket is there, and the bbolt fence compares
// the stored epoch only, which releasing the lease does not change: the
// job would live on with the default configuration, routing keys to a
// task that is gone.)
func TestDeleteDuringAFirstDecisionLeavesNoJob(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bolt, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	store := &commitHookBolt{Bolt: bolt}
	leases, err := lease.NewEmbedded(ctx, bolt, lease.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leases.Close() })

	gcfg := gossip.TestConfig("assigner-1")
	gcfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1"}
	node, err := gossip.Start(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	task := taskMember(t, "kv", "t0", node.GossipAddr())

	a := New(testConfig(t, "assigner-1"), store, leases, node, make(chan struct{}))
	if _, err := a.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, MoveChurn: 0.07},
	})); err != nil {
		t.Fatal(err)
	}
	lead(t, a, "kv")
	testwait.For(t, "gossip to see the task", func() bool { return len(a.tasksOf("kv", true)) == 1 })

	var deleted error
	done := make(chan struct{})
	store.beforeCommit = func() {
		// The task stops, gossip sees it leave, and the operator
		// deletes the job, as operations.md says to.
		if err := task.Leave(ctx); err != nil {
			t.Error(err)
		}
		task.Shutdown()
		testwait.For(t, "gossip to see the task gone", func() bool { return len(jobTasks(node.Peers(), "kv", true)) == 0 })
		// The deletion runs beside the decision: it may wait for the
		// commit, not the other way round.
		go func() {
			defer close(done)
			_, deleted = a.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"}))
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	if err := a.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Logf("reconcile: %v", err)
	}
	<-done
	if deleted != nil {
		t.Fatalf("DeleteJob: %v", deleted)
	}
	rec, err := bolt.Load(ctx, "kv")
	if !errors.Is(err, storage.ErrNotFound) {
		gen := uint64(0)
		if rec.Current != nil {
			gen = rec.Current.Generation
		}
		t.Errorf("after DeleteJob succeeded the store still holds job kv: generation %d, tasks %v, configured %v (move churn %g); err %v",
			gen, taskNames(rec.Current), rec.Configured, rec.Config.MoveChurn, err)
	}
	if _, err := a.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob of the deleted job = %v, want NOT_FOUND", err)
	}
}
