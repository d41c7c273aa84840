package assigner

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/storage"
)

// Every commit is recorded with its cause, its moves by phase, churn and
// imbalance; ExplainKey names the load decision that moved a key, and the
// failure that moved it again.
func TestDecisionHistory(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	history := func() []*slicerv1.Decision {
		t.Helper()
		resp, err := f.as.GetJobHistory(ctx, connect.NewRequest(&slicerv1.GetJobHistoryRequest{Job: "kv"}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetDecisions()
	}
	h := history()
	if len(h) != 1 || h[0].GetCause() != storage.CauseInitial || h[0].GetGeneration() != f.j.pub.Current().Generation {
		t.Fatalf("history after the first assignment = %v; want one initial decision", h)
	}

	// A load decision: recorded with the moves phase 4 took.
	f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
	f.as.balanceAll(ctx)
	loadGen := f.j.pub.Current().Generation
	h = history()
	if len(h) != 2 || h[0].GetGeneration() != loadGen || h[0].GetCause() != storage.CauseLoad {
		t.Fatalf("history after a load decision = %v; want it first, caused by load", h)
	}
	d := h[0]
	if d.GetImbalanceBefore() <= d.GetImbalanceAfter() || d.GetChurn() <= 0 || d.GetAlgorithm() != assign.AlgorithmWeightedMove ||
		!strings.Contains(d.GetDetail(), "t0") {
		t.Errorf("load decision recorded as %v; want lower imbalance after, churn, weighted-move, and the hottest task t0 named", d)
	}
	var moved *slicerv1.DecisionMove
	for _, m := range d.GetMoves() {
		if m.GetPhase() == assign.PhaseMove && m.GetKind() == assign.Reassign.String() {
			moved = m
			break
		}
	}
	if moved == nil {
		t.Fatalf("the load decision recorded no reassignment of phase %q: %v", assign.PhaseMove, d.GetMoves())
	}

	// Why is the moved key where it is? The load decision moved it.
	why, err := f.as.ExplainKey(ctx, connect.NewRequest(&slicerv1.ExplainKeyRequest{Job: "kv",
		Which: &slicerv1.ExplainKeyRequest_SliceKey{SliceKey: moved.GetStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	w := why.Msg
	if !slices.Contains(w.GetSlice().GetTasks(), moved.GetTo()) || len(w.GetDecisions()) == 0 || w.GetDecisions()[0].GetGeneration() != loadGen ||
		w.GetDecisions()[0].GetCause() != storage.CauseLoad || w.GetOldestRecordedGeneration() == 0 {
		t.Fatalf("ExplainKey(%#x) = %v; want it on %s, moved by load decision %d", moved.GetStart(), w, moved.GetTo(), loadGen)
	}
	for _, m := range w.GetDecisions()[0].GetMoves() {
		if m.GetStart() > moved.GetStart() || moved.GetStart() >= m.GetEnd() {
			t.Errorf("ExplainKey listed move %v, which does not hold the key", m)
		}
	}

	// The task now serving it fails: the next decision says so, and
	// ExplainKey names it first.
	members.mu.Lock()
	for i := range members.peers {
		if members.peers[i].Task == moved.GetTo() {
			members.peers[i].Status = gossip.StatusFailed
		}
	}
	members.mu.Unlock()
	if err := f.as.reconcile(ctx, "kv", triggerChange); err != nil {
		t.Fatal(err)
	}
	h = history()
	if h[0].GetCause() != storage.CauseTaskFailed || h[0].GetDetail() != "task "+moved.GetTo()+" failed" ||
		h[0].GetPhases()[0].GetPhase() != assign.PhaseDeparted {
		t.Fatalf("decision after %s failed recorded as %v", moved.GetTo(), h[0])
	}
	why, err = f.as.ExplainKey(ctx, connect.NewRequest(&slicerv1.ExplainKeyRequest{Job: "kv",
		Which: &slicerv1.ExplainKeyRequest_SliceKey{SliceKey: moved.GetStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	if ds := why.Msg.GetDecisions(); len(ds) < 2 || ds[0].GetCause() != storage.CauseTaskFailed || ds[1].GetGeneration() != loadGen {
		t.Fatalf("ExplainKey after the failure = %v; want the failure, then the load decision", ds)
	}
}

// ExplainKey and GetJobHistory refuse what they cannot answer with the
// code and message a caller can act on.
func TestDecisionHistoryBadInput(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0")
	f := newBalanceFixture(t, members, nil)
	cases := []struct {
		name string
		req  *slicerv1.ExplainKeyRequest
		code connect.Code
		want string
	}{
		{"no key", &slicerv1.ExplainKeyRequest{Job: "kv"}, connect.CodeInvalidArgument, "names no key"},
		{"slice key out of range", &slicerv1.ExplainKeyRequest{Job: "kv", Which: &slicerv1.ExplainKeyRequest_SliceKey{SliceKey: 1 << 63}},
			connect.CodeInvalidArgument, "outside the key space"},
		{"unknown job", &slicerv1.ExplainKeyRequest{Job: "nope", Which: &slicerv1.ExplainKeyRequest_Key{Key: []byte("k")}},
			connect.CodeNotFound, "nope"},
		{"invalid job name", &slicerv1.ExplainKeyRequest{Job: "no/pe", Which: &slicerv1.ExplainKeyRequest_Key{Key: []byte("k")}},
			connect.CodeInvalidArgument, "job"},
	}
	for _, tc := range cases {
		_, err := f.as.ExplainKey(ctx, connect.NewRequest(tc.req))
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ExplainKey = %v; want %v mentioning %q", tc.name, err, tc.code, tc.want)
		}
	}
	if _, err := f.as.GetJobHistory(ctx, connect.NewRequest(&slicerv1.GetJobHistoryRequest{Job: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJobHistory of an unknown job = %v; want NotFound", err)
	}
	// An application key always lands in some slice.
	resp, err := f.as.ExplainKey(ctx, connect.NewRequest(&slicerv1.ExplainKeyRequest{Job: "kv", Which: &slicerv1.ExplainKeyRequest_Key{Key: []byte("user:42")}}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetSliceKey() != assign.HashString("user:42") || !slices.Contains(resp.Msg.GetSlice().GetTasks(), "t0") {
		t.Errorf("ExplainKey(user:42) = %v", resp.Msg)
	}
}

// The per-job metrics follow the job: imbalance is high under skewed load
// and falls as decisions balance it, decisions are counted by cause, the
// misrouted load tasks report is exported, and the names pass the linter.
func TestJobMetrics(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.as.metricCollectors()...)
	first := f.j.pub.Current().Generation
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	truth := assignertest.Skewed()
	f.report(t, truth, "t0", "t1", "t2")
	skewedImbalance := gauge("slicerd_job_imbalance_ratio")
	if skewedImbalance < 2.5 {
		t.Fatalf("slicerd_job_imbalance_ratio = %.3f under skewed load; want above 2.5", skewedImbalance)
	}
	f.settle(t, truth, 20, "t0", "t1", "t2")
	if got := gauge("slicerd_job_imbalance_ratio"); got > 1.2 {
		t.Errorf("slicerd_job_imbalance_ratio = %.3f after balancing from %.3f; want at most 1.2", got, skewedImbalance)
	}
	if got := gauge("slicerd_job_generation"); got != float64(f.j.pub.Current().Generation) {
		t.Errorf("slicerd_job_generation = %v, want %d", got, f.j.pub.Current().Generation)
	}
	// The metrics were registered after the first assignment: every
	// generation since is a load decision.
	if n, want := testutil.ToFloat64(f.as.metrics.decisions.WithLabelValues("kv", storage.CauseLoad)), f.j.pub.Current().Generation-first; n != float64(want) || n < 1 {
		t.Errorf("%v load decisions counted; %d generations were committed", n, want)
	}
	// A task reports load for keys it does not own.
	req := assignertest.ReportFor(f.j.pub.Current(), "t1", truth, 1)
	req.UnownedLoad = 7
	f.now = f.now.Add(time.Second)
	if _, err := f.as.ReportLoad(ctx, connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	if got := gauge("slicerd_job_misrouted_load"); got != 7 {
		t.Errorf("slicerd_job_misrouted_load = %v after a report of 7 unowned, want 7", got)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	f.as.forgetJob("kv")
	if n := testutil.CollectAndCount(f.as.metrics.decisions); n != 0 {
		t.Errorf("a deleted job left %d decision series", n)
	}
}
