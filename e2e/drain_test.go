package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestDrainBinary runs slicerd and ten kvserver processes under a steady
// stream of reads and writes, and checks the planned ways a task gives up
// its keys, none of which fails a request:
//   - 'slicerd task drain kv kv-3' empties kv-3 while it stays live, and
//     'task undrain' gives it keys again;
//   - draining an unknown task is an error that says what is live;
//   - SIGTERM makes kv-5 drain itself: slicerd moves its keys while it
//     serves, then it leaves gossip and exits 0.
func TestDrainBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	kvs := map[string]*kvTask{}
	for i := range 10 {
		name := fmt.Sprintf("kv-%d", i)
		kvs[name] = startKV(t, name, node.gossipAddr)
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over all ten tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == 10
	})

	// The traffic: four workers writing and reading 500 keys.
	ctx, cancel := context.WithCancel(context.Background())
	kv := kvcache.NewClient(ck, nil)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("key-%d", (i*4+w)%500)
				var err error
				if i%2 == 0 {
					err = kv.Put(ctx, key, []byte("v"))
				} else {
					_, _, err = kv.Get(ctx, key)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	testwait.Until(t, 10*time.Second, "traffic flowing", func() bool { return ok.Load() > 200 })

	code, out := runSlicerd(t, "task", "drain", "--addr", node.rpcAddr, "kv", "kv-3")
	if code != 0 || !strings.Contains(out, "kv-3 drained in ") {
		t.Fatalf("task drain: exit %d:\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "drained in") {
			t.Logf("slicerd task drain kv kv-3: %s", line)
		}
	}
	if a := ck.Assignment(); a != nil {
		if _, still := a.TaskIndex("kv-3"); still {
			testwait.Until(t, 10*time.Second, "the clerk to see kv-3 drained", func() bool {
				_, still := ck.Assignment().TaskIndex("kv-3")
				return !still
			})
		}
	}
	code, out = runSlicerd(t, "job", "get", "--addr", node.rpcAddr, "kv")
	if code != 0 || !strings.Contains(out, "drained         kv-3\n") || !hasLine(out, "kv-3 ", "draining") {
		t.Errorf("job get does not show the drain:\n%s", out)
	}

	code, out = runSlicerd(t, "task", "drain", "--addr", node.rpcAddr, "kv", "kv-99")
	if code != 1 || !strings.Contains(out, `job "kv" has no live task "kv-99" (live: kv-0, kv-1,`) {
		t.Errorf("drain of an unknown task: exit %d:\n%s", code, out)
	}

	if code, out := runSlicerd(t, "task", "undrain", "--addr", node.rpcAddr, "kv", "kv-3"); code != 0 {
		t.Fatalf("task undrain: exit %d:\n%s", code, out)
	}
	testwait.Until(t, 30*time.Second, "kv-3 to take keys again", func() bool {
		_, ok := ck.Assignment().TaskIndex("kv-3")
		return ok
	})

	// SIGTERM: kv-5 drains itself, then exits.
	sent := time.Now()
	kvs["kv-5"].signal(syscall.SIGTERM)
	if code := kvs["kv-5"].wait(40 * time.Second); code != 0 {
		t.Fatalf("kv-5 exited %d after SIGTERM:\n%s", code, kvs["kv-5"].output())
	}
	t.Logf("kv-5 drained and exited %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
	if !strings.Contains(kvs["kv-5"].output(), "slicelet: drained") {
		t.Errorf("kv-5 did not drain before exiting:\n%s", kvs["kv-5"].output())
	}
	testwait.Until(t, 10*time.Second, "kv-5 out of the assignment", func() bool {
		_, ok := ck.Assignment().TaskIndex("kv-5")
		return !ok
	})
	before := ok.Load()
	testwait.Until(t, 10*time.Second, "traffic after the drains", func() bool { return ok.Load() > before+200 })
	cancel()
	wg.Wait()
	attempts, satisfied := kv.Attempts()
	t.Logf("%d requests answered, %d failed; %d of %d attempts satisfied at once", ok.Load(), failed.Load(), satisfied, attempts)
	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed during planned drains; the first: %v", n, firstErr.Load())
	}
}

// A drain with nowhere to move the keys (every other task drained) is
// stored but moves nothing: with --wait it says so at once rather than
// after --timeout, exit 1, saying the drain stays stored; it goes ahead
// once a task can take the keys.
func TestDrainWaitGivesUp(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	for i := range 2 {
		startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr)
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over both tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == 2
	})
	if code, out := runSlicerd(t, "task", "drain", "--addr", node.rpcAddr, "kv", "kv-0"); code != 0 {
		t.Fatalf("drain kv-0: exit %d:\n%s", code, out)
	}
	code, out := runSlicerd(t, "task", "drain", "--timeout", "10m", "--addr", node.rpcAddr, "kv", "kv-1")
	if code != 1 || !strings.Contains(out, `kv-1 still serves keys of job "kv": no other live task can take them`) ||
		!strings.Contains(out, "kv-0 (drained)") || !strings.Contains(out, "the drain stays stored") {
		t.Errorf("drain of the last task: exit %d:\n%s\nwant exit 1 at once saying no other live task can take kv-1's keys and the drain stays stored", code, out)
	}
	if code, out := runSlicerd(t, "task", "undrain", "--addr", node.rpcAddr, "kv", "kv-0"); code != 0 {
		t.Fatalf("undrain kv-0: exit %d:\n%s", code, out)
	}
	testwait.Until(t, 30*time.Second, "the stored drain to move kv-1's keys to kv-0", func() bool {
		a := ck.Assignment()
		if a == nil {
			return false
		}
		for _, s := range a.Slices {
			if slices.Contains(s.Tasks, "kv-1") {
				return false
			}
		}
		return true
	})
}
