package assigner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// manyJobs is a membership that counts its versions, as gossip does,
// with an Assigner named n and jobs jobs j0, j1, ... of tasks alive tasks
// t0, t1, ... each. Its Peers is a copy of the list: cheaper than
// gossip's parse of every member.
func manyJobs(jobs, tasks int) *versionedMembers {
	members := &versionedMembers{}
	members.peers = append(members.peers, gossip.Peer{Name: "n", Roles: []gossip.Role{gossip.RoleAssigner},
		Status: gossip.StatusAlive, RPCAddr: "127.0.0.1:1"})
	for j := range jobs {
		for k := range tasks {
			members.peers = append(members.peers, gossip.Peer{Name: fmt.Sprintf("j%d/t%d", j, k), Roles: []gossip.Role{gossip.RoleTask},
				Job: fmt.Sprintf("j%d", j), Task: fmt.Sprintf("t%d", k), Status: gossip.StatusAlive, RPCAddr: fmt.Sprintf("127.0.0.1:%d", 10+k)})
		}
	}
	return members
}

// leadingAll is an Assigner n that prefers, holds and has taken over
// every job of members (leases held for a minute: nothing renews them).
func leadingAll(tb testing.TB, members *versionedMembers, jobs int) *Assigner {
	tb.Helper()
	cfg := testConfig(tb, "n")
	cfg.JobLeaseTTL = time.Minute
	as := testAssigner(tb, cfg, testStore(tb), members, nil)
	as.evaluate(context.Background(), true) // takes every job's lease, and every job over
	for j := range jobs {
		if !as.Leads(fmt.Sprintf("j%d", j)) {
			tb.Fatalf("job j%d not led", j)
		}
	}
	return as
}

// With a membership that counts its changes, an Assigner's check of the
// jobs it should lead reads the members once per membership version,
// whatever the number of jobs, not once or more for each job.
func TestEvaluateReadsMembersOncePerVersion(t *testing.T) {
	const jobs = 40
	members := manyJobs(jobs, 3)
	as := leadingAll(t, members, jobs)
	before := members.reads.Load()
	for range 5 {
		as.evaluate(context.Background(), true)
	}
	if n := members.reads.Load() - before; n != 0 {
		t.Errorf("5 checks of %d jobs at one membership version read the members %d times; want none (read at that version before)", jobs, n)
	}
	members.version.Add(1)
	as.evaluate(context.Background(), true)
	if n := members.reads.Load() - before; n < 1 || n > 2 {
		t.Errorf("a check at a new membership version read the members %d times; want once or twice (the Assigner's index and its lease leader's view)", n)
	}
}

// BenchmarkEvaluate is an Assigner's check of which jobs it should lead
// (every second, and on every membership change) in steady state: it
// prefers, holds and has taken over every one of jobs jobs of 3 tasks
// each, all gossip members.
//
//	go test -run '^$' -bench Evaluate -benchmem ./roles/assigner/
func BenchmarkEvaluate(b *testing.B) {
	for _, jobs := range []int{100, 1000} {
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) {
			as := leadingAll(b, manyJobs(jobs, 3), jobs)
			for b.Loop() {
				as.evaluate(context.Background(), true)
			}
		})
	}
}

// A strong job's tasks call LeaseService every third of a TTL, and every
// 20 ms while a transition waits: each call's check that the caller is an
// alive task of the job reads the current version's index, not every
// member. A task not in the index is looked for in gossip itself (it may
// have joined a moment before its event), and refused if not there.
func TestLeaseCallsReadMembersOncePerVersion(t *testing.T) {
	members := manyJobs(10, 3)
	as := testAssigner(t, testConfig(t, "n"), testStore(t), members, nil)
	before := members.reads.Load()
	for i := range 60 {
		if _, err := as.checkLeaseCall("j1", fmt.Sprint("t", i%3), slicerv1.LeaseKind_LEASE_KIND_GUARD); err != nil {
			t.Fatalf("call %d of an alive task refused: %v", i, err)
		}
	}
	if n := members.reads.Load() - before; n != 1 {
		t.Fatalf("60 lease calls at one membership version read the members %d times, want once", n)
	}
	if _, err := as.checkLeaseCall("j1", "t7", slicerv1.LeaseKind_LEASE_KIND_GUARD); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a task gossip does not list: %v, want FAILED_PRECONDITION", err)
	}
	members.mu.Lock()
	members.peers = append(members.peers, gossip.Peer{Name: "j1/t3", Roles: []gossip.Role{gossip.RoleTask}, Job: "j1", Task: "t3",
		Status: gossip.StatusAlive, RPCAddr: "127.0.0.1:13"})
	members.mu.Unlock()
	if _, err := as.checkLeaseCall("j1", "t3", slicerv1.LeaseKind_LEASE_KIND_GUARD); err != nil {
		t.Errorf("a task listed a moment before its membership version moved: %v", err)
	}
}

// A job the store does not hold exists while a task of it is alive in
// gossip; its first task is found in gossip's own list before its member
// event moves the membership's version, so that a subscriber asking at
// once is not told the job is unknown. A job no task names stays unknown.
func TestJobOfATaskJoinedBeforeItsVersionMoved(t *testing.T) {
	members := manyJobs(3, 1)
	as := testAssigner(t, testConfig(t, "n"), testStore(t), members, nil)
	ctx := context.Background()
	if _, err := as.peek(ctx, "fresh"); !errors.Is(err, rpc.ErrUnknownJob) {
		t.Fatalf("a job no task names: %v, want unknown", err)
	}
	members.mu.Lock()
	members.peers = append(members.peers, gossip.Peer{Name: "fresh/t0", Roles: []gossip.Role{gossip.RoleTask}, Job: "fresh", Task: "t0",
		Status: gossip.StatusAlive, RPCAddr: "127.0.0.1:14"})
	members.mu.Unlock()
	if _, err := as.peek(ctx, "fresh"); err != nil {
		t.Fatalf("the job of a task listed a moment before its membership version moved: %v", err)
	}
	if _, err := as.peek(ctx, "other"); !errors.Is(err, rpc.ErrUnknownJob) {
		t.Fatalf("a job no task names: %v, want unknown", err)
	}
}

// A job whose task joined a moment before the membership's version moved
// has a live task: DeleteJob refuses it, as it refuses any job with one.
func TestDeleteRefusesATaskJoinedBeforeItsVersionMoved(t *testing.T) {
	members := manyJobs(1, 1)
	ctx := context.Background()
	store := testStore(t)
	if err := store.Commit(ctx, "kv", 0, storagetest.Assignment("kv", 1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	as := testAssigner(t, testConfig(t, "n"), store, members, nil)
	if live := as.tasksOf("kv", true); len(live) != 0 { // the membership indexed with no task of kv
		t.Fatalf("kv has live tasks %v before any joined", live)
	}
	members.mu.Lock()
	members.peers = append(members.peers, gossip.Peer{Name: "kv/task-0000", Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "task-0000",
		Status: gossip.StatusAlive, RPCAddr: "127.0.0.1:15"})
	members.mu.Unlock()
	_, err := as.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("DeleteJob of a job with a task listed a moment before its version moved: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := store.Load(ctx, "kv"); err != nil {
		t.Fatalf("the job's record: %v", err)
	}
}

// BenchmarkCheckLeaseCall is the check of one lease call (LeaseService)
// at an Assigner whose cluster has jobs jobs of 3 tasks, all members; the
// calls come from every task in turn (not paced).
//
//	go test -run '^$' -bench CheckLeaseCall -benchmem ./roles/assigner/
func BenchmarkCheckLeaseCall(b *testing.B) {
	for _, jobs := range []int{100, 3000} {
		b.Run(fmt.Sprintf("jobs=%d", jobs), func(b *testing.B) {
			as := testAssigner(b, testConfig(b, "n"), testStore(b), manyJobs(jobs, 3), nil)
			as.leaseCalls = newReportLimiter(math.Inf(1), 1) // the pace is not measured here
			i := 0
			for b.Loop() {
				job, task := fmt.Sprint("j", i%jobs), fmt.Sprint("t", (i/jobs)%3)
				if _, err := as.checkLeaseCall(job, task, slicerv1.LeaseKind_LEASE_KIND_GUARD); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// Asking for jobs no task names reads gossip's own list at most
// freshReadBurst times in a row: names any caller makes up cost the index
// alone beyond that, and a job whose task is indexed is still found.
func TestUnknownJobsReadGossipBounded(t *testing.T) {
	members := manyJobs(3, 1)
	as := testAssigner(t, testConfig(t, "n"), testStore(t), members, nil)
	ctx := context.Background()
	if _, err := as.peek(ctx, "j1"); err != nil { // builds the version's index
		t.Fatal(err)
	}
	before, began := members.reads.Load(), time.Now()
	for i := range 5 * freshReadBurst {
		if _, err := as.peek(ctx, fmt.Sprintf("nobody-%d", i)); !errors.Is(err, rpc.ErrUnknownJob) {
			t.Fatalf("a job no task names: %v, want unknown", err)
		}
	}
	// The bucket refills at freshReadsPerSecond while the loop runs.
	most := freshReadBurst + int64(time.Since(began).Seconds()*freshReadsPerSecond) + 1
	if reads := members.reads.Load() - before; reads < freshReadBurst || reads > most {
		t.Fatalf("%d requests for unknown jobs read gossip's list %d times, want %d to %d", 5*freshReadBurst, reads, freshReadBurst, most)
	}
	if _, err := as.peek(ctx, "j2"); err != nil {
		t.Fatalf("an indexed job once the reads are spent: %v", err)
	}
}
