package roles

import (
	"context"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/tlsconfig"
	"github.com/slicerd/slicerd/tlsconfig/tlstest"
)

// testPKI is a CA in a temporary directory that issues certificates on
// demand.
type testPKI struct{ *tlstest.PKI }

func newTestPKI(t testing.TB) *testPKI { return &testPKI{tlstest.New(t, "test CA")} }

// source issues a certificate with ids and loads it.
func (p *testPKI) source(name string, ids ...identity.ID) *tlsconfig.Source {
	return p.Source(name, ids...)
}

func agentIDs(node string, roles ...gossip.Role) []identity.ID {
	var ids []identity.ID
	for _, r := range roles {
		ids = append(ids, identity.ID{Role: identity.Role(r), Node: node})
	}
	return ids
}

// tlsConfig is testConfig with TLS on and an admin token.
func (p *testPKI) agentConfig(t *testing.T, name string) Config {
	cfg := testConfig(t, name, t.TempDir())
	cfg.TLS = p.source(name, agentIDs(name, cfg.Roles...)...)
	cfg.AdminTokens = []auth.Token{{Name: "ops", Secret: testToken}}
	return cfg
}

const testToken = "0123456789abcdef0123456789abcdef"

// jobClientAs calls the agent's JobService with src's certificate (none
// when nil) and, when token is set, a bearer token.
func jobClientAs(t *testing.T, node *running, src *tlsconfig.Source, token string) slicerv1connect.JobServiceClient {
	t.Helper()
	hc := api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent(identity.Assigner)))
	t.Cleanup(hc.CloseIdleConnections)
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(api.BearerToken(token)))
	}
	return slicerv1connect.NewJobServiceClient(hc, api.URL(node.RPCAddr(), true), opts...)
}

func startTLSTask(t testing.TB, node *running, src *tlsconfig.Source, job, task string) *slicelet.Slicelet {
	return startTask(t, node, src, job, task)
}

// startTask runs a Slicelet for job/task joined to node, over TLS when src
// is set, until the test ends.
func startTask(t testing.TB, node *running, src *tlsconfig.Source, job, task string) *slicelet.Slicelet {
	return runSlicelet(t, node, slicelet.Config{Job: job, Task: task, TLS: src})
}

// runSlicelet runs a Slicelet configured by cfg, joined to node with test
// gossip timers (and cfg.Gossip's keys and keyring file), until the test
// ends. An empty Addr is 127.0.0.1:9000.
func runSlicelet(t testing.TB, node *running, cfg slicelet.Config) *slicelet.Slicelet {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:9000"
	}
	g := gossip.TestConfig("replaced")
	g.Keys, g.KeyringFile = cfg.Gossip.Keys, cfg.Gossip.KeyringFile
	cfg.Join, cfg.Gossip = []string{node.GossipAddr()}, g
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	sl, err := slicelet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("slicelet Run: %v", err)
		}
	})
	return sl
}

func TestTLSAuthorizesByIdentity(t *testing.T) {
	pki := newTestPKI(t)
	node := startAgent(t, pki.agentConfig(t, "a1"))
	ctx := context.Background()
	cfgReq := func(job string) *connect.Request[slicerv1.SetJobConfigRequest] {
		return connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: job, Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1}})
	}

	anon := pki.source("anon-ca-only")
	anonClient := jobClientAs(t, node, anon, "")
	if _, err := anonClient.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("ListJobs without a certificate = %v, want UNAUTHENTICATED", err)
	}
	client := pki.source("client-kv", identity.ID{Role: identity.Client, Job: "kv"})
	if _, err := jobClientAs(t, node, client, "").SetJobConfig(ctx, cfgReq("kv")); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("SetJobConfig with a client certificate = %v, want PERMISSION_DENIED", err)
	}
	if _, err := jobClientAs(t, node, client, "wrong-token-wrong-token-wrong-tok").SetJobConfig(ctx, cfgReq("kv")); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("SetJobConfig with an unknown token = %v, want UNAUTHENTICATED", err)
	}
	if _, err := jobClientAs(t, node, anon, testToken).SetJobConfig(ctx, cfgReq("kv")); err != nil {
		t.Errorf("SetJobConfig with the admin token: %v", err)
	}
	admin := pki.source("admin", identity.ID{Role: identity.Admin, Name: "ops"})
	if _, err := jobClientAs(t, node, admin, "").SetJobConfig(ctx, cfgReq("web")); err != nil {
		t.Errorf("SetJobConfig with an admin certificate: %v", err)
	}

	// A load report is accepted only from the task it names.
	task := pki.source("task-kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"})
	hc := api.NewHTTPClient(task.ClientConfig(tlsconfig.WantAgent()))
	t.Cleanup(hc.CloseIdleConnections)
	load := slicerv1connect.NewLoadServiceClient(hc, api.URL(node.RPCAddr(), true))
	other := goodReport()
	other.Task = "kv-1"
	if _, err := load.ReportLoad(ctx, connect.NewRequest(other)); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("ReportLoad for another task = %v, want PERMISSION_DENIED", err)
	}

	// A client of one job cannot watch another.
	dist := slicerv1connect.NewDistributorServiceClient(api.NewHTTPClient(client.ClientConfig(tlsconfig.WantAgent())), api.URL(node.RPCAddr(), true))
	if _, err := dist.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "web"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("GetAssignment of another job = %v, want PERMISSION_DENIED", err)
	}

	// A server with another node's certificate is refused by clients
	// that expect this node.
	hc2 := api.NewHTTPClient(admin.ClientConfig(tlsconfig.WantNode(identity.Assigner, "a2")))
	t.Cleanup(hc2.CloseIdleConnections)
	if _, err := slicerv1connect.NewJobServiceClient(hc2, api.URL(node.RPCAddr(), true)).ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{})); err == nil {
		t.Error("a client expecting node a2 accepted a1's certificate")
	}
}

func TestTLSTasksNeedRegistration(t *testing.T) {
	pki := newTestPKI(t)
	node := startAgent(t, pki.agentConfig(t, "a1"))
	sl := startTLSTask(t, node, pki.source("task-kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"}), "kv", "kv-0")
	<-sl.Ready()

	// A member that claims to be a task of kv, without registering, is in
	// gossip but never in the Assigner's view.
	gcfg := gossip.TestConfig("kv/evil")
	gcfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "evil", RPCAddr: "127.0.0.1:6666"}
	evil, err := gossip.Start(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Shutdown()
	if _, err := evil.Join([]string{node.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "gossip to list the unregistered member", func() bool {
		for _, p := range node.rawPeers() {
			if p.Name == "kv/evil" {
				return true
			}
		}
		return false
	})
	// A task certificate for kv-0 cannot register the member as evil.
	task := pki.source("task-kv-0b", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"})
	hc := api.NewHTTPClient(task.ClientConfig(tlsconfig.WantAgent()))
	t.Cleanup(hc.CloseIdleConnections)
	reg := slicerv1connect.NewAssignerServiceClient(hc, api.URL(node.RPCAddr(), true))
	_, err = reg.RegisterTask(context.Background(), connect.NewRequest(&slicerv1.RegisterTaskRequest{Job: "kv", Task: "evil", GossipName: "kv/evil"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("registering kv/evil with kv-0's certificate = %v, want PERMISSION_DENIED", err)
	}
	for _, p := range node.Peers() {
		if p.Name == "kv/evil" {
			t.Fatalf("the unregistered member is in the verified view: %+v", p)
		}
	}
	a := sl.Assignment()
	for _, task := range a.Tasks {
		if task.Name == "evil" {
			t.Fatalf("assignment gives slices to the unregistered member: %v", a.Tasks)
		}
	}
}

func TestTLSIgnoresUnbackedAssigner(t *testing.T) {
	pki := newTestPKI(t)
	node := startAgent(t, pki.agentConfig(t, "a1"))
	// A second agent whose certificate names a different node: its claim
	// to be Assigner "zz" is never believed.
	cfg := pki.agentConfig(t, "zz")
	cfg.TLS = pki.source("zz-wrong", agentIDs("other", cfg.Roles...)...)
	cfg.Gossip.Join = []string{node.GossipAddr()}
	// Built by hand: Validate refuses the mismatched certificate.
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted a certificate naming another node")
	}
	gcfg := gossip.TestConfig("zz")
	rcfg := pki.agentConfig(t, "other")
	rcfg.Gossip.Join = []string{node.GossipAddr()}
	rogue := startAgent(t, rcfg)
	gcfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleAssigner, gossip.RoleDistributor}, RPCAddr: rogue.RPCAddr()}
	fake, err := gossip.Start(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Shutdown()
	if _, err := fake.Join([]string{node.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the rogue agent to be verified", func() bool {
		for _, p := range node.Peers() {
			if p.Name == "other" {
				return true
			}
		}
		return false
	})
	for _, p := range node.Peers() {
		if p.Name == "zz" {
			t.Fatalf("a member whose address holds another node's certificate is believed: %+v", p)
		}
	}
}

// TestTLSForwardsWithCallerIdentity sends writes to the Assigner that is
// not the job's preferred one: it forwards them with the caller's verified
// identity, which the preferred Assigner believes because the forwarding
// Assigner's certificate names it.
func TestTLSForwardsWithCallerIdentity(t *testing.T) {
	pki := newTestPKI(t)
	a1 := startAgent(t, pki.agentConfig(t, "a1"))
	cfg2 := pki.agentConfig(t, "a2")
	cfg2.Gossip.Join = []string{a1.GossipAddr()}
	a2 := startAgent(t, cfg2)
	testwait.For(t, "both assigners to see each other verified", func() bool {
		return len(a1.Peers()) == 2 && len(a2.Peers()) == 2
	})
	sl := startTLSTask(t, a1, pki.source("task-kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"}), "kv", "kv-0")
	<-sl.Ready()
	var other *running // the Assigner kv's writes are forwarded from
	testwait.For(t, "both assigners to agree on kv's preferred assigner", func() bool {
		p1, p2 := a1.assigner.Preferred("kv"), a2.assigner.Preferred("kv")
		if p1 == "" || p1 != p2 {
			return false
		}
		other = a2
		if p1 == "a2" {
			other = a1
		}
		return true
	})
	ctx := context.Background()
	admin := pki.source("admin", identity.ID{Role: identity.Admin, Name: "ops"})
	_, err := jobClientAs(t, other, admin, "").SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 2}}))
	if err != nil {
		t.Fatalf("SetJobConfig through the other assigner: %v", err)
	}
	if other.ForwardedWrites() == 0 {
		t.Fatal("the write was not forwarded")
	}
	client := pki.source("client-kv", identity.ID{Role: identity.Client, Job: "kv"})
	_, err = jobClientAs(t, other, client, "").SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{
		Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 1}}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("SetJobConfig by a client through the other assigner = %v, want PERMISSION_DENIED", err)
	}
	task := pki.source("task-kv-0b", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"})
	hc := api.NewHTTPClient(task.ClientConfig(tlsconfig.WantAgent()))
	t.Cleanup(hc.CloseIdleConnections)
	load := slicerv1connect.NewLoadServiceClient(hc, api.URL(other.RPCAddr(), true))
	report := &slicerv1.ReportLoadRequest{Job: "kv", Task: "kv-0", Generation: sl.Assignment().Generation, WindowSeconds: 1}
	if _, err := load.ReportLoad(ctx, connect.NewRequest(report)); err != nil {
		t.Errorf("ReportLoad through the other assigner: %v", err)
	}
}

// With TLS, ListJobs shows a caller only the jobs GetJob would: a task or
// client certificate of another job lists none of kv's tasks and
// addresses; kv's own task, a client of every job and an admin list kv.
func TestTLSListJobsShowsOnlyReadableJobs(t *testing.T) {
	pki := newTestPKI(t)
	node := startAgent(t, pki.agentConfig(t, "a1"))
	sl := startTLSTask(t, node, pki.source("task-kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"}), "kv", "kv-0")
	<-sl.Ready()
	list := func(who string, id identity.ID) []string {
		t.Helper()
		src := pki.source(who, id)
		hc := api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent()))
		t.Cleanup(hc.CloseIdleConnections)
		resp, err := slicerv1connect.NewJobServiceClient(hc, api.URL(node.RPCAddr(), true)).ListJobs(context.Background(), connect.NewRequest(&slicerv1.ListJobsRequest{}))
		if err != nil {
			t.Fatalf("ListJobs as %s: %v", who, err)
		}
		var names []string
		for _, j := range resp.Msg.GetJobs() {
			names = append(names, j.GetName())
		}
		return names
	}
	for _, c := range []struct {
		who  string
		id   identity.ID
		want bool
	}{
		{"task-other", identity.ID{Role: identity.Task, Job: "other", Task: "o0"}, false},
		{"client-other", identity.ID{Role: identity.Client, Job: "other"}, false},
		{"task-kv-1", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-1"}, true},
		{"client-any", identity.ID{Role: identity.Client, Job: identity.Any}, true},
		{"admin", identity.ID{Role: identity.Admin, Name: "ops"}, true},
	} {
		if got := slices.Contains(list(c.who, c.id), "kv"); got != c.want {
			t.Errorf("ListJobs as %s lists kv: %v, want %v", c.who, got, c.want)
		}
	}
}

// With TLS, a watch stream that says it is a relay's is sent first only
// when the caller's certificate names a Distributor: a task or a client
// saying so is served as any other stream.
func TestTLSRelayStreamsByIdentity(t *testing.T) {
	pki := newTestPKI(t)
	node := startAgent(t, pki.agentConfig(t, "a1"))
	sl := startTLSTask(t, node, pki.source("task-kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"}), "kv", "kv-0")
	<-sl.Ready()
	// watch opens a stream claiming to be a relay's with src's
	// certificate and returns once the first assignment arrived, so that
	// the stream is registered.
	watch := func(src *tlsconfig.Source) (stop func()) {
		t.Helper()
		hc := api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent()))
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := slicerv1connect.NewDistributorServiceClient(hc, api.URL(node.RPCAddr(), true)).WatchAssignment(ctx,
			connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", Relay: true}))
		if err == nil && !stream.Receive() {
			err = stream.Err()
		}
		stop = func() {
			cancel()
			if stream != nil {
				stream.Close()
			}
			hc.CloseIdleConnections()
		}
		if err != nil {
			stop()
			t.Fatalf("watching kv: %v", err)
		}
		return stop
	}
	for name, id := range map[string]identity.ID{
		"task-kv-1":   {Role: identity.Task, Job: "kv", Task: "kv-1"},
		"client-kv":   {Role: identity.Client, Job: "kv"},
		"assigner-a9": {Role: identity.Assigner, Node: "a9"},
	} {
		stop := watch(pki.source(name, id))
		if n := node.Relays("kv"); n != 0 {
			t.Errorf("%d relay streams after one from %s", n, name)
		}
		stop()
	}
	stop := watch(pki.source("distributor-d9", identity.ID{Role: identity.Distributor, Node: "d9"}))
	if n := node.Relays("kv"); n != 1 {
		t.Errorf("%d relay streams after a Distributor's, want 1", n)
	}
	stop()
	testwait.For(t, "the relay's stream to end", func() bool { return node.Relays("kv") == 0 })
}
