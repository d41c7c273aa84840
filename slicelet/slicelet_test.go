package slicelet_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const job = "kv"

var tasks = []assign.Task{{Name: "kv-0", Addr: "127.0.0.1:9000"}, {Name: "kv-1", Addr: "127.0.0.1:9001"}}

// slicerdNode starts a gossip member that plays the given role and whose
// RPC address is an in-process Distributor the test controls.
func slicerdNode(t *testing.T, name string, role gossip.Role) (*gossip.Node, *clerktest.Server) {
	t.Helper()
	srv, err := clerktest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg := gossip.TestConfig(name)
	cfg.Self = gossip.Peer{Roles: []gossip.Role{role}, RPCAddr: srv.Addr()}
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	return n, srv
}

type recorder struct {
	mu    sync.Mutex
	calls [][2][]assign.Slice
}

func (r *recorder) OnChangedSlices(assigned, unassigned []assign.Slice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, [2][]assign.Slice{assigned, unassigned})
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) call(i int) [2][]assign.Slice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[i]
}

type running struct {
	sl     *slicelet.Slicelet
	cancel context.CancelFunc
	done   chan error
}

func startSlicelet(t *testing.T, task string, join string) *running {
	t.Helper()
	return startWithCache(t, task, join, "")
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(20 * time.Second):
		t.Error("Run did not return after cancel")
	}
}

func peer(n *gossip.Node, name string) (gossip.Peer, bool) {
	for _, p := range n.Peers() {
		if p.Name == name {
			return p, true
		}
	}
	return gossip.Peer{}, false
}

func checkAffinity(t *testing.T, sl *slicelet.Slicelet, a *assign.Assignment) {
	t.Helper()
	for i := range 500 {
		key := "user:" + strconv.Itoa(i)
		s := a.Slices[a.Find(assign.HashString(key))]
		want := false
		for _, n := range s.Tasks {
			want = want || n == sl.Task()
		}
		if got := sl.IsAffinitizedKeyString(key); got != want {
			t.Fatalf("gen %d: IsAffinitizedKeyString(%q) = %v, want %v", a.Generation, key, got, want)
		}
	}
}

func TestSliceletFollowsAssignmentAndLeaves(t *testing.T) {
	dist, srv := slicerdNode(t, "slicerd-1", gossip.RoleDistributor)
	r := startSlicelet(t, "kv-0", dist.GossipAddr())
	var rec recorder
	r.sl.AddListener(&rec)

	// The task shows up in gossip with its identity and serving address.
	testwait.For(t, "the task in gossip", func() bool {
		for _, p := range dist.Peers() {
			// It exports no state, and says so: the tasks that gain
			// its keys start them cold rather than fetch.
			if p.Has(gossip.RoleTask) && p.Job == job && p.Task == "kv-0" && p.RPCAddr == "127.0.0.1:9000" && p.Status == gossip.StatusAlive && p.NoHandoff {
				return true
			}
		}
		return false
	})
	<-r.sl.Joined()
	if r.sl.GossipAddr() == "" {
		t.Fatal("no gossip address after joining")
	}

	// Four slices, alternating kv-0, kv-1: kv-0 owns the 1st and 3rd.
	a1 := clerktest.Uniform(job, 1, tasks, 4)
	srv.Publish(a1)
	select {
	case <-r.sl.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("no assignment through the gossip-discovered distributor")
	}
	checkAffinity(t, r.sl, a1)
	testwait.For(t, "first listener call", func() bool { return rec.len() == 1 })
	q := assign.KeySpaceEnd / 4
	if c := rec.call(0); len(c[0]) != 2 || c[0][0].Start != 0 || c[0][0].End != q || c[0][1].Start != 2*q || c[0][1].End != 3*q || len(c[1]) != 0 {
		t.Fatalf("first change = %v, want assigned [0,q) [2q,3q)", c)
	}

	// kv-0 now owns the first half: it gains [q,2q) and loses [2q,3q).
	a2 := clerktest.Uniform(job, 2, tasks, 4)
	a2.Slices[1].Tasks, a2.Slices[2].Tasks = []string{"kv-0"}, []string{"kv-1"}
	srv.Publish(a2)
	testwait.For(t, "generation 2", func() bool { return r.sl.Generation() == 2 })
	checkAffinity(t, r.sl, a2)
	testwait.For(t, "second listener call", func() bool { return rec.len() == 2 })
	if c := rec.call(1); len(c[0]) != 1 || c[0][0].Start != q || c[0][0].End != 2*q ||
		len(c[1]) != 1 || c[1][0].Start != 2*q || c[1][0].End != 3*q {
		t.Fatalf("second change = %v, want assigned [q,2q), unassigned [2q,3q)", c)
	}

	// Cancelling Run is a graceful leave: the other member sees "left".
	r.stop(t)
	p, ok := peer(dist, gossip.TaskMemberName(job, "kv-0"))
	if !ok {
		t.Fatalf("the task is gone from gossip; want it listed as left. peers: %v", dist.Peers())
	}
	testwait.For(t, "status left", func() bool {
		p, _ = peer(dist, gossip.TaskMemberName(job, "kv-0"))
		return p.Status == gossip.StatusLeft
	})
	// The assignment stays readable after Run returns.
	checkAffinity(t, r.sl, a2)
}

func TestSliceletUsesBackup(t *testing.T) {
	backup, srv := slicerdNode(t, "slicerd-backup", gossip.RoleBackup)
	a := clerktest.Uniform(job, 3, tasks, 8)
	srv.Publish(a)
	r := startSlicelet(t, "kv-1", backup.GossipAddr())
	select {
	case <-r.sl.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("no assignment from the backup")
	}
	checkAffinity(t, r.sl, a)
}

func TestRunOnce(t *testing.T) {
	dist, _ := slicerdNode(t, "slicerd-1", gossip.RoleDistributor)
	r := startSlicelet(t, "kv-0", dist.GossipAddr())
	<-r.sl.Joined()
	if err := r.sl.Run(context.Background()); !errors.Is(err, slicelet.ErrRunning) {
		t.Fatalf("second Run = %v, want ErrRunning", err)
	}
}

func TestRunFailsOnBadGossipConfig(t *testing.T) {
	sl, err := slicelet.New(slicelet.Config{Job: job, Task: "kv-0", Addr: "127.0.0.1:9000", GossipAddr: "localhost:0", Join: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Run(context.Background()); !errors.Is(err, gossip.ErrConfig) {
		t.Fatalf("Run = %v, want gossip.ErrConfig", err)
	}
}
