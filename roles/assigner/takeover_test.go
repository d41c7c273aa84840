package assigner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/storage"
)

func tmpStore(t *testing.T) storage.Store {
	t.Helper()
	store := testStore(t)
	return store
}

// storeTwoTasks stores generation 5 of job kv, over tasks t0 and t1 at
// 127.0.0.1:10 and :11, as another Assigner would have, and returns it.
func storeTwoTasks(t *testing.T, store storage.Store) *assign.Assignment {
	t.Helper()
	stored, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}, {Name: "t1", Addr: "127.0.0.1:11"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	stored.Generation = 5
	if err := store.Commit(context.Background(), "kv", 0, stored); err != nil {
		t.Fatal(err)
	}
	return stored
}

// A takeover continues from the stored assignment, whoever committed it,
// and commits the next generation at once: unchanged when every task is
// alive, without the dead tasks otherwise.
func TestTakeoverCommitsNextGeneration(t *testing.T) {
	ctx := context.Background()
	store := tmpStore(t)
	stored := storeTwoTasks(t, store)
	members := &fakeMembers{}
	members.set("kv", "t0", "t1")
	for i := range members.peers {
		members.peers[i].RPCAddr = stored.Tasks[i].Addr
	}
	a := testAssigner(t, testConfig(t, "a1"), store, members, nil)

	a.evaluate(ctx, true) // takes the lease, and the job over
	rec, err := store.Load(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Current.Generation != 6 || !assignertest.SameRouting(rec.Current, stored) {
		t.Fatalf("takeover stored generation %d %v, want generation 6 with the stored slices %v", rec.Current.Generation, rec.Current.Slices, stored.Slices)
	}
	j, _ := a.job(ctx, "kv")
	if _, held := a.leader.Held("kv"); !held {
		t.Error("after the takeover the assigner does not hold the job's lease")
	}

	// Another Assigner cannot take the job while the first holds it.
	members.set("kv", "t0")
	members.peers[0].RPCAddr = "127.0.0.1:10"
	b := testAssigner(t, testConfig(t, "a2"), store, members, nil)
	b.evaluate(ctx, true)
	if rec, _ := store.Load(ctx, "kv"); rec.Current.Generation != 6 {
		t.Fatalf("an assigner without the lease committed generation %d", rec.Current.Generation)
	}
	// Once the first gives the lease up, it takes over with t1 dead.
	a.leader.Forget(ctx, "kv")
	testwait.For(t, "a2 to take the released lease", func() bool {
		b.evaluate(ctx, true)
		_, held := b.leader.Held("kv")
		return held
	})
	rec, _ = store.Load(ctx, "kv")
	if rec.Current.Generation != 7 || len(rec.Current.Tasks) != 1 || rec.Current.Tasks[0].Name != "t0" {
		t.Fatalf("takeover with t1 dead stored generation %d tasks %v", rec.Current.Generation, taskNames(rec.Current))
	}
	// The first Assigner's next read shows it someone else committed.
	if err := a.refresh(ctx, "kv"); err != nil {
		t.Fatal(err)
	}
	if got := j.pub.Current().Generation; got != 7 {
		t.Errorf("after refresh the first assigner serves generation %d, want 7", got)
	}
}

// A write for a job another Assigner is preferred for is forwarded to it;
// when that Assigner cannot be reached the caller gets UNAVAILABLE saying
// so, and a request that was already forwarded is never forwarded again.
func TestForwardToUnreachablePreferred(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	// Pick a name the rendezvous hash prefers over a1 for kv: with no
	// distances known, that is how the preference is made.
	other := ""
	for _, name := range []string{"a0", "a2", "a3", "a4", "a5", "a6"} {
		if lease.DefaultPreference().Choose("kv", []string{"a1", name}, nil, nil, "") == name {
			other = name
			break
		}
	}
	if other == "" {
		t.Fatal("no candidate name wins the rendezvous against a1")
	}
	members := &fakeMembers{}
	members.set("kv", "t0")
	members.peers = append(members.peers,
		gossip.Peer{Name: "a1", Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive},
		gossip.Peer{Name: other, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: dead, Status: gossip.StatusAlive})
	a := testAssigner(t, testConfig(t, "a1"), tmpStore(t), members, nil)
	defer a.rpcClients.CloseIdle()

	report := &slicerv1.ReportLoadRequest{Job: "kv", Task: "t0", WindowSeconds: 1}
	_, err = a.ReportLoad(ctx, connect.NewRequest(report))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "cannot be reached") {
		t.Errorf("ReportLoad to an unreachable preferred assigner = %v, want UNAVAILABLE naming %s", err, other)
	}
	_, err = a.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1}}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("SetJobConfig to an unreachable preferred assigner = %v, want UNAVAILABLE", err)
	}
	if a.forwarded.Load() != 2 {
		t.Errorf("%d writes counted as forwarded, want 2", a.forwarded.Load())
	}

	fwd := connect.NewRequest(report)
	fwd.Header().Set(auth.ForwardedHeader, other)
	if _, err := a.ReportLoad(ctx, fwd); err != nil {
		t.Errorf("a forwarded report was not taken where it landed: %v", err)
	}
	if a.loads.reporting("kv") != 1 {
		t.Error("the forwarded report was not recorded")
	}
	// The sender prefers a1: a1 adopts the job, so that views that
	// disagree the other way round cannot leave it without an Assigner.
	if _, self := a.leader.Preferred("kv"); !self {
		t.Error("a write forwarded here did not make this assigner adopt the job")
	}
	if got := a.leader.PreferredName("kv"); got != "a1" {
		t.Errorf("preferredName = %q after adopting, want a1", got)
	}
}

// A standby Assigner adopts a job whose stored assignment keeps routing
// keys to a dead task: its preferred Assigner is not doing its work.
func TestStandbyAdoptsOrphanedJob(t *testing.T) {
	ctx := context.Background()
	store := tmpStore(t)
	stored, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}, {Name: "t1", Addr: "127.0.0.1:11"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(ctx, "kv", 0, stored); err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, name := range []string{"a0", "a2", "a3", "a4", "a5", "a6"} {
		if lease.DefaultPreference().Choose("kv", []string{"a1", name}, nil, nil, "") == name {
			other = name
			break
		}
	}
	members := &fakeMembers{}
	members.set("kv", "t0") // t1 is dead, yet still in the stored assignment
	members.peers[0].RPCAddr = "127.0.0.1:10"
	members.peers = append(members.peers,
		gossip.Peer{Name: "a1", Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive},
		gossip.Peer{Name: other, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:2", Status: gossip.StatusAlive})
	cfg := testConfig(t, "a1")
	cfg.RebalanceDelay = time.Millisecond
	cfg.Preference.Recheck = time.Millisecond
	a := testAssigner(t, cfg, store, members, nil)
	defer a.rpcClients.CloseIdle()
	if err := a.load(ctx); err != nil {
		t.Fatal(err)
	}

	a.evaluate(ctx, true) // notices the orphan
	if a.leader.PreferredName("kv") == "a1" {
		t.Fatal("adopted at once; the preferred assigner gets its orphan time to act")
	}
	time.Sleep(10*cfg.Preference.Recheck + 10*cfg.RebalanceDelay)
	a.evaluate(ctx, true) // adopts
	a.evaluate(ctx, true) // takes the lease, and the job over
	rec, _ := store.Load(ctx, "kv")
	if rec.Current.Generation != 2 || len(rec.Current.Tasks) != 1 {
		t.Fatalf("after adopting, the store holds generation %d with tasks %v; want generation 2 without t1", rec.Current.Generation, taskNames(rec.Current))
	}
}

// A configuration another Assigner stored (one that took itself for the
// job's preferred Assigner while this one held the lease) is applied by
// the holder at its next read of the store, with a decision of its own,
// not left until something else changes.
func TestHolderAppliesConfigurationStoredElsewhere(t *testing.T) {
	store := tmpStore(t)
	tasks := func(self string) *fakeMembers {
		m := &fakeMembers{}
		m.set("kv", "t0", "t1", "t2")
		for i := range m.peers {
			m.peers[i].RPCAddr = fmt.Sprintf("127.0.0.1:%d", 10+i)
		}
		// Each Assigner sees only itself: each takes itself for the
		// job's preferred one.
		m.peers = append(m.peers, gossip.Peer{Name: self, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive})
		return m
	}
	a := testAssigner(t, testConfig(t, "a1"), store, tasks("a1"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testwait.For(t, "a1 to lead job kv", func() bool { return a.Leads("kv") })

	b := testAssigner(t, testConfig(t, "a2"), store, tasks("a2"), nil)
	_, err := b.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 2, MaxRedundancy: 2}}))
	if err != nil {
		t.Fatalf("SetJobConfig through a2: %v", err)
	}
	if _, held := b.leader.Held("kv"); held {
		t.Fatal("a2 holds the job's lease")
	}
	testwait.For(t, "a1 to commit an assignment with the configuration a2 stored", func() bool {
		rec, err := store.Load(ctx, "kv")
		if err != nil || rec.Current == nil {
			return false
		}
		for _, s := range rec.Current.Slices {
			if len(s.Tasks) != 2 {
				return false
			}
		}
		return true
	})
}

// storeDown is a bbolt store whose commits fail while down is set, as a
// store that cannot be reached for a while.
type storeDown struct {
	*storage.Bolt
	down    atomic.Bool
	commits atomic.Int32
}

func (s *storeDown) CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	s.commits.Add(1)
	if s.down.Load() {
		return errors.New("store unreachable (injected)")
	}
	return s.Bolt.CommitRecorded(ctx, job, epoch, prevGen, next, e)
}

// A takeover that fails (the store is down when the lease is gained) is
// tried again while the lease is held, without waiting for the job's
// membership to change: until it succeeds, the stored assignment routes
// keys to the tasks that died with the previous holder.
func TestFailedTakeoverIsRetried(t *testing.T) {
	ctx := context.Background()
	b := testStore(t).(*storage.Bolt)
	storeTwoTasks(t, b)
	leases, err := lease.NewEmbedded(ctx, b, lease.EmbeddedOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leases.Close() })
	members := &fakeMembers{}
	members.set("kv", "t0") // t1 died with the job's previous Assigner
	members.peers[0].RPCAddr = "127.0.0.1:10"
	store := &storeDown{Bolt: b}
	store.down.Store(true)
	cfg := testConfig(t, "a1")
	cfg.JobLeaseTTL = time.Minute // held throughout without renewals: the takeover is tried again, not the lease
	a := New(cfg, store, leases, members, nil)

	a.evaluate(ctx, true) // gains the lease; the takeover's commit fails
	if store.commits.Load() != 1 {
		t.Fatalf("the takeover tried %d commits, want 1", store.commits.Load())
	}
	if _, held := a.leader.Held("kv"); !held || a.Leads("kv") {
		t.Fatalf("after a failed takeover: lease held %v, leads %v; want held, not leading", held, a.Leads("kv"))
	}
	store.down.Store(false)
	testwait.For(t, "the takeover to be tried again and commit generation 6 without t1", func() bool {
		a.evaluate(ctx, true)
		return a.Leads("kv")
	})
	rec, err := b.Load(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Current.Generation != 6 || len(rec.Current.Tasks) != 1 || rec.Current.Tasks[0].Name != "t0" {
		t.Fatalf("after the retried takeover the store holds generation %d over %v, want generation 6 over t0 alone",
			rec.Current.Generation, taskNames(rec.Current))
	}
	h, err := b.History(ctx, "kv", 1)
	if err != nil || len(h) != 1 || h[0].Cause != storage.CauseTakeover {
		t.Fatalf("the retried takeover's history: %+v, %v; want one takeover entry", h, err)
	}
	// Once taken over it is not taken over again under the same lease.
	n := store.commits.Load()
	a.evaluate(ctx, true)
	if got := store.commits.Load(); got != n {
		t.Errorf("evaluate after the takeover committed %d more times", got-n)
	}
}
