package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// TestJobDeleteBinary deletes a job with the slicerd binary: refused while
// its task runs, done once the task has left, after which the job's watch
// ends, the job is gone from the list, and the audit line names the call.
func TestJobDeleteBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	kv := startKV(t, "kv-0", node.gossipAddr)
	watch := start(t, "job watch", bin.slicerd, "job", "watch", "--addr", node.rpcAddr, "kv")
	watch.waitLine(30*time.Second, "job kv generation ", "over 1 tasks")

	code, out := runSlicerd(t, "job", "delete", "--addr", node.rpcAddr, "kv")
	if code != 2 || !strings.Contains(out, "--yes") {
		t.Errorf("job delete without --yes: exit %d, output:\n%s\nwant exit 2 asking for --yes", code, out)
	}
	code, out = runSlicerd(t, "job", "delete", "--addr", node.rpcAddr, "--yes", "kv")
	if code != 1 || !strings.Contains(out, "job delete kv: job has live tasks: ") || !strings.Contains(out, "kv-0") {
		t.Errorf("job delete with a live task: exit %d, output:\n%s\nwant exit 1 naming kv-0", code, out)
	}

	kv.signal(syscall.SIGINT)
	if code := kv.wait(20 * time.Second); code != 0 {
		t.Errorf("kvserver exited %d after SIGINT", code)
	}
	testwait.For(t, "job delete to succeed once the task has left", func() bool {
		code, out = runSlicerd(t, "job", "delete", "--addr", node.rpcAddr, "--yes", "kv")
		if code != 0 && !strings.Contains(out, "job delete kv: job has live tasks: ") {
			t.Fatalf("job delete after the task left: exit %d, output:\n%s", code, out)
		}
		return code == 0
	})
	if !strings.Contains(out, "deleted job kv (it was at generation ") {
		t.Errorf("job delete printed:\n%s", out)
	}
	if code := watch.wait(20 * time.Second); code != 1 || !strings.Contains(watch.output(), `job watch kv: unknown job "kv": the job was deleted`) {
		t.Errorf("job watch of the deleted job: exit %d, output:\n%s\nwant exit 1 saying the job was deleted", code, watch.output())
	}
	code, out = runSlicerd(t, "job", "list", "--addr", node.rpcAddr)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 1 {
		t.Errorf("job list after the deletion: exit %d; want only the header:\n%s", code, out)
	}
	caller := `"caller":"127.0.0.1:`
	if secure {
		caller = `"caller":"spiffe://slicerd/admin/e2e from 127.0.0.1:` // the CLI's verified identity
	}
	node.waitLine(5*time.Second, `"component":"audit"`, `"procedure":"/slicer.v1.JobService/DeleteJob"`, `"job":"kv"`,
		caller, `"after":"deleted"`, `"outcome":"ok"`)
}

// TestJobDeleteReachesEveryNode deletes a job through one of three slicerd
// nodes sharing etcd, each running every role: within seconds, every other
// node's `job list` and `job get` stop showing it, and every node's
// Distributor answers NOT_FOUND for it. The job's task is stopped first,
// gracefully (it leaves gossip) or by SIGKILL (it stays in gossip as a
// failed member until it is reaped); a job that only ever had a
// configuration is deleted too.
func TestJobDeleteReachesEveryNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop syscall.Signal // 0: the job has no task, only a configuration
	}{
		{"task left", syscall.SIGINT},
		{"task failed", syscall.SIGKILL},
		{"configured only", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etcd := etcdtest.Start(t)
			store := "etcd://" + etcd.Endpoint() + "/slicerd-e2e/"
			var nodes []*slicerdNode
			for i := range 3 {
				args := []string{"--store", store, "--data-dir", t.TempDir()}
				if i > 0 {
					args = append(args, "--join", nodes[0].gossipAddr)
				}
				nodes = append(nodes, startSlicerd(t, fmt.Sprintf("node-%d", i), args...))
			}
			hc, rpcURL := rpcClient("")
			defer hc.CloseIdleConnections()
			ctx := context.Background()
			jobs := func(n *slicerdNode) slicerv1connect.JobServiceClient {
				return slicerv1connect.NewJobServiceClient(hc, rpcURL(n.rpcAddr))
			}
			listed := func(n *slicerdNode) bool {
				resp, err := jobs(n).ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
				if err != nil {
					t.Fatalf("job list through %s: %v", n.name, err)
				}
				return slices.ContainsFunc(resp.Msg.GetJobs(), func(j *slicerv1.JobInfo) bool { return j.GetName() == "kv" })
			}
			distributed := func(n *slicerdNode) error {
				_, err := slicerv1connect.NewDistributorServiceClient(hc, rpcURL(n.rpcAddr)).GetAssignment(ctx,
					connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
				return err
			}

			if tc.stop == 0 {
				if code, out := runSlicerd(t, "job", "set", "--addr", nodes[1].rpcAddr, "--min-redundancy", "1", "kv"); code != 0 {
					t.Fatalf("job set: exit %d:\n%s", code, out)
				}
			} else {
				kv := startKV(t, "kv-0", nodes[0].gossipAddr)
				testwait.Until(t, 30*time.Second, "every node's distributor to serve job kv", func() bool {
					for _, n := range nodes {
						if distributed(n) != nil {
							return false
						}
					}
					return true
				})
				kv.signal(tc.stop)
				kv.wait(20 * time.Second)
			}
			testwait.Until(t, 30*time.Second, "every node to list job kv", func() bool {
				return listed(nodes[0]) && listed(nodes[1]) && listed(nodes[2])
			})

			testwait.Until(t, 30*time.Second, "job delete through node-0 to succeed once no task is alive", func() bool {
				code, out := runSlicerd(t, "job", "delete", "--addr", nodes[0].rpcAddr, "--yes", "kv")
				if code != 0 && !strings.Contains(out, "job has live tasks") {
					t.Fatalf("job delete: exit %d:\n%s", code, out)
				}
				return code == 0
			})
			deleted := time.Now()
			for _, n := range nodes[1:] {
				if _, ok := testwait.Poll(t, 10*time.Second, func() bool { return !listed(n) }); !ok {
					code, out := runSlicerd(t, "job", "list", "--addr", n.rpcAddr)
					t.Fatalf("%s still lists job kv %v after it was deleted through node-0 (exit %d):\n%s",
						n.name, time.Since(deleted).Round(time.Millisecond), code, out)
				}
				t.Logf("%s stopped listing job kv %v after the deletion through node-0", n.name, time.Since(deleted).Round(time.Millisecond))
			}
			for _, n := range nodes {
				var err error
				if _, ok := testwait.Poll(t, 10*time.Second, func() bool {
					err = distributed(n)
					return connect.CodeOf(err) == connect.CodeNotFound
				}); !ok {
					t.Errorf("%s's distributor answers %v for the deleted job kv; want NOT_FOUND", n.name, err)
				}
			}
			t.Logf("every node's distributor answered NOT_FOUND %v after the deletion", time.Since(deleted).Round(time.Millisecond))
			for _, n := range nodes {
				_, err := slicerv1connect.NewBackupServiceClient(hc, rpcURL(n.rpcAddr)).GetAssignment(ctx,
					connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
				if connect.CodeOf(err) != connect.CodeNotFound {
					t.Errorf("%s's backup answers %v for the deleted job kv; want NOT_FOUND", n.name, err)
				}
			}
			for _, n := range nodes[1:] {
				if code, out := runSlicerd(t, "job", "list", "--addr", n.rpcAddr); code != 0 || strings.Contains(out, "\nkv ") {
					t.Errorf("job list through %s after the deletion: exit %d:\n%s", n.name, code, out)
				}
				if code, out := runSlicerd(t, "job", "get", "--addr", n.rpcAddr, "kv"); code != 1 || !strings.Contains(out, `unknown job "kv"`) {
					t.Errorf("job get kv through %s after the deletion: exit %d:\n%s\nwant exit 1, unknown job", n.name, code, out)
				}
				if code, out := runSlicerd(t, "job", "delete", "--addr", n.rpcAddr, "--yes", "kv"); code != 1 || !strings.Contains(out, `unknown job "kv"`) {
					t.Errorf("job delete kv again through %s: exit %d:\n%s\nwant exit 1, unknown job", n.name, code, out)
				}
			}
		})
	}
}
