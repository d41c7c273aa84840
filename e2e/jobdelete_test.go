package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
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
