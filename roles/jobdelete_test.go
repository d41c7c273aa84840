package roles

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage"
)

// logLines collects an agent's JSON log lines.
type logLines struct{ testlog.Buffer }

// audits returns the audit lines logged so far, decoded.
func (l *logLines) audits(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["component"] == "audit" {
			out = append(out, m)
		}
	}
	return out
}

// A job is deleted only once none of its tasks is alive; then every role
// forgets it and ends its streams with NOT_FOUND, each admin write leaves
// one audit line, and a task of the job joining later creates it afresh.
func TestDeleteJob(t *testing.T) {
	ctx := context.Background()
	logs := &logLines{}
	cfg := testConfig(t, "node-1", t.TempDir(), gossip.RoleAssigner, gossip.RoleDistributor, gossip.RoleBackup)
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	node := startAgent(t, cfg)
	jobs := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()))
	del := func(job string) (*connect.Response[slicerv1.DeleteJobResponse], error) {
		return jobs.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: job}))
	}

	task := taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	if _, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 2},
	})); err != nil {
		t.Fatal(err)
	}
	dist := watchJob(t, node.RPCAddr(), "kv", false)
	served := dist.until(t, "an assignment through the distributor", hasTasks("t0"))
	backup := watchJob(t, node.RPCAddr(), "kv", true)
	backup.until(t, "an assignment through the backup", hasTasks("t0"))

	_, err := del("kv")
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "t0") {
		t.Fatalf("DeleteJob with a live task = %v, want FAILED_PRECONDITION naming t0", err)
	}
	for _, bad := range []struct {
		job  string
		code connect.Code
	}{{"Bad Job", connect.CodeInvalidArgument}, {"never", connect.CodeNotFound}} {
		if _, err := del(bad.job); connect.CodeOf(err) != bad.code {
			t.Fatalf("DeleteJob(%q) = %v, want %v", bad.job, err, bad.code)
		}
	}

	task.Shutdown()
	testwait.For(t, "gossip to see the task gone", func() bool { return len(node.assigner.LiveTasks("kv")) == 0 })
	resp, err := del("kv")
	if err != nil {
		t.Fatalf("DeleteJob after the task left: %v", err)
	}
	if got := resp.Msg.GetJob(); got.GetName() != "kv" || got.GetGeneration() < served.Generation || !got.GetConfigured() {
		t.Errorf("DeleteJob returned %v, want the job as it was (generation ≥ %d, configured)", got, served.Generation)
	}
	for name, w := range map[string]*watcher{"distributor": dist, "backup": backup} {
		select {
		case err := <-w.err:
			if connect.CodeOf(err) != connect.CodeNotFound {
				t.Errorf("the %s's stream ended with %v, want NOT_FOUND", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the %s's stream of the deleted job did not end", name)
		}
	}
	if _, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob of the deleted job = %v, want NOT_FOUND", err)
	}
	list, err := jobs.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil || len(list.Msg.GetJobs()) != 0 {
		t.Errorf("ListJobs after the deletion = %v, %v; want none", list.Msg.GetJobs(), err)
	}
	if _, err := node.store.Load(ctx, "kv"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the store still holds the deleted job: %v", err)
	}
	if _, err := del("kv"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a second DeleteJob = %v, want NOT_FOUND", err)
	}

	var lines []string
	for _, m := range logs.audits(t) {
		lines = append(lines, m["procedure"].(string)+" "+m["job"].(string)+" "+m["outcome"].(string))
		if m["caller"] == "" {
			t.Errorf("audit line without a caller: %v", m)
		}
	}
	want := []string{
		"/slicer.v1.JobService/SetJobConfig kv ok",
		"/slicer.v1.JobService/DeleteJob kv failed_precondition",
		"/slicer.v1.JobService/DeleteJob Bad Job invalid_argument",
		"/slicer.v1.JobService/DeleteJob never not_found",
		"/slicer.v1.JobService/DeleteJob kv ok",
		"/slicer.v1.JobService/DeleteJob kv not_found",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("audit lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	audits := logs.audits(t)
	// The job's first assignment may be committed before or after the
	// write: generation 0 or 1.
	if m := audits[0]; !strings.HasPrefix(m["before"].(string), "default config (min_redundancy=1 max_redundancy=1) generation=") ||
		!strings.HasPrefix(m["after"].(string), "min_redundancy=1 max_redundancy=2 generation=") {
		t.Errorf("SetJobConfig audit line %v, want the default config before and the new one after", m)
	}
	if m := audits[4]; !strings.HasPrefix(m["before"].(string), "min_redundancy=1 max_redundancy=2 generation=") || m["after"] != "deleted" {
		t.Errorf("DeleteJob audit line %v, want the job's config before and deleted after", m)
	}

	// A task of the job joining again creates it afresh, and a subscriber
	// that held the deleted job's last assignment is sent the new one.
	deletedAt := resp.Msg.GetJob().GetGeneration()
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	taskMember(t, "kv", "t1", node.GossipAddr())
	seesTask(t, node, "kv", "t1")
	// Bounded, so that a subscriber sent nothing fails the test.
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resumed, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr())).WatchAssignment(sctx,
		connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: deletedAt, KnownIncarnation: served.Incarnation}))
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if !resumed.Receive() {
		t.Fatalf("a subscriber holding generation %d of the deleted job was sent nothing: %v", deletedAt, resumed.Err())
	}
	if got := resumed.Msg().GetAssignment(); got.GetGeneration() <= deletedAt {
		t.Errorf("a subscriber holding generation %d was sent generation %d", deletedAt, got.GetGeneration())
	}
	again := watchJob(t, node.RPCAddr(), "kv", false).until(t, "the job created again", hasTasks("t1"))
	if again.Generation <= deletedAt {
		t.Errorf("the job created again is at generation %d, not above the %d it was deleted at", again.Generation, deletedAt)
	}
}
