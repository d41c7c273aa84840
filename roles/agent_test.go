package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t testing.TB) *slog.Logger { return testlog.Logger(t) }

func testConfig(t *testing.T, name, dataDir string, roles ...gossip.Role) Config {
	cfg := TestConfig(name)
	cfg.DataDir = dataDir
	if len(roles) > 0 {
		cfg.Roles = roles
	}
	cfg.Logger = testLogger(t)
	return cfg
}

// running is an agent started in the background, stopped at cleanup.
type running struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
}

func startAgent(t testing.TB, cfg Config) *running {
	t.Helper()
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	testwait.For(t, "gossip to start", func() bool { return a.GossipAddr() != "" })
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("agent Run: %v", err)
		}
		r.done <- nil // later stops return at once
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not stop")
	}
}

// taskMember joins gossip the way a Slicelet does.
func taskMember(t *testing.T, job, task, join string) *gossip.Node {
	t.Helper()
	return testnet.TaskMember(t, job, task, join, testLogger(t))
}

// seesTask waits until r's gossip view has task of job alive. A watch
// opened before that is refused: the agent does not know the job yet.
func seesTask(t *testing.T, r *running, job, task string) {
	t.Helper()
	testwait.For(t, "the agent to see "+job+"/"+task, func() bool {
		for _, p := range r.Peers() {
			if p.Job == job && p.Task == task && p.Status == gossip.StatusAlive {
				return true
			}
		}
		return false
	})
}

// watcher streams a job's assignments from a node and keeps the newest.
type watcher struct {
	latest chan *assign.Assignment
	err    chan error
}

func watchJob(t *testing.T, addr, job string, backup bool) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse]
	var err error
	req := connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job})
	hc := api.NewH2CClient()
	if backup {
		stream, err = slicerv1connect.NewBackupServiceClient(hc, api.RPCURL(addr), connect.WithGRPC()).WatchAssignment(ctx, req)
	} else {
		stream, err = slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr)).WatchAssignment(ctx, req)
	}
	return follow(t, hc, cancel, stream, err)
}

// follow keeps the newest assignment stream sends until the test ends,
// then cancels it and closes hc's connections.
func follow(t *testing.T, hc *http.Client, cancel context.CancelFunc, stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], err error) *watcher {
	t.Helper()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &watcher{latest: make(chan *assign.Assignment, 1), err: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer stream.Close()
		for stream.Receive() {
			a, err := api.FromProto(stream.Msg().GetAssignment())
			if err != nil {
				w.err <- err
				return
			}
			select {
			case <-w.latest:
			default:
			}
			w.latest <- a
		}
		w.err <- stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		hc.CloseIdleConnections()
	})
	return w
}

// until returns the first assignment for which cond holds.
func (w *watcher) until(t *testing.T, what string, cond func(*assign.Assignment) bool) *assign.Assignment {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case a := <-w.latest:
			if cond(a) {
				return a
			}
		case err := <-w.err:
			t.Fatalf("stream ended waiting for %s: %v", what, err)
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

var (
	taskNames = assignertest.TaskNames
	hasTasks  = assignertest.HasTasks
)

func TestSingleNodeShardsJob(t *testing.T) {
	dir := t.TempDir()
	node := startAgent(t, testConfig(t, "node-1", dir))
	tasks := map[string]*gossip.Node{}
	for _, name := range []string{"t0", "t1", "t2"} {
		tasks[name] = taskMember(t, "kv", name, node.GossipAddr())
	}
	seesTask(t, node, "kv", "t0")
	dist := watchJob(t, node.RPCAddr(), "kv", false)
	first := dist.until(t, "three tasks", hasTasks("t0", "t1", "t2"))
	if err := first.Validate(); err != nil {
		t.Fatal(err)
	}

	// A task that fails (no leave) loses its slices, and only those move.
	tasks["t1"].Shutdown()
	second := dist.until(t, "t1 removed after failure", hasTasks("t0", "t2"))
	if second.Generation <= first.Generation {
		t.Errorf("generation %d after %d", second.Generation, first.Generation)
	}
	if churn, share := assign.Churn(first, second), shareOf(first, "t1"); churn > share+1e-9 {
		t.Errorf("churn %.4f exceeds the failed task's share %.4f", churn, share)
	}

	// A task that leaves gracefully is drained the same way.
	if err := tasks["t2"].Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	dist.until(t, "t2 drained after leave", hasTasks("t0"))

	// The backup serves the same stored assignment.
	bk := watchJob(t, node.RPCAddr(), "kv", true)
	bk.until(t, "backup serving t0 only", hasTasks("t0"))

	// A new task takes a fair share.
	taskMember(t, "kv", "t3", node.GossipAddr())
	third := dist.until(t, "t3 joined", hasTasks("t0", "t3"))
	if s := shareOf(third, "t3"); s < 0.49 || s > 0.51 {
		t.Errorf("joined task holds %.3f of the key space, want about half", s)
	}
}

// An agent that stops gives its job leases back only once it has left
// gossip. Serf marks a leaving member without telling the others, who see
// it gone only when the leave is complete: a lease given back before that
// leaves its job without a holder, since every other Assigner still
// prefers the stopping one.
func TestAssignerGivesLeasesBackAfterLeavingGossip(t *testing.T) {
	var logs testlog.Buffer
	cfg := testConfig(t, "node-1", t.TempDir(), gossip.RoleAssigner)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	testwait.For(t, "the assigner to lead job kv", func() bool { return node.assigner.Leads("kv") })
	node.stop(t)
	out := logs.String()
	left := strings.Index(out, `"msg":"left gossip"`)
	released := strings.Index(out, `"msg":"released the job leases on shutdown"`)
	if left < 0 || released < left {
		t.Errorf("the agent logged leaving gossip at offset %d and giving its leases back at %d; want the leave first:\n%s", left, released, out)
	}
}

func shareOf(a *assign.Assignment, task string) float64 {
	var w uint64
	for _, s := range a.Slices {
		if slices.Contains(s.Tasks, task) {
			w += s.Width()
		}
	}
	return float64(w) / float64(assign.KeySpaceEnd)
}

func TestRestartCarriesAssignmentForward(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "node-1", dir)
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	taskMember(t, "kv", "t1", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	before := watchJob(t, node.RPCAddr(), "kv", false).until(t, "two tasks", hasTasks("t0", "t1"))
	node.stop(t)

	// Restarted with a long grace and no tasks in gossip, it serves the
	// stored assignment unchanged.
	cfg.StartupGrace = time.Hour
	node = startAgent(t, cfg)
	after := watchJob(t, node.RPCAddr(), "kv", false).until(t, "stored assignment", func(*assign.Assignment) bool { return true })
	if !assign.Equal(before, after) || after.Generation != before.Generation {
		t.Fatalf("after restart got generation %d %v, want generation %d %v", after.Generation, after.Slices, before.Generation, before.Slices)
	}
}

func TestDistributorPullsFromAssigner(t *testing.T) {
	assigner := startAgent(t, testConfig(t, "assigner-1", t.TempDir(), gossip.RoleAssigner))
	dcfg := testConfig(t, "distributor-1", "", gossip.RoleDistributor)
	dcfg.Gossip.Join = []string{assigner.GossipAddr()}
	distributor := startAgent(t, dcfg)
	taskMember(t, "kv", "t0", assigner.GossipAddr())
	// The job exists once the assigner has seen its task join; before, a
	// watch of it is rightly NOT_FOUND.
	seesTask(t, assigner, "kv", "t0")

	// Until the distributor sees a live assigner it answers UNAVAILABLE;
	// then a job no assigner knows does not exist.
	testwait.For(t, "distributor to see the assigner", func() bool {
		_, ok := distributor.distributor.Assigner("kv")
		return ok
	})
	client := slicerv1connect.NewDistributorServiceClient(api.NewH2CClient(), api.RPCURL(distributor.RPCAddr()))
	_, err := client.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "other"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown job through the distributor: %v", err)
	}
	w := watchJob(t, distributor.RPCAddr(), "kv", false)
	w.until(t, "assignment through the distributor", hasTasks("t0"))
	taskMember(t, "kv", "t1", assigner.GossipAddr())
	w.until(t, "update pushed through the distributor", hasTasks("t0", "t1"))
}

func TestJobService(t *testing.T) {
	dir := t.TempDir()
	node := startAgent(t, testConfig(t, "node-1", dir))
	jobs := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()), connect.WithGRPC())
	ctx := context.Background()
	for _, n := range []string{"t0", "t1", "t2"} {
		taskMember(t, "kv", n, node.GossipAddr())
	}
	seesTask(t, node, "kv", "t0")
	w := watchJob(t, node.RPCAddr(), "kv", false)
	before := w.until(t, "three tasks", hasTasks("t0", "t1", "t2"))

	for _, tc := range []struct {
		job      string
		min, max uint32
		want     string
	}{
		{"kv", 0, 1, "min redundancy is 0"},
		{"kv", 3, 2, "below min redundancy"},
		{"kv", 1, 65, "above the limit"},
		{"Bad Job", 1, 1, "job name"},
		{"", 1, 1, "job name is empty"},
	} {
		_, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
			Job: tc.job, Config: &slicerv1.JobConfig{MinRedundancy: tc.min, MaxRedundancy: tc.max},
		}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetJobConfig(%q, %d, %d) = %v, want INVALID_ARGUMENT mentioning %q", tc.job, tc.min, tc.max, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cfg  *slicerv1.JobConfig
		want string
	}{
		{&slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, MoveChurn: 2}, "move churn is 2"},
		{&slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, SplitLoadFactor: 0.5}, "split load factor"},
		{&slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, MinSlicesPerTask: 200, MaxSlicesPerTask: 100}, "below min slices per task"},
		{&slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, SuppressBelow: -1}, "suppress below"},
		{&slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, Algorithm: "round-robin"}, `unknown algorithm: "round-robin"`},
		{&slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1, Algorithm: strings.Repeat("x", 65)}, "algorithm name of 65 bytes"},
	} {
		_, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: tc.cfg}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetJobConfig(%v) = %v, want INVALID_ARGUMENT mentioning %q", tc.cfg, err, tc.want)
		}
	}
	if got, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"})); err != nil || got.Msg.GetJob().GetConfigured() {
		t.Errorf("after invalid configs, GetJob = %v, %v; want the job unconfigured", got, err)
	}
	_, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "missing"}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob(missing) = %v, want NOT_FOUND", err)
	}

	resp, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 2, MaxRedundancy: 3},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Msg.GetJob().GetConfigured() || len(resp.Msg.GetJob().GetLiveTasks()) != 3 {
		t.Errorf("SetJobConfig returned %v", resp.Msg.GetJob())
	}
	redundant := w.until(t, "every slice on two tasks", func(a *assign.Assignment) bool {
		for _, s := range a.Slices {
			if len(s.Tasks) != 2 {
				return false
			}
		}
		return true
	})
	if redundant.Generation <= before.Generation {
		t.Errorf("generation did not advance")
	}
	list, err := jobs.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil || len(list.Msg.GetJobs()) != 1 || list.Msg.GetJobs()[0].GetGeneration() != redundant.Generation {
		t.Errorf("ListJobs = %v, %v", list.Msg.GetJobs(), err)
	}

	// Every field of the configuration round-trips through the store.
	tuned := &slicerv1.JobConfig{
		MinRedundancy: 2, MaxRedundancy: 3, MinSlicesPerTask: 20, MaxSlicesPerTask: 60,
		MergeChurn: 0.02, MoveChurn: 0.2, MergeLoadFactor: 0.5, SplitLoadFactor: 3, SuppressBelow: 7.5,
	}
	if _, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: tuned})); err != nil {
		t.Fatal(err)
	}
	got, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
	if err != nil || !proto.Equal(got.Msg.GetJob().GetConfig(), tuned) {
		t.Errorf("GetJob config = %v, %v; want %v", got.Msg.GetJob().GetConfig(), err, tuned)
	}

	// The config survives a restart.
	store, err := storage.OpenDataDir(dir, storage.BoltOptions{ReadOnly: true, LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, storage.ErrLocked) {
		t.Errorf("opening the data dir of a running node: %v, want ErrLocked", err)
		if store != nil {
			store.Close()
		}
	}
	node.stop(t)
	store, err = storage.OpenDataDir(dir, storage.BoltOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, err := store.Load(ctx, "kv")
	if want, _ := api.ConfigFromProto(tuned); err != nil || !rec.Config.Equal(want) || !rec.Configured {
		t.Errorf("stored config %+v (configured %v), %v; want %+v", rec.Config, rec.Configured, err, want)
	}
}

func TestReflectionAndHealth(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	hc := api.NewH2CClient()
	client := grpcreflect.NewClient(hc, api.RPCURL(node.RPCAddr()))
	stream := client.NewStream(context.Background())
	names, err := stream.ListServices()
	stream.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, string(n))
	}
	for _, want := range []string{
		slicerv1connect.DistributorServiceName, slicerv1connect.BackupServiceName,
		slicerv1connect.AssignerServiceName, slicerv1connect.JobServiceName, slicerv1connect.LoadServiceName,
		grpchealth.HealthV1ServiceName,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("reflection lists %v, missing %s", got, want)
		}
	}

	req, _ := http.NewRequest(http.MethodGet, api.RPCURL(node.RPCAddr())+"/", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / = %d", resp.StatusCode)
	}
	hc.CloseIdleConnections()
}

// TestAgentReadyAndCheck: Ready closes once Run serves (with an Assigner,
// once the stored jobs are loaded), Check passes from then on, and
// ShuttingDown closes and Check fails as soon as shutdown begins.
func TestAgentReadyAndCheck(t *testing.T) {
	for _, roleSet := range [][]gossip.Role{nil, {gossip.RoleDistributor}} {
		t.Run(fmt.Sprint(roleSet), func(t *testing.T) {
			cfg := testConfig(t, "n1", t.TempDir(), roleSet...)
			a, err := New(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Check(); !errors.Is(err, rpc.ErrNotServing) {
				t.Errorf("Check before Run: %v; want rpc.ErrNotServing", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			select {
			case <-a.Ready():
			case err := <-done:
				t.Fatalf("Run returned before Ready: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("not ready within 20s")
			}
			if a.assigner != nil {
				select {
				case <-a.assigner.Loaded():
				default:
					t.Error("ready before the assigner loaded the stored jobs")
				}
			}
			select {
			case <-a.accepting:
			default:
				t.Error("ready before the RPC server accepted connections")
			}
			if err := a.Check(); err != nil {
				t.Errorf("Check once ready: %v", err)
			}
			select {
			case <-a.ShuttingDown():
				t.Error("ShuttingDown closed before shutdown")
			default:
			}
			cancel()
			select {
			case <-a.ShuttingDown():
			case <-time.After(20 * time.Second):
				t.Fatal("ShuttingDown not closed within 20s of cancelling Run")
			}
			if err := a.Check(); !errors.Is(err, rpc.ErrNotServing) {
				t.Errorf("Check during shutdown: %v; want rpc.ErrNotServing", err)
			}
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}
