package roles

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/slicelet"
)

func TestSliceletLoadReachesAssigner(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	sl := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "kv-0", LoadWindow: 20 * time.Millisecond})
	<-sl.Ready()

	// Load lands on one key: the merged job load lies inside that key's
	// slice, and the key itself carries it.
	const key = "user:42"
	a := sl.Assignment()
	h := assign.HashString(key)
	hot := a.Slices[a.Find(h)]
	testwait.For(t, "the Assigner to hold the reported load", func() bool {
		if err := sl.ReportLoadString(key, 5); err != nil {
			t.Fatal(err)
		}
		l := node.assigner.jobLoad("kv")
		return len(l) > 0 && l[0].Start >= hot.Start && l[len(l)-1].End <= hot.End && l.In(h, h+1) > 0 && l.In(h, h+1) == l.Total()
	})
	if err := node.assigner.jobLoad("kv").Validate(); err != nil {
		t.Fatal(err)
	}
	// Once the load stops, the next window's report replaces it.
	testwait.For(t, "an empty report to replace the load", func() bool { return len(node.assigner.jobLoad("kv")) == 0 })
	if sl.LoadReportsSent() == 0 {
		t.Error("no load report counted as sent")
	}
}

func reportClient(t *testing.T, node *running) slicerv1connect.LoadServiceClient {
	hc := api.NewH2CClient()
	t.Cleanup(hc.CloseIdleConnections)
	return slicerv1connect.NewLoadServiceClient(hc, api.RPCURL(node.RPCAddr()))
}

func goodReport() *slicerv1.ReportLoadRequest {
	return &slicerv1.ReportLoadRequest{
		Job: "kv", Task: "kv-0", Generation: 1, WindowSeconds: 10,
		Slices: []*slicerv1.SliceLoad{{Start: 0, End: 10, Load: 1}, {Start: 10, End: 1 << 63, Load: 2}},
	}
}

func TestReportLoadRejectsInvalid(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	client := reportClient(t, node)
	for name, tc := range map[string]struct {
		edit func(*slicerv1.ReportLoadRequest)
		msg  string
	}{
		"bad job":         {func(r *slicerv1.ReportLoadRequest) { r.Job = "Bad Job" }, "job"},
		"empty task":      {func(r *slicerv1.ReportLoadRequest) { r.Task = "" }, "task"},
		"zero window":     {func(r *slicerv1.ReportLoadRequest) { r.WindowSeconds = 0 }, "window_seconds"},
		"NaN window":      {func(r *slicerv1.ReportLoadRequest) { r.WindowSeconds = math.NaN() }, "window_seconds"},
		"NaN load":        {func(r *slicerv1.ReportLoadRequest) { r.Slices[0].Load = math.NaN() }, "NaN"},
		"infinite load":   {func(r *slicerv1.ReportLoadRequest) { r.Slices[1].Load = math.Inf(1) }, "infinite"},
		"negative load":   {func(r *slicerv1.ReportLoadRequest) { r.Slices[0].Load = -1 }, "negative"},
		"too much load":   {func(r *slicerv1.ReportLoadRequest) { r.Slices[0].Load = 2 * assign.MaxLoad }, "above the limit"},
		"bad unowned":     {func(r *slicerv1.ReportLoadRequest) { r.UnownedLoad = -3 }, "unowned_load"},
		"NaN bytes":       {func(r *slicerv1.ReportLoadRequest) { r.Slices[0].Bytes = math.NaN() }, "bytes is NaN"},
		"negative bytes":  {func(r *slicerv1.ReportLoadRequest) { r.Slices[1].Bytes = -1 }, "bytes -1 is negative"},
		"too many bytes":  {func(r *slicerv1.ReportLoadRequest) { r.Slices[0].Bytes = 2 * assign.MaxBytes }, "is above the limit 2^50"},
		"past key space":  {func(r *slicerv1.ReportLoadRequest) { r.Slices[1].End = 1<<63 + 1 }, "past the key space"},
		"empty range":     {func(r *slicerv1.ReportLoadRequest) { r.Slices[0].End = 0 }, "empty or inverted"},
		"overlapping":     {func(r *slicerv1.ReportLoadRequest) { r.Slices[1].Start = 5 }, "previous entry"},
		"unsorted":        {func(r *slicerv1.ReportLoadRequest) { r.Slices[0], r.Slices[1] = r.Slices[1], r.Slices[0] }, "previous entry"},
		"not a valid job": {func(r *slicerv1.ReportLoadRequest) { r.Job = "" }, "job"},
	} {
		t.Run(name, func(t *testing.T) {
			req := goodReport()
			tc.edit(req)
			_, err := client.ReportLoad(context.Background(), connect.NewRequest(req))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("ReportLoad = %v, want INVALID_ARGUMENT mentioning %q", err, tc.msg)
			}
		})
	}
}

func TestReportLoadFromNonMember(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	taskMember(t, "kv", "kv-1", node.GossipAddr())
	testwait.For(t, "gossip to list kv-1", func() bool { return len(node.assigner.liveTaskNames("kv")) == 1 })
	client := reportClient(t, node)

	_, err := client.ReportLoad(context.Background(), connect.NewRequest(goodReport())) // kv-0 never joined
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), `task "kv-0" is not an alive member of job "kv"`) {
		t.Errorf("ReportLoad from a stranger = %v, want FAILED_PRECONDITION naming it", err)
	}
	if len(node.assigner.jobLoad("kv")) != 0 {
		t.Error("a rejected report was stored")
	}
	req := goodReport()
	req.Task = "kv-1"
	if _, err := client.ReportLoad(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatalf("ReportLoad from a member: %v", err)
	}
	if got := node.assigner.jobLoad("kv").Total(); math.Abs(got-0.3) > 1e-12 {
		t.Errorf("job load %g per second, want 0.3", got)
	}
}

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
	cfg := testConfig(t, "n", t.TempDir())
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
