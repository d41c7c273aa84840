package assigner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/rpc"
)

// fakeMembers is a membership whose peers the test sets.
type fakeMembers struct {
	mu    sync.Mutex
	peers []gossip.Peer
}

func (f *fakeMembers) Peers() []gossip.Peer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]gossip.Peer(nil), f.peers...)
}

func (f *fakeMembers) Changes() (<-chan struct{}, func()) { return nil, func() {} }

func (f *fakeMembers) set(job string, tasks ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers = nil
	for _, name := range tasks {
		f.peers = append(f.peers, gossip.Peer{Name: job + "/" + name, Roles: []gossip.Role{gossip.RoleTask},
			Job: job, Task: name, Status: gossip.StatusAlive})
	}
}

func TestJobLoadMergesDecaysAndPrunes(t *testing.T) {
	members := &fakeMembers{}
	members.set("kv", "a", "b")
	cfg := testConfig(t, "n")
	cfg.LoadHalfLife = 10 * time.Second
	as := testAssigner(t, cfg, nil, members, nil)
	now := time.Unix(1000, 0)
	as.loads.now = func() time.Time { return now }

	report := func(task string, slices ...*slicerv1.SliceLoad) {
		t.Helper()
		req := &slicerv1.ReportLoadRequest{Job: "kv", Task: task, Generation: 1, WindowSeconds: 2, Slices: slices}
		if _, err := as.ReportLoad(context.Background(), connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	// Replicas of [0, 100) add up; b measured under other slice bounds.
	report("a", &slicerv1.SliceLoad{Start: 0, End: 100, Load: 20})
	report("b", &slicerv1.SliceLoad{Start: 50, End: 150, Load: 40})
	want := assign.Load{{Start: 0, End: 50, Load: 5}, {Start: 50, End: 100, Load: 15}, {Start: 100, End: 150, Load: 10}}
	check := func(what string, want assign.Load) {
		t.Helper()
		got := as.jobLoad("kv")
		if err := got.Validate(); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: job load %v, want %v", what, got, want)
		}
		for i := range got {
			if got[i].Start != want[i].Start || got[i].End != want[i].End || math.Abs(got[i].Load-want[i].Load) > 1e-9 {
				t.Fatalf("%s: job load %v, want %v", what, got, want)
			}
		}
	}
	check("fresh", want)

	// A newer report from a replaces its previous one.
	report("a", &slicerv1.SliceLoad{Start: 0, End: 100, Load: 40})
	want = assign.Load{{Start: 0, End: 50, Load: 10}, {Start: 50, End: 100, Load: 20}, {Start: 100, End: 150, Load: 10}}
	check("replaced", want)

	// One window after arrival the reports are still at full weight; one
	// half-life later they count half.
	now = now.Add(2 * time.Second)
	check("one window old", want)
	now = now.Add(10 * time.Second)
	for i := range want {
		want[i].Load /= 2
	}
	check("one half-life stale", want)

	// b leaves the job: its report goes.
	members.set("kv", "a")
	check("b left", assign.Load{{Start: 0, End: 100, Load: 10}})
	members.set("kv")
	as.pruneLoads()
	as.loads.mu.Lock()
	n := len(as.loads.jobs)
	as.loads.mu.Unlock()
	if n != 0 {
		t.Errorf("%d jobs keep load after every task left", n)
	}

	_, err := as.ReportLoad(context.Background(), connect.NewRequest(goodReport()))
	if !errors.Is(err, rpc.ErrNotMember) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("report after leaving = %v, want rpc.ErrNotMember", err)
	}
}

func FuzzReportLoadRequest(f *testing.F) {
	for _, r := range []*slicerv1.ReportLoadRequest{
		goodReport(),
		{},
		{Job: "kv", Task: "t", WindowSeconds: 1e-3, Slices: []*slicerv1.SliceLoad{{Start: 1, End: 2, Load: assign.MaxLoad}}},
		{Job: "kv", Task: "t", WindowSeconds: 5, UnownedLoad: math.NaN(), Slices: []*slicerv1.SliceLoad{{Start: 3, End: 2}}},
		{Job: "kv", Task: "t", WindowSeconds: 5, Slices: []*slicerv1.SliceLoad{{Start: 0, End: 1 << 63}, {Start: 0, End: 1}}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m slicerv1.ReportLoadRequest
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		r, err := loadFromProto(&m)
		if err != nil {
			if !errors.Is(err, assign.ErrInvalidLoad) && !errors.Is(err, assign.ErrInvalidName) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			if connect.CodeOf(rpc.ToConnect(err)) != connect.CodeInvalidArgument {
				t.Fatalf("%v does not map to INVALID_ARGUMENT", err)
			}
			return
		}
		if err := assign.MergeLoads(r.rate, r.rate).Validate(); err != nil {
			t.Fatalf("accepted report merges into invalid load: %v", err)
		}
	})
}

func goodReport() *slicerv1.ReportLoadRequest {
	return &slicerv1.ReportLoadRequest{
		Job: "kv", Task: "kv-0", Generation: 1, WindowSeconds: 10,
		Slices: []*slicerv1.SliceLoad{{Start: 0, End: 10, Load: 1}, {Start: 10, End: 1 << 63, Load: 2}},
	}
}

// A round of reports is in when every live task has reported since the
// job's last load decision; a task reporting twice counts once, and a
// decision starts the next round.
func TestLoadReportRounds(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLoads(0, 0)
	l.now = func() time.Time { return now }
	live := []string{"t0", "t1", "t2"}
	put := func(task string) bool {
		now = now.Add(time.Millisecond)
		return l.put("kv", task, &loadReport{window: time.Second}, live)
	}
	for i, step := range []struct {
		task  string
		round bool
	}{{"t0", false}, {"t0", false}, {"t1", false}, {"t1", false}, {"t2", true}, {"t0", true}} {
		if got := put(step.task); got != step.round {
			t.Fatalf("report %d (%s): round %v, want %v", i, step.task, got, step.round)
		}
	}
	l.decide("kv", now)
	if put("t0") || put("t1") || put("t0") {
		t.Fatal("a round came in before every task reported since the decision")
	}
	if !put("t2") {
		t.Fatal("no round once every task reported since the decision")
	}
	// With a spacing, a round asks for a decision only that long after
	// the last one.
	l.spacing = time.Minute
	l.decide("kv", now)
	if put("t0") || put("t1") || put("t2") {
		t.Fatal("a round within the spacing asked for a decision")
	}
	now = now.Add(time.Minute)
	if !put("t0") {
		t.Fatal("no round once the spacing passed")
	}
}

// versionedMembers is fakeMembers that counts its changes, as gossip.Node
// does (Version), and the reads of its member list.
type versionedMembers struct {
	fakeMembers
	version atomic.Uint64
	reads   atomic.Int64
}

func (v *versionedMembers) Version() uint64 { return v.version.Load() }

func (v *versionedMembers) Peers() []gossip.Peer {
	v.reads.Add(1)
	return v.fakeMembers.Peers()
}

// With a membership that counts its changes, the Assigner leading a job
// checks a report's sender against the job's alive tasks kept for the current
// version, not against a fresh read of every gossip member: many reports
// read the member list once. A task gone at a new version is refused; a
// task that joined before its version moved is found by reading gossip
// itself rather than refused; the reports of a task gone are dropped with
// the next report, as without versions.
func TestReportsReadMembershipOncePerVersion(t *testing.T) {
	members := &versionedMembers{}
	members.set("kv", "a", "b", "c")
	as := newBalanceFixture(t, members, nil).as // leads the job: reports are taken here
	report := func(task string) error {
		req := &slicerv1.ReportLoadRequest{Job: "kv", Task: task, Generation: 1, WindowSeconds: 2,
			Slices: []*slicerv1.SliceLoad{{Start: 0, End: 100, Load: 1}}}
		_, err := as.ReportLoad(context.Background(), connect.NewRequest(req))
		return err
	}
	if err := report("a"); err != nil {
		t.Fatal(err)
	}
	before := members.reads.Load()
	for range 10 {
		for _, task := range []string{"a", "b", "c"} {
			if err := report(task); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := members.reads.Load() - before; n > 3 {
		t.Errorf("30 reports at one membership version read the member list %d times; want at most 3", n)
	}

	members.set("kv", "a", "b")
	members.version.Add(1)
	if err := report("c"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a report from c after it left: %v, want FAILED_PRECONDITION", err)
	}
	// The next report, against the new version's list, drops c's.
	if err := report("a"); err != nil {
		t.Fatal(err)
	}
	as.loads.mu.Lock()
	_, kept := as.loads.jobs["kv"]["c"]
	as.loads.mu.Unlock()
	if kept {
		t.Error("c's report is still kept after c left and another task reported")
	}
	members.set("kv", "a", "b", "d") // its event not yet counted
	if err := report("d"); err != nil {
		t.Errorf("a report from d, alive in gossip before the version moved: %v", err)
	}
}

// With a membership that counts its changes, the Assigner reads every
// member once per version for all its jobs, and each job's tasks are
// what a fresh read gives; a new version is read again.
func TestMembershipIndexedOncePerVersion(t *testing.T) {
	members := manyJobs(50, 3)
	for i := range members.peers {
		if p := &members.peers[i]; p.Task == "t2" && (p.Job == "j0" || p.Job == "j5" || p.Job == "j10") {
			p.Status = gossip.StatusFailed
		}
	}
	// A second member claiming a task: the name that sorts first is kept.
	members.peers = append(members.peers, gossip.Peer{Name: "j1/t0-again", Roles: []gossip.Role{gossip.RoleTask},
		Job: "j1", Task: "t0", Status: gossip.StatusAlive, RPCAddr: "127.0.0.1:99"})
	as := testAssigner(t, testConfig(t, "n"), testStore(t), members, nil)
	check := func() {
		t.Helper()
		peers := members.fakeMembers.Peers()
		for j := range 51 {
			job := fmt.Sprintf("j%d", j)
			want := jobTasks(peers, job, true)
			if got := as.tasksOf(job, true); !slices.Equal(got, want) {
				t.Fatalf("tasks of %s: %v, a fresh read gives %v", job, got, want)
			}
			if got := as.liveNamesNow(job); !slices.Equal(got, namesOf(want)) {
				t.Fatalf("live names of %s: %v, want %v", job, got, namesOf(want))
			}
		}
	}
	check()
	if n := members.reads.Load(); n != 1 {
		t.Fatalf("51 jobs read the members %d times at one version, want once", n)
	}
	members.mu.Lock()
	members.peers[1].Status = gossip.StatusFailed // j0/t0 (0 is the Assigner)
	members.mu.Unlock()
	members.version.Add(1)
	check()
	if n := members.reads.Load(); n != 2 {
		t.Fatalf("the members were read %d times over two versions, want twice", n)
	}
}
