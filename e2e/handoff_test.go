package e2e

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestHandoffBinary: with kvserver processes moving entries with their
// keys (-handoff, the default), a task joining and a task stopping (it
// drains on SIGTERM) leave every key found at its new owner without being
// written again.
func TestHandoffBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	kvs := map[string]*kvTask{}
	for _, name := range []string{"kv-0", "kv-1", "kv-2"} {
		kvs[name] = startKV(t, name, node.gossipAddr)
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	waitTasks := func(n int) {
		t.Helper()
		testwait.Until(t, 30*time.Second, fmt.Sprintf("an assignment over %d tasks", n), func() bool {
			a := ck.Assignment()
			return a != nil && len(a.Tasks) == n
		})
	}
	waitTasks(3)
	kv := kvcache.NewClient(ck, nil)
	const n = 1000
	writeKeys(t, kv, n)
	found := func() int { t.Helper(); return foundKeys(t, kv, n) }

	kvs["kv-3"] = startKV(t, "kv-3", node.gossipAddr)
	waitTasks(4)
	joined := found()
	kvs["kv-1"].signal(syscall.SIGTERM)
	if code := kvs["kv-1"].wait(40 * time.Second); code != 0 {
		t.Fatalf("kv-1 exited %d:\n%s", code, kvs["kv-1"].output())
	}
	waitTasks(3)
	left := found()
	t.Logf("%d keys: %d found after kv-3 joined, %d after kv-1 stopped", n, joined, left)
	if joined < n*99/100 || left < n*99/100 {
		t.Errorf("found %d and %d of %d keys; with handoff at least 99%% move with their entries", joined, left, n)
	}
}

// handoffValue is the value writeKeys gives key-i.
func handoffValue(i int) []byte { return []byte(fmt.Sprintf("value %d", i)) }

// writeKeys writes key-0 … key-(n-1), retrying each until it is stored.
func writeKeys(t *testing.T, kv *kvcache.Client, n int) {
	t.Helper()
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		testwait.Until(t, 10*time.Second, "PUT "+key, func() bool { return kv.Put(context.Background(), key, handoffValue(i)) == nil })
	}
}

// foundKeys reads key-0 … key-(n-1) and counts those found with the value
// writeKeys gave them.
func foundKeys(t *testing.T, kv *kvcache.Client, n int) int {
	t.Helper()
	defer func(start time.Time) { t.Logf("read %d keys in %v", n, time.Since(start).Round(time.Millisecond)) }(time.Now())
	got := 0
	for i := range n {
		v, ok, err := kv.Get(context.Background(), fmt.Sprintf("key-%d", i))
		if err != nil {
			t.Fatalf("GET key-%d: %v", i, err)
		}
		if ok && bytes.Equal(v, handoffValue(i)) {
			got++
		}
	}
	return got
}
