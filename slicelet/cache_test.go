package slicelet_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

// startWithCache runs a Slicelet of task with cacheFile until the test
// ends or the returned running is stopped.
func startWithCache(t *testing.T, task, join, cacheFile string) *running {
	t.Helper()
	sl, err := slicelet.New(slicelet.Config{
		Job:       job,
		Task:      task,
		Addr:      "127.0.0.1:9000",
		Join:      []string{join},
		Gossip:    gossip.TestConfig("replaced"),
		CacheFile: cacheFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	return run(t, sl)
}

func run(t *testing.T, sl *slicelet.Slicelet) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sl: sl, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- sl.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func kill(t *testing.T, n *gossip.Node, srv *clerktest.Server) {
	t.Helper()
	srv.Close()
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
}

// TestSliceletRestartsFromCache restarts a task while every slicerd node
// is gone: it owns its cached slices from New on, before gossip or any
// Distributor, and tells a listener so.
func TestSliceletRestartsFromCache(t *testing.T) {
	dist, srv := slicerdNode(t, "slicerd-1", gossip.RoleDistributor)
	path := filepath.Join(t.TempDir(), "kv-0.cache")
	a := clerktest.Uniform(job, 3, tasks, 8)
	srv.Publish(a)
	r := startWithCache(t, "kv-0", dist.GossipAddr(), path)
	testwait.For(t, "generation 3", func() bool { return r.sl.Generation() == 3 })
	r.stop(t)
	if got, err := cachefile.Read(path, job); err != nil || got.Generation != 3 {
		t.Fatalf("cache file after Run: %v, %v; want generation 3", got, err)
	}
	deadJoin := dist.GossipAddr()
	kill(t, dist, srv)

	sl, err := slicelet.New(slicelet.Config{Job: job, Task: "kv-0", Addr: "127.0.0.1:9000",
		Join: []string{deadJoin}, Gossip: gossip.TestConfig("replaced"), CacheFile: path})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-sl.Ready():
	default:
		t.Fatal("a Slicelet with a valid cache file is not ready after New")
	}
	checkAffinity(t, sl, a)
	var rec recorder
	sl.AddListener(&rec)
	q := assign.KeySpaceEnd / 8
	if rec.len() != 1 {
		t.Fatalf("listener got %d calls on AddListener, want 1 with the cached ranges", rec.len())
	}
	if c := rec.call(0); len(c[0]) != 4 || c[0][0].Start != 0 || c[0][0].End != q || len(c[1]) != 0 {
		t.Fatalf("cached ranges %v, want the 4 even eighths", c)
	}
	run(t, sl)
	select {
	case <-sl.Joined():
		t.Fatal("joined a cluster that is gone")
	case <-time.After(200 * time.Millisecond):
	}
	checkAffinity(t, sl, a)
	if rec.len() != 1 {
		t.Fatalf("listener called again (%d calls) without a new assignment", rec.len())
	}
}

// TestSliceletFallsBackAndOutlivesSlicerd follows a Distributor, falls back
// to a Backup when the Distributor dies, keeps its assignment when the
// Backup dies too, and resumes when a Distributor joins again.
func TestSliceletFallsBackAndOutlivesSlicerd(t *testing.T) {
	dist, dsrv := slicerdNode(t, "slicerd-dist", gossip.RoleDistributor)
	backup, bsrv := slicerdNode(t, "slicerd-backup", gossip.RoleBackup)
	if _, err := backup.Join([]string{dist.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	a1 := clerktest.Uniform(job, 1, tasks, 4)
	dsrv.Publish(a1)
	bsrv.Publish(a1)
	r := startWithCache(t, "kv-0", dist.GossipAddr(), filepath.Join(t.TempDir(), "kv-0.cache"))
	testwait.For(t, "generation 1", func() bool { return r.sl.Generation() == 1 })
	checkAffinity(t, r.sl, a1)

	// Only the Backup can deliver generation 2.
	kill(t, dist, dsrv)
	a2 := clerktest.Uniform(job, 2, tasks, 6)
	bsrv.Publish(a2)
	testwait.For(t, "generation 2 from the backup", func() bool { return r.sl.Generation() == 2 })
	checkAffinity(t, r.sl, a2)

	kill(t, backup, bsrv)
	checkAffinity(t, r.sl, a2)

	// A Distributor comes back and joins the task's gossip.
	dist2, dsrv2 := slicerdNode(t, "slicerd-dist-2", gossip.RoleDistributor)
	a3 := clerktest.Uniform(job, 3, tasks, 5)
	dsrv2.Publish(a3)
	if _, err := dist2.Join([]string{r.sl.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "generation 3 from the new distributor", func() bool { return r.sl.Generation() == 3 })
	checkAffinity(t, r.sl, a3)
}
