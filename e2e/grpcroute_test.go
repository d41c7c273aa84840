package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/grpcroute"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestKeyRoutedGRPC dials slicer:///kv with gRPC-Go and the example cache's
// gRPC API, and checks that every call reaches the task the assignment
// gives its key (each answer names the task that served it): with three
// tasks, after one is SIGKILLed and the assignment without it arrives, and
// while slicerd itself is down.
func TestKeyRoutedGRPC(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir(), "--rebalance-interval", "0")
	tasks := map[string]*kvTask{}
	for i := range 3 {
		name := fmt.Sprintf("kv-%d", i)
		tasks[name] = startKV(t, name, node.gossipAddr)
	}

	cfg := secureClerk(clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}, MaxBackoff: 500 * time.Millisecond})
	var held atomic.Pointer[assign.Assignment]
	cfg.OnAssignment = func(_, next *assign.Assignment) { held.Store(next) }
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = grpcroute.TaskCredentials(cfg.TLS)
	}
	cfg.Job = ""
	b, err := grpcroute.NewBuilder(grpcroute.Config{Clerk: cfg})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("slicer:///kv", grpc.WithResolvers(b), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	client := kvcache.NewGRPCClient(conn)

	keys := make([]string, 600)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	on := func(live ...string) func() bool {
		return func() bool {
			a := held.Load()
			if a == nil || len(a.Tasks) != len(live) {
				return false
			}
			for _, task := range a.Tasks {
				if !slices.Contains(live, task.Name) {
					return false
				}
			}
			return true
		}
	}
	// routed calls every key once (a Put, or a Get when get) and fails
	// the test unless the task that answered is one the held assignment
	// gives the key. It returns how many tasks served.
	routed := func(what string, get bool) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a := held.Load()
		served := map[string]int{}
		for _, k := range keys {
			var task string
			var err error
			if get {
				var found bool
				_, found, task, err = client.Get(ctx, k)
				if err == nil && !found {
					t.Fatalf("%s: key %q has no value", what, k)
				}
			} else {
				task, err = client.Put(ctx, k, []byte("v"))
			}
			if err != nil {
				t.Fatalf("%s: key %q: %v", what, k, err)
			}
			if owners := a.Slices[a.Find(assign.HashString(k))].Tasks; !slices.Contains(owners, task) {
				t.Fatalf("%s: key %q was served by %s; generation %d gives it to %v", what, k, task, a.Generation, owners)
			}
			served[task]++
		}
		t.Logf("%s: every key served by its owner in generation %d: %v", what, a.Generation, served)
		return len(served)
	}

	testwait.Until(t, 30*time.Second, "an assignment of the three tasks", on("kv-0", "kv-1", "kv-2"))
	if n := routed("three tasks", false); n != 3 {
		t.Fatalf("%d tasks served, want 3", n)
	}

	// Open-loop reads through the kill: one every 5 ms whatever the
	// answers, each with a 3 s deadline, until a second after the
	// assignment without kv-1 arrived. Figures only: a read of one of
	// kv-1's keys fails while it is refused by the live tasks (the
	// channel's fallback) for longer than GRPCClient retries.
	var scheduled, failed, failedLive atomic.Int64
	before := held.Load()
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			case <-tick.C:
			}
			scheduled.Add(1)
			wg.Add(1)
			go func(k string) {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				if _, _, _, err := client.Get(ctx, k); err != nil {
					failed.Add(1)
					if !slices.Contains(before.Slices[before.Find(assign.HashString(k))].Tasks, "kv-1") {
						failedLive.Add(1)
					}
				}
			}(keys[i%len(keys)])
		}
	}()
	tasks["kv-1"].signal(syscall.SIGKILL)
	tasks["kv-1"].wait(10 * time.Second)
	took := testwait.Until(t, 30*time.Second, "an assignment without kv-1", on("kv-0", "kv-2"))
	time.Sleep(time.Second) // the load's tail after the new assignment; not synchronisation
	close(stopLoad)
	<-loadDone
	t.Logf("open-loop reads through the SIGKILL of kv-1 (new assignment after %v): %d scheduled, %d failed, %d of them keys of the live tasks",
		took.Round(time.Millisecond), scheduled.Load(), failed.Load(), failedLive.Load())
	routed("after kv-1 was killed", false)

	node.signal(syscall.SIGKILL)
	node.wait(10 * time.Second)
	if n := routed("while slicerd is down", true); n != 2 {
		t.Fatalf("%d tasks served while slicerd was down, want 2", n)
	}
}
