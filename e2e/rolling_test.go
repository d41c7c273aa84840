package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/bench/cachetraffic"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestRollingRestartBinary restarts four kvserver processes one at a time
// (SIGTERM, wait for the exit, start again) under Zipf reads that refill
// their misses. Each task drains on SIGTERM and the entries move with
// their keys, so no request fails and no one-second window's hit rate
// falls more than 10 points below the warm cache's. bench/rolling measures
// the same at ten tasks, with and without handoff.
func TestRollingRestartBinary(t *testing.T) {
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir())
	const tasks = 4
	kvs := make([]*kvTask, tasks)
	for i := range tasks {
		kvs[i] = startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr)
	}
	ck := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "an assignment over all tasks", func() bool {
		a := ck.Assignment()
		return a != nil && len(a.Tasks) == tasks
	})
	cfg := cachetraffic.Config{Keys: 1000, Exponent: 1.1, Rate: 400, Workers: 16, Seed: 1}
	d, err := cachetraffic.New(cfg, kvcache.NewClient(ck, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Warm: until a whole second hits 90% (the cold tail misses).
	start := time.Now()
	testwait.Until(t, 60*time.Second, "a warm cache (90% hits in a second)", func() bool {
		ss := d.Seconds(start)
		return len(ss) > 2 && ss[len(ss)-1].HitRate() >= 0.9
	})
	warm := cachetraffic.Summarize(d.Seconds(time.Now().Add(-3 * time.Second)))

	from := time.Now()
	var restarts []string
	for i := range tasks {
		name := fmt.Sprintf("kv-%d", i)
		restarts = append(restarts, fmt.Sprintf("%s SIGTERM at %s", name, time.Now().Format("05.000")))
		kvs[i].signal(syscall.SIGTERM)
		if code := kvs[i].wait(60 * time.Second); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM:\n%s", name, code, kvs[i].output())
		}
		restarts = append(restarts, fmt.Sprintf("started at %s", time.Now().Format("05.000")))
		kvs[i] = startKV(t, name, node.gossipAddr)
		testwait.Until(t, 30*time.Second, name+" back in the assignment", func() bool {
			a := ck.Assignment()
			_, ok := a.TaskIndex(name)
			return ok && len(a.Tasks) == tasks
		})
	}
	// One whole second of traffic after the last restart, for its keys.
	last := time.Now()
	testwait.Until(t, 10*time.Second, "a second of traffic after the last restart", func() bool {
		return len(d.Seconds(last.Add(time.Second))) > 0
	})
	cancel()
	<-done
	seconds := d.Seconds(from)
	during := cachetraffic.Summarize(seconds)
	var series []string
	for _, s := range seconds {
		series = append(series, fmt.Sprintf("%s %d/%d", s.At.Format("05"), s.Hits, s.Reads))
	}
	t.Logf("hits/reads by second: %s; restarts: %s", strings.Join(series, ", "), strings.Join(restarts, ", "))
	t.Logf("warm hit rate %.3f; over %d s of restarts: %d reads, %d failed, hit rate %.3f, lowest second %.3f",
		warm.HitRate, during.Seconds, during.Reads, during.Failed, during.HitRate, during.MinHitRate)
	if during.Failed != 0 {
		t.Errorf("%d requests failed during the rolling restart: %v", during.Failed, d.Errors())
	}
	if during.MinHitRate < warm.HitRate-0.1 {
		t.Errorf("a one-second window's hit rate fell to %.3f, from %.3f warm; entries did not move with their keys", during.MinHitRate, warm.HitRate)
	}
}
