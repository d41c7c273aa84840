package roles

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/storage"
)

// openWatch opens a WatchAssignment stream on the Distributor or the
// Backup of addr and waits for its first message or its end. It returns
// the stream's error (nil while it runs) and a function that closes it.
func openWatch(t *testing.T, addr, job string, backup bool) (error, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hc := api.NewH2CClient()
	req := connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job})
	var stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse]
	var err error
	if backup {
		stream, err = slicerv1connect.NewBackupServiceClient(hc, api.RPCURL(addr)).WatchAssignment(ctx, req)
	} else {
		stream, err = slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr)).WatchAssignment(ctx, req)
	}
	closeIt := func() {
		cancel()
		if stream != nil {
			stream.Close()
		}
		hc.CloseIdleConnections()
	}
	t.Cleanup(closeIt)
	if err != nil {
		return err, closeIt
	}
	if !stream.Receive() {
		return stream.Err(), closeIt
	}
	return nil, closeIt
}

// Over --max-streams a new stream fails at once with RESOURCE_EXHAUSTED
// naming the flag, on every role; unary calls still work, and a stream is
// admitted again once one ends.
func TestMaxStreamsRefusesOverCap(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxStreams = 2
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")

	err, closeFirst := openWatch(t, node.RPCAddr(), "kv", false)
	if err != nil {
		t.Fatalf("first stream: %v", err)
	}
	// The Distributor's own pull from the Assigner is a stream too: wait
	// until it holds the second place.
	testwait.For(t, "the distributor's pull and one watch to be open", func() bool { return node.streams.Open() == 2 })
	for _, backup := range []bool{false, true} {
		err, _ := openWatch(t, node.RPCAddr(), "kv", backup)
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-streams") {
			t.Errorf("stream over the cap (backup %v) = %v; want RESOURCE_EXHAUSTED naming --max-streams", backup, err)
		}
	}
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	reflection := grpcreflect.NewClient(hc, api.RPCURL(node.RPCAddr())).NewStream(context.Background())
	_, err = reflection.ListServices()
	reflection.Close()
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("reflection stream over the cap = %v; want RESOURCE_EXHAUSTED", err)
	}
	if got := node.streams.Refused(); got != 3 {
		t.Errorf("Refused() = %d, want 3", got)
	}
	if status, err := healthFrom("127.0.0.1", node.RPCAddr()); err != nil || status != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health check at the stream cap: %v, %v; want SERVING", status, err)
	}

	closeFirst()
	testwait.For(t, "the closed stream to be released", func() bool { return node.streams.Open() == 1 })
	if err, _ := openWatch(t, node.RPCAddr(), "kv", true); err != nil {
		t.Errorf("stream after one closed: %v", err)
	}
}

// The RPC port announces --max-streams-per-connection as its HTTP/2
// SETTINGS_MAX_CONCURRENT_STREAMS.
func TestMaxStreamsPerConnectionAnnounced(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxStreamsPerConnection = 7
	node := startAgent(t, cfg)
	c := dialH2(t, node.RPCAddr(), "")
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; not a timing claim
	var hdr [9]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[3] != frameSettings {
		t.Fatalf("first frame: type %d, %v; want SETTINGS", hdr[3], err)
	}
	payload := make([]byte, int(binary.BigEndian.Uint32(append([]byte{0}, hdr[:3]...))))
	if _, err := io.ReadFull(c, payload); err != nil {
		t.Fatal(err)
	}
	const settingsMaxConcurrentStreams = 0x3
	for p := payload; len(p) >= 6; p = p[6:] {
		if binary.BigEndian.Uint16(p) == settingsMaxConcurrentStreams {
			if got := binary.BigEndian.Uint32(p[2:]); got != 7 {
				t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 7", got)
			}
			return
		}
	}
	t.Errorf("SETTINGS %x carries no SETTINGS_MAX_CONCURRENT_STREAMS", payload)
}

// Over --max-jobs, SetJobConfig for a new job fails with RESOURCE_EXHAUSTED
// naming the flag and a job announced only by a task is not taken on;
// the jobs held are still configured and served.
func TestMaxJobsRefusesNewJobs(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxJobs = 2
	node := startAgent(t, cfg)
	jobs := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()))
	ctx := context.Background()
	set := func(job string, maxRedundancy uint32) error {
		_, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
			Job: job, Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: maxRedundancy}}))
		return err
	}
	for _, job := range []string{"a", "b"} {
		if err := set(job, 1); err != nil {
			t.Fatalf("SetJobConfig %s: %v", job, err)
		}
	}
	err := set("c", 1)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-jobs") {
		t.Errorf("SetJobConfig for a third job = %v; want RESOURCE_EXHAUSTED naming --max-jobs", err)
	}
	if err := set("a", 2); err != nil {
		t.Errorf("SetJobConfig for a job held, at the cap: %v", err)
	}

	taskMember(t, "d", "t0", node.GossipAddr())
	taskMember(t, "a", "t0", node.GossipAddr())
	seesTask(t, node, "d", "t0")
	w := watchJob(t, node.RPCAddr(), "a", false)
	w.until(t, "job a's assignment", hasTasks("t0"))
	if _, err := node.store.Load(ctx, "d"); err == nil {
		t.Error("job d, announced by a task over the cap, was stored")
	}
	resp, err := jobs.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range resp.Msg.GetJobs() {
		names = append(names, j.GetName())
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("ListJobs = %v, want [a b]", names)
	}
	if _, err := jobs.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "c"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob c = %v; want NOT_FOUND: the refused job must not be stored", err)
	}
}

// Over --max-load-reports-per-second and its burst, a task's report fails
// with RESOURCE_EXHAUSTED saying when to retry; another task still reports.
func TestLoadReportRateLimit(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxLoadReportsPerSecond = 0.001 // no token comes back during the test
	cfg.LoadReportBurst = 2
	node := startAgent(t, cfg)
	taskMember(t, "kv", "kv-0", node.GossipAddr())
	taskMember(t, "kv", "kv-1", node.GossipAddr())
	testwait.For(t, "gossip to list both tasks", func() bool { return len(node.assigner.LiveTasks("kv")) == 2 })
	client := reportClient(t, node)
	report := func(task string) error {
		req := goodReport()
		req.Task = task
		_, err := client.ReportLoad(context.Background(), connect.NewRequest(req))
		return err
	}
	for i := range 2 {
		if err := report("kv-0"); err != nil {
			t.Fatalf("report %d of the burst: %v", i+1, err)
		}
	}
	err := report("kv-0")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "retry in") ||
		!strings.Contains(err.Error(), "--max-load-reports-per-second") {
		t.Errorf("report over the rate = %v; want RESOURCE_EXHAUSTED with retry guidance naming the flag", err)
	}
	if err := report("kv-1"); err != nil {
		t.Errorf("another task's report: %v", err)
	}

	// Readiness reports have a bucket of their own: kv-1 sends its
	// burst of them and still has a load report left, and kv-0, out of
	// load reports, is not out of readiness reports.
	ready := func(task string) error {
		_, err := client.ReportReady(context.Background(), connect.NewRequest(&slicerv1.ReportReadyRequest{Job: "kv", Task: task, Generation: 1}))
		return err
	}
	for i := range 2 {
		if err := ready("kv-1"); err != nil {
			t.Fatalf("readiness report %d of the burst: %v", i+1, err)
		}
	}
	if err := ready("kv-1"); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "readiness reports per second") {
		t.Errorf("readiness report over the rate = %v; want RESOURCE_EXHAUSTED naming readiness reports", err)
	}
	if err := report("kv-1"); err != nil {
		t.Errorf("kv-1's second load report after its readiness reports: %v", err)
	}
	if err := ready("kv-0"); err != nil {
		t.Errorf("kv-0's readiness report after its load reports: %v", err)
	}
}

// --max-slices-per-job caps the slices a forged, huge load splits a job
// into, and the entries one load report may carry.
func TestMaxSlicesPerJobUnderForgedLoad(t *testing.T) {
	const limit = 30
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxSlicesPerJob = limit
	cfg.RebalanceInterval = 20 * time.Millisecond
	node := startAgent(t, cfg)
	taskMember(t, "kv", "kv-0", node.GossipAddr())
	taskMember(t, "kv", "kv-1", node.GossipAddr())
	testwait.For(t, "gossip to list both tasks", func() bool { return len(node.assigner.LiveTasks("kv")) == 2 })
	w := watchJob(t, node.RPCAddr(), "kv", false)
	w.until(t, "the first assignment", hasTasks("kv-0", "kv-1"))
	client := reportClient(t, node)

	over := &slicerv1.ReportLoadRequest{Job: "kv", Task: "kv-0", Generation: 1, WindowSeconds: 1}
	for i := range limit + 1 {
		over.Slices = append(over.Slices, &slicerv1.SliceLoad{Start: uint64(i), End: uint64(i + 1), Load: 1})
	}
	if _, err := client.ReportLoad(context.Background(), connect.NewRequest(over)); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), "--max-slices-per-job") {
		t.Errorf("report with %d slices = %v; want INVALID_ARGUMENT naming --max-slices-per-job", limit+1, err)
	}

	// Both tasks keep reporting a huge load on a quarter of the key
	// space; every decision splits as far as it may.
	forge := func() {
		for _, task := range []string{"kv-0", "kv-1"} {
			req := &slicerv1.ReportLoadRequest{Job: "kv", Task: task, Generation: 1, WindowSeconds: 1,
				Slices: []*slicerv1.SliceLoad{{Start: 0, End: 1 << 62, Load: assign.MaxLoad}}}
			client.ReportLoad(context.Background(), connect.NewRequest(req)) // a report racing a decision may be refused; the next one lands
		}
	}
	most := 0
	testwait.For(t, "decisions to split the job to the cap", func() bool {
		forge()
		select {
		case a := <-w.latest:
			most = max(most, len(a.Slices))
			if most > limit {
				t.Fatalf("generation %d has %d slices, above --max-slices-per-job %d", a.Generation, len(a.Slices), limit)
			}
		default:
		}
		return most == limit
	})
}

func TestConfigValidateCaps(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"no streams":            {func(c *Config) { c.MaxStreams = 0 }, "max streams (--max-streams) is 0"},
		"no streams per conn":   {func(c *Config) { c.MaxStreamsPerConnection = 0 }, "max streams per connection (--max-streams-per-connection) is 0"},
		"huge streams per conn": {func(c *Config) { c.MaxStreamsPerConnection = 1 << 30 }, "max streams per connection"},
		"no jobs":               {func(c *Config) { c.MaxJobs = -1 }, "max jobs (--max-jobs) is -1"},
		"negative starting":     {func(c *Config) { c.MaxStartingRPCs = -1 }, "max starting RPCs (--max-starting-rpcs) is -1"},
		"huge starting":         {func(c *Config) { c.MaxStartingRPCs = 1 << 30 }, "max starting RPCs"},
		"no slices":             {func(c *Config) { c.MaxSlicesPerJob = 0 }, "max slices per job (--max-slices-per-job) is 0"},
		"huge slices":           {func(c *Config) { c.MaxSlicesPerJob = assign.MaxSlicesLimit + 1 }, "max slices per job"},
		"no report rate":        {func(c *Config) { c.MaxLoadReportsPerSecond = 0 }, "max load reports per second"},
		"infinite report rate":  {func(c *Config) { c.MaxLoadReportsPerSecond = math.Inf(1) }, "max load reports per second"},
		"no report burst":       {func(c *Config) { c.LoadReportBurst = 0 }, "load report burst (--load-report-burst) is 0"},
	} {
		c := testConfig(t, "node-1", t.TempDir())
		tc.edit(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v; want ErrConfig mentioning %q", name, err, tc.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil && !strings.Contains(err.Error(), "node name") {
		t.Errorf("defaults: %v", err)
	}
}

// A Slicelet whose reports the Assigner refuses over the rate keeps
// running and keeps its load for a later report, as after any failed
// report.
func TestSliceletRetriesRateLimitedReports(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxLoadReportsPerSecond = 0.001 // no token comes back during the test
	cfg.LoadReportBurst = 1
	node := startAgent(t, cfg)
	sl, err := slicelet.New(slicelet.Config{
		Job: "kv", Task: "kv-0", Addr: "127.0.0.1:9000",
		Join:       []string{node.GossipAddr()},
		Gossip:     gossip.TestConfig("replaced"),
		LoadWindow: 20 * time.Millisecond,
		Logger:     testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("slicelet Run: %v", err)
		}
	}()
	<-sl.Ready()
	testwait.For(t, "the Assigner to refuse three reports", func() bool {
		sl.ReportLoadString("user:42", 1)
		return node.assigner.RefusedReports() >= 3
	})
	select {
	case err := <-done:
		t.Fatalf("the Slicelet stopped after refused reports: %v", err)
	default:
	}
	// The Assigner took the burst's one report. The Slicelet may not
	// have seen it accepted: on a busy machine its report can outlast
	// the 20 ms window it allows a report after the Assigner took it.
	stored := node.assigner.HasReport("kv", "kv-0")
	if !stored {
		t.Error("the Assigner holds no load of kv-0; want the burst's one report")
	}
	if got := sl.LoadReportsSent(); got > 1 {
		t.Errorf("LoadReportsSent() = %d; want at most 1, the burst's one report", got)
	}
}

// An Assigner started with caps below what its store holds loses
// nothing: every stored job is served, and a stored assignment with more
// slices than --max-slices-per-job is served as stored.
func TestStoredBeyondCapsStillServed(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tasks []assign.Task
	for i := range 50 {
		tasks = append(tasks, assign.Task{Name: fmt.Sprintf("t%02d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 10000+i)})
	}
	big, err := assign.Initial("kv", tasks, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, "kv", 0, big); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"a", "b"} {
		if err := st.SetConfig(ctx, job, assign.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	cfg := testConfig(t, "node-1", dir)
	cfg.MaxJobs = 1
	cfg.MaxSlicesPerJob = 10
	node := startAgent(t, cfg)
	w := watchJob(t, node.RPCAddr(), "kv", false)
	if got := w.until(t, "the stored assignment", func(*assign.Assignment) bool { return true }); len(got.Slices) != len(big.Slices) {
		t.Errorf("served %d slices; want the %d stored", len(got.Slices), len(big.Slices))
	}
	jobs := slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(node.RPCAddr()))
	resp, err := jobs.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range resp.Msg.GetJobs() {
		names = append(names, j.GetName())
	}
	if strings.Join(names, ",") != "a,b,kv" {
		t.Errorf("ListJobs = %v; want every stored job [a b kv]", names)
	}
	set := func(job string) error {
		_, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
			Job: job, Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 2}}))
		return err
	}
	if err := set("b"); err != nil {
		t.Errorf("SetJobConfig for a stored job over the cap: %v", err)
	}
	if err := set("d"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("SetJobConfig for a new job over the cap = %v; want RESOURCE_EXHAUSTED", err)
	}
}
