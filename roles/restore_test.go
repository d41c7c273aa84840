package roles

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// TestEtcdStoreRestoredUnderRunningAssigner: an etcd store restored from
// an older copy while the job's Assigner keeps running (etcd is restored
// in place; slicerd is not restarted) holds the job below the generation
// the Assigner, its Distributors and their subscribers hold, in the same
// incarnation. The Assigner's next decision must still be committed,
// above the generation they hold, and reach them: a task that joins after
// the restore is given keys.
func TestEtcdStoreRestoredUnderRunningAssigner(t *testing.T) {
	srv := etcdtest.Start(t)
	cfg := testConfig(t, "node-1", "")
	cfg.Store = "etcd://" + srv.Endpoint() + "/restore-test"
	node := startAgent(t, cfg)
	cli := srv.Client(t, nil, "", "")
	jobKeys := "/restore-test/jobs/kv/"

	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	dist := watchJob(t, node.RPCAddr(), "kv", false)
	first := dist.until(t, "t0", hasTasks("t0"))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	backup, err := cli.Get(ctx, jobKeys, clientv3.WithPrefix())
	if err != nil || len(backup.Kvs) == 0 {
		t.Fatalf("copying the job's keys: %d keys, %v", len(backup.Kvs), err)
	}

	taskMember(t, "kv", "t1", node.GossipAddr())
	held := dist.until(t, "t0 and t1", hasTasks("t0", "t1"))
	if held.Generation <= first.Generation {
		t.Fatalf("generation %d after %d", held.Generation, first.Generation)
	}

	// The restore: the job's keys go back to the copy, in one
	// transaction, as the job is in a restored snapshot.
	now, err := cli.Get(ctx, jobKeys, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var ops []clientv3.Op
	copied := map[string]bool{}
	for _, kv := range backup.Kvs {
		copied[string(kv.Key)] = true
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
	}
	for _, kv := range now.Kvs {
		if !copied[string(kv.Key)] {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}

	taskMember(t, "kv", "t2", node.GossipAddr())
	next := dist.until(t, "t2 given keys after the restore", func(a *assign.Assignment) bool {
		return hasTasks("t0", "t1", "t2")(a) && a.Generation > held.Generation
	})
	if next.Incarnation != held.Incarnation {
		t.Errorf("incarnation %q after %q", next.Incarnation, held.Incarnation)
	}
}
