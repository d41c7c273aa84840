package roles

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

// Real agents: three tasks in gossip report skewed load over LoadService,
// as their Slicelets would, and the Assigner's periodic decisions balance
// it.
func TestAssignerBalancesReportedLoad(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.RebalanceInterval = 50 * time.Millisecond
	node := startAgent(t, cfg)
	tasks := []string{"t0", "t1", "t2"}
	for _, name := range tasks {
		taskMember(t, "kv", name, node.GossipAddr())
	}
	seesTask(t, node, "kv", "t0")
	w := watchJob(t, node.RPCAddr(), "kv", false)
	first := w.until(t, "three tasks", hasTasks(tasks...))
	truth := assignertest.Skewed()
	start := assign.Imbalance(first, truth)

	// The tasks report every 20 ms what they served under the newest
	// assignment they have seen.
	client := reportClient(t, node)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	latest := first
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			a := latest
			mu.Unlock()
			for _, task := range tasks {
				_, err := client.ReportLoad(ctx, connect.NewRequest(assignertest.ReportFor(a, task, truth, 0.02)))
				// On a loaded machine, gossip's fast test timers can
				// briefly suspect a task; like a Slicelet, it reports
				// again next window.
				if err != nil && ctx.Err() == nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
					t.Errorf("ReportLoad from %s: %v", task, err)
				}
			}
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()

	// Imbalance is over the tasks the assignment names: all three must be
	// there (on a loaded machine gossip may briefly suspect one).
	balanced := w.until(t, "imbalance below 1.2 over all three tasks", func(a *assign.Assignment) bool {
		mu.Lock()
		latest = a
		mu.Unlock()
		return hasTasks(tasks...)(a) && assign.Imbalance(a, truth) < 1.2
	})
	if err := balanced.Validate(); err != nil {
		t.Fatal(err)
	}
	t.Logf("imbalance %.3f at generation %d -> %.3f at generation %d", start, first.Generation,
		assign.Imbalance(balanced, truth), balanced.Generation)

	// JobService shows the same balance the tasks measure: once every
	// report is measured under the assignment being served, the view's
	// load is the true load and its imbalance is the true imbalance.
	hc := api.NewH2CClient()
	t.Cleanup(hc.CloseIdleConnections)
	jobs := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(node.RPCAddr()))
	var info *slicerv1.JobInfo
	testwait.For(t, "JobInfo to show the balanced load", func() bool {
		resp, err := jobs.GetJob(context.Background(), connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
		if err != nil {
			t.Fatal(err)
		}
		info = resp.Msg.GetJob()
		a := node.assigner.Current("kv")
		if a == nil {
			t.Fatal("the assigner serves no assignment of kv")
		}
		mu.Lock()
		latest = a
		mu.Unlock()
		return info.GetGeneration() == a.Generation && hasTasks(tasks...)(a) && info.GetReportingTasks() == 3 && len(info.GetTaskLoads()) == 3 &&
			math.Abs(info.GetTotalLoad()-truth.Total()) < 1e-6 && math.Abs(info.GetImbalance()-assign.Imbalance(a, truth)) < 1e-6 &&
			info.GetImbalance() < 1.2
	})
	var sum float64
	for i, tl := range info.GetTaskLoads() {
		if tl.GetTask() != tasks[i] {
			t.Errorf("task_loads[%d] is %q, want %q", i, tl.GetTask(), tasks[i])
		}
		sum += tl.GetLoad()
	}
	if math.Abs(sum-info.GetTotalLoad()) > 1e-6 {
		t.Errorf("task loads add up to %g, total load is %g", sum, info.GetTotalLoad())
	}
}

// Real agents with load balancing on and skewed load reported: a task that
// dies loses its slices to the survivors and nothing else moves, and a task
// that joins takes its fair share of the key space and nothing else moves,
// however unbalanced the load. Moving load is the periodic decision's job
// (it never runs here: the interval is an hour).
func TestMembershipChangeMovesOnlyWhatItMust(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.RebalanceInterval = time.Hour
	node := startAgent(t, cfg)
	tasks := []string{"t0", "t1", "t2"}
	members := map[string]interface{ Shutdown() error }{}
	for _, name := range tasks {
		members[name] = taskMember(t, "kv", name, node.GossipAddr())
	}
	for _, name := range tasks {
		seesTask(t, node, "kv", name)
	}
	w := watchJob(t, node.RPCAddr(), "kv", false)
	first := w.until(t, "three tasks", hasTasks(tasks...))

	truth := assignertest.Skewed()
	client := reportClient(t, node)
	for _, name := range tasks {
		if _, err := client.ReportLoad(context.Background(), connect.NewRequest(assignertest.ReportFor(first, name, truth, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if got := node.assigner.Reporting("kv"); got != 3 {
		t.Fatalf("%d tasks reporting load, want 3", got)
	}
	before := node.assigner.Current("kv")

	// t2 dies (no leave).
	if err := members["t2"].Shutdown(); err != nil {
		t.Fatal(err)
	}
	died := w.until(t, "t2 removed after its failure", hasTasks("t0", "t1"))
	if lo, hi, ok := assignertest.MovedOnlyFrom(before, died, "t2", ""); !ok {
		t.Errorf("generation %d -> %d: keys [%#x, %#x) moved though t2 did not serve them", before.Generation, died.Generation, lo, hi)
	}
	if churn, share := assign.Churn(before, died), shareOf(before, "t2"); churn > share+1e-9 {
		t.Errorf("t2's death moved %.4f of the key space; it held %.4f", churn, share)
	}

	// t3 joins.
	taskMember(t, "kv", "t3", node.GossipAddr())
	joined := w.until(t, "t3 joined", hasTasks("t0", "t1", "t3"))
	if lo, hi, ok := assignertest.MovedOnlyFrom(died, joined, "", "t3"); !ok {
		t.Errorf("generation %d -> %d: keys [%#x, %#x) moved to a task other than the joiner", died.Generation, joined.Generation, lo, hi)
	}
	if s := shareOf(joined, "t3"); s < 0.333 || s > 0.334 {
		t.Errorf("t3 joined with %.4f of the key space, want its fair share 1/3", s)
	}
	if churn := assign.Churn(died, joined); churn > 0.334 {
		t.Errorf("t3's joining moved %.4f of the key space, more than its fair share", churn)
	}
}

// Real agents: an Assigner restarted while its job's tasks stay live, and
// with their load reported before its startup grace passes, commits a
// takeover generation that moves no key.
func TestRestartedAssignerTakesOverWithoutChurn(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.RebalanceInterval = time.Hour
	node := startAgent(t, cfg)
	tasks := []string{"t0", "t1", "t2"}
	var first *gossip.Node
	for _, name := range tasks {
		n := taskMember(t, "kv", name, node.GossipAddr())
		if first == nil {
			first = n
		}
	}
	for _, name := range tasks {
		seesTask(t, node, "kv", name)
	}
	before := watchJob(t, node.RPCAddr(), "kv", false).until(t, "three tasks", hasTasks(tasks...))
	node.stop(t)

	cfg.StartupGrace = 3 * time.Second
	cfg.Gossip.Join = []string{first.GossipAddr()}
	node = startAgent(t, cfg)
	for _, name := range tasks {
		seesTask(t, node, "kv", name)
	}
	client := reportClient(t, node)
	truth := assignertest.Skewed()
	for _, name := range tasks {
		if _, err := client.ReportLoad(ctx, connect.NewRequest(assignertest.ReportFor(before, name, truth, 1))); err != nil {
			t.Fatal(err)
		}
	}
	if got := node.assigner.Current("kv").Generation; got != before.Generation {
		t.Fatalf("the restarted assigner committed generation %d before the tasks' load was reported; its startup grace is too short for this machine", got)
	}
	after := watchJob(t, node.RPCAddr(), "kv", false).until(t, "the takeover generation", func(a *assign.Assignment) bool {
		return a.Generation > before.Generation
	})
	if churn := assign.Churn(before, after); churn != 0 || !assignertest.SameRouting(before, after) {
		t.Errorf("takeover generation %d moved %.4f of the key space (%d slices), want generation %d's %d slices unchanged",
			after.Generation, churn, len(after.Slices), before.Generation, len(before.Slices))
	}
}

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
		l := node.assigner.JobLoad("kv")
		return len(l) > 0 && l[0].Start >= hot.Start && l[len(l)-1].End <= hot.End && l.In(h, h+1) > 0 && l.In(h, h+1) == l.Total()
	})
	if err := node.assigner.JobLoad("kv").Validate(); err != nil {
		t.Fatal(err)
	}
	// Once the load stops, the next window's report replaces it.
	testwait.For(t, "an empty report to replace the load", func() bool { return len(node.assigner.JobLoad("kv")) == 0 })
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
	testwait.For(t, "gossip to list kv-1", func() bool { return len(node.assigner.LiveTasks("kv")) == 1 })
	client := reportClient(t, node)

	_, err := client.ReportLoad(context.Background(), connect.NewRequest(goodReport())) // kv-0 never joined
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), `task "kv-0" is not an alive member of job "kv"`) {
		t.Errorf("ReportLoad from a stranger = %v, want FAILED_PRECONDITION naming it", err)
	}
	if len(node.assigner.JobLoad("kv")) != 0 {
		t.Error("a rejected report was stored")
	}
	req := goodReport()
	req.Task = "kv-1"
	if _, err := client.ReportLoad(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatalf("ReportLoad from a member: %v", err)
	}
	if got := node.assigner.JobLoad("kv").Total(); math.Abs(got-0.3) > 1e-12 {
		t.Errorf("job load %g per second, want 0.3", got)
	}
}

// An agent samples its jobs' load on its own, and serves the record over
// RPC.
func TestLoadHistoryOverRPC(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.LoadHistoryInterval = 10 * time.Millisecond
	node := startAgent(t, cfg)
	sl := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "kv-0", LoadWindow: 20 * time.Millisecond})
	<-sl.Ready()
	hc := api.NewH2CClient()
	t.Cleanup(hc.CloseIdleConnections)
	jobs := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(node.RPCAddr()))
	const key = "user:42"
	testwait.For(t, "a sample with the key's load in its bucket", func() bool {
		if err := sl.ReportLoadString(key, 5); err != nil {
			t.Fatal(err)
		}
		resp, err := jobs.GetLoadHistory(context.Background(), connect.NewRequest(&slicerv1.GetLoadHistoryRequest{Job: "kv"}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.GetIntervalMs() != 10 {
			t.Fatalf("interval %d ms, want 10", resp.Msg.GetIntervalMs())
		}
		s := resp.Msg.GetSamples()
		if len(s) == 0 {
			return false
		}
		buckets := s[len(s)-1].GetBucketLoad()
		return len(buckets) > 0 && buckets[int(assign.HashString(key)/(assign.KeySpaceEnd/assign.SliceKey(len(buckets))))] > 0
	})
}
