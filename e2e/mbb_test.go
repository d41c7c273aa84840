package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/bench/cachetraffic"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestMakeBeforeBreakBinary: a job with a handoff deadline moves keys in
// two generations, the gaining task beside the losing one first; a task
// stopped with SIGTERM keeps serving its keys until the deadline passed,
// a task joining takes its share the same way, and no request fails.
func TestMakeBeforeBreakBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	if code, out := runSlicerd(t, "job", "set", "--addr", node.rpcAddr, "--handoff-deadline", "500ms", "kv"); code != 0 ||
		!strings.Contains(out, "handoff deadline     500ms (make-before-break)") {
		t.Fatalf("job set --handoff-deadline: exit %d:\n%s", code, out)
	}
	kvs := map[string]*kvTask{}
	for _, name := range []string{"kv-0", "kv-1", "kv-2"} {
		kvs[name] = startKV(t, name, node.gossipAddr)
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over three tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == 3
	})
	d, err := cachetraffic.New(cachetraffic.Config{Keys: 500, Exponent: 1.1, Rate: 300, Workers: 8, Seed: 2}, kvcache.NewClient(ck, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	start := time.Now()
	testwait.Until(t, 30*time.Second, "some traffic", func() bool { return len(d.Seconds(start)) >= 2 })

	sent := time.Now()
	kvs["kv-1"].signal(syscall.SIGTERM)
	if code := kvs["kv-1"].wait(40 * time.Second); code != 0 {
		t.Fatalf("kv-1 exited %d:\n%s", code, kvs["kv-1"].output())
	}
	t.Logf("kv-1 exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	kvs["kv-3"] = startKV(t, "kv-3", node.gossipAddr)
	testwait.Until(t, 30*time.Second, "kv-3 serving", func() bool {
		a := ck.Assignment()
		_, ok := a.TaskIndex("kv-3")
		_, old := a.TaskIndex("kv-1")
		return ok && !old && len(a.Tasks) == 3
	})
	testwait.Until(t, 10*time.Second, "the second step of kv-3's share", func() bool {
		return strings.Count(node.output(), "make-before-break: the gaining tasks serve beside the losing ones") >= 2 &&
			strings.Count(node.output(), `"trigger":"make-before-break"`) >= 2
	})
	cancel()
	<-done
	sum := cachetraffic.Summarize(d.Seconds(start))
	t.Logf("%d reads, %d failed, hit rate %.3f", sum.Reads, sum.Failed, sum.HitRate)
	if sum.Failed != 0 {
		t.Errorf("%d requests failed: %v", sum.Failed, d.Errors())
	}
}
