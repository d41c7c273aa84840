package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/tlsconfig"
)

// The attack suite: each test attacks a cluster started with the
// documented secure settings (TLS with per-role certificates and an admin
// token), and checks that the attack is refused or contained: routing
// does not change, the stored assignment is untouched, health stays
// SERVING, and a legitimate task can still join afterwards.

func requireSecure(t *testing.T) {
	t.Helper()
	if !secure {
		t.Skip("attack tests run against the secure settings: set SLICERD_E2E_SECURE=1 (scripts/test.sh does)")
	}
}

// target is a secure single-node cluster with three tasks and a Clerk.
type target struct {
	t      *testing.T
	node   *slicerdNode
	clerk  *clerk.Clerk
	admin  *http.Client
	before *slicerv1.Assignment
	tasks  map[string]*kvTask // kv-0, kv-1, kv-2 by name
}

func startTarget(t *testing.T, extra ...string) *target {
	t.Helper()
	return startTargetWith(t, nil, extra...)
}

// startTargetWith is startTarget with taskArgs added to every kvserver's
// flags.
func startTargetWith(t *testing.T, taskArgs []string, extra ...string) *target {
	t.Helper()
	requireSecure(t)
	node := startSlicerd(t, "node-1", append([]string{"--data-dir", t.TempDir()}, extra...)...)
	tasks := map[string]*kvTask{}
	for i := range 3 {
		name := fmt.Sprintf("kv-%d", i)
		tasks[name] = startKV(t, name, node.gossipAddr, taskArgs...)
	}
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	admin, _ := rpcClient("")
	t.Cleanup(admin.CloseIdleConnections)
	tg := &target{t: t, node: node, clerk: c, admin: admin, tasks: tasks}
	testwait.Until(t, 30*time.Second, "an assignment over the three tasks", func() bool {
		a := c.Assignment()
		return a != nil && len(a.Tasks) == 3
	})
	tg.before = tg.stored()
	if tg.before.GetGeneration() != c.Assignment().Generation {
		testwait.Until(t, 10*time.Second, "the Clerk to hold the stored generation", func() bool {
			tg.before = tg.stored()
			return tg.before.GetGeneration() == c.Assignment().Generation
		})
	}
	return tg
}

// stored reads the job's stored assignment from the Backup, as an admin.
func (tg *target) stored() *slicerv1.Assignment {
	tg.t.Helper()
	b := slicerv1connect.NewBackupServiceClient(tg.admin, api.URL(tg.node.rpcAddr, true))
	resp, err := b.GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
	if err != nil {
		tg.t.Fatalf("reading the stored assignment: %v", err)
	}
	return resp.Msg.GetAssignment()
}

// contained checks what every attack must leave as it was, then that a
// legitimate task can still join.
func (tg *target) contained() {
	t := tg.t
	t.Helper()
	if got := tg.stored(); !proto.Equal(got, tg.before) {
		t.Errorf("the stored assignment changed:\nbefore %v\nafter  %v", tg.before, got)
	}
	if got := tg.clerk.Assignment(); got.Generation != tg.before.GetGeneration() || got.Incarnation != tg.before.GetIncarnation() {
		t.Errorf("routing changed: the Clerk holds generation %d (incarnation %s), the store %d (%s)",
			got.Generation, got.Incarnation, tg.before.GetGeneration(), tg.before.GetIncarnation())
	}
	health := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](
		tg.admin, api.URL(tg.node.rpcAddr, true)+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	resp, err := health.CallUnary(context.Background(), connect.NewRequest(&healthv1.HealthCheckRequest{}))
	if err != nil || resp.Msg.GetStatus() != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health after the attack: %v, %v; want SERVING", resp, err)
	}
	startKV(t, "kv-3", tg.node.gossipAddr)
	testwait.Until(t, 30*time.Second, "a legitimate task to join after the attack", func() bool {
		a := tg.clerk.Assignment()
		for _, task := range a.Tasks {
			if task.Name == "kv-3" {
				return true
			}
		}
		return false
	})
	after := tg.clerk.Assignment()
	for _, task := range after.Tasks {
		if !strings.HasPrefix(task.Name, "kv-") || len(task.Name) != 4 {
			t.Errorf("task %s (at %s) got slices: only kv-0 to kv-3 are legitimate", task.Name, task.Addr)
		}
	}
	t.Logf("contained: the store kept generation %d; after a legitimate task joined, generation %d over %d tasks",
		tg.before.GetGeneration(), after.Generation, len(after.Tasks))
}

// forged is an assignment that sends every key to the attacker.
func (tg *target) forged(addr string) *slicerv1.Assignment {
	a := proto.Clone(tg.before).(*slicerv1.Assignment)
	a.Generation = 1 << 62
	for _, task := range a.Tasks {
		task.Address = addr
	}
	return a
}

// rogueServer serves DistributorService and AssignerService with a forged
// assignment over TLS with cert (from any CA), and counts the calls.
type rogueServer struct {
	slicerv1connect.UnimplementedDistributorServiceHandler
	forged *slicerv1.Assignment
	calls  chan string
}

func (r *rogueServer) WatchAssignment(ctx context.Context, _ *connect.Request[slicerv1.WatchAssignmentRequest], s *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	select {
	case r.calls <- "watch":
	default:
	}
	if err := s.Send(&slicerv1.WatchAssignmentResponse{Assignment: r.forged}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

type rogueAssigner struct {
	slicerv1connect.UnimplementedAssignerServiceHandler
	*rogueServer
}

func (r rogueAssigner) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], s *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	return r.rogueServer.WatchAssignment(ctx, req, s)
}

func startRogue(t *testing.T, forged *slicerv1.Assignment, cert tls.Certificate) (*rogueServer, string) {
	t.Helper()
	r := &rogueServer{forged: forged, calls: make(chan string, 16)}
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewDistributorServiceHandler(r))
	mux.Handle(slicerv1connect.NewAssignerServiceHandler(rogueAssigner{rogueServer: r}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return r, ln.Addr().String()
}

// certFrom loads the certificate and key of files.
func certFrom(t *testing.T, f tlsconfig.Files) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// otherCA issues a certificate for ids from a CA the cluster does not
// trust.
func otherCA(t *testing.T, name string, ids ...identity.ID) tls.Certificate {
	t.Helper()
	ca, err := tlsconfig.NewCA("attacker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.IssueFiles(t.TempDir(), name, "", tlsconfig.Leaf{IDs: ids, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return certFrom(t, f)
}

// winningName returns a node name that the preference hash puts ahead of
// node-1 for job kv, so that without verification the cluster would take
// it as the job's Assigner.
func winningName() string {
	pref := lease.DefaultPreference()
	for i := 0; ; i++ {
		name := fmt.Sprintf("assigner-%d", i)
		if pref.Choose("kv", []string{"node-1", name}, nil, nil, "") == name {
			return name
		}
	}
}

// insiderKeys are the gossip keys of an attacker who holds the cluster's
// gossip key, as anyone on a task's host does: encryption keeps strangers
// out, certificates must stop the rest.
func insiderKeys(t *testing.T) [][]byte {
	t.Helper()
	key, err := gossip.ParseKey(testGossipKey)
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{key}
}

// joinFake joins gossip as name, claiming roles, with rpcAddr advertised,
// holding the gossip key.
func joinFake(t *testing.T, tg *target, name, rpcAddr string, roles ...gossip.Role) {
	t.Helper()
	cfg := gossip.TestConfig(name)
	cfg.Keys = insiderKeys(t)
	cfg.Self = gossip.Peer{Roles: roles, RPCAddr: rpcAddr}
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	if _, err := n.Join([]string{tg.node.gossipAddr}); err != nil {
		t.Fatalf("the fake member could not join gossip: %v", err)
	}
	tg.node.waitLine(20*time.Second, `ignoring a gossip member whose certificate does not back its claims`, `"member":"`+name+`"`)
}

func TestAttackFakeAssignerWithoutCertificate(t *testing.T) {
	tg := startTarget(t)
	name := winningName()
	rogue, addr := startRogue(t, tg.forged("127.0.0.1:1"), otherCA(t, name,
		identity.ID{Role: identity.Assigner, Node: name}, identity.ID{Role: identity.Distributor, Node: name}))
	joinFake(t, tg, name, addr, gossip.RoleAssigner, gossip.RoleDistributor)
	select {
	case c := <-rogue.calls:
		t.Errorf("a slicerd component called the fake assigner (%s)", c)
	default:
	}
	tg.contained()
}

func TestAttackFakeAssignerWithClientCertificate(t *testing.T) {
	tg := startTarget(t)
	name := winningName()
	// A certificate from the cluster's own CA, but for a client.
	cert := certFrom(t, issue("client-kv", identity.ID{Role: identity.Client, Job: "kv"}))
	rogue, addr := startRogue(t, tg.forged("127.0.0.1:1"), cert)
	joinFake(t, tg, name, addr, gossip.RoleAssigner, gossip.RoleDistributor)
	select {
	case c := <-rogue.calls:
		t.Errorf("a slicerd component called the fake assigner (%s)", c)
	default:
	}
	tg.contained()
}

func TestAttackForgedGenerationFromRogueDistributor(t *testing.T) {
	tg := startTarget(t)
	// A Clerk told of a rogue Distributor that serves generation 2^62,
	// with a certificate the cluster's CA did not issue for a slicerd
	// agent, never takes its assignment.
	for _, cert := range []tls.Certificate{
		otherCA(t, "rogue-dist", identity.ID{Role: identity.Distributor, Node: "rogue"}),
		certFrom(t, issue("task-kv-kv-0", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-0"})),
	} {
		_, addr := startRogue(t, tg.forged("127.0.0.1:1"), cert)
		victim := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{addr, tg.node.rpcAddr}, SubsetSize: 0})
		testwait.Until(t, 20*time.Second, "the victim Clerk to hold the real assignment", func() bool {
			a := victim.Assignment()
			return a != nil && a.Generation == tg.before.GetGeneration()
		})
		if a := victim.Assignment(); a.Generation != tg.before.GetGeneration() {
			t.Fatalf("the Clerk took generation %d from the rogue", a.Generation)
		}
	}
	tg.contained()
}

func TestAttackFakeTaskClaimsJob(t *testing.T) {
	tg := startTarget(t)
	// A task certificate for another job, and a task without any TLS.
	f := issue("task-web-w0", identity.ID{Role: identity.Task, Job: "web", Task: "w0"})
	evil := start(t, "kv-evil", bin.kvserver, "-job", "kv", "-task", "kv-evil", "-addr", "127.0.0.1:0",
		"-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local", "-join", tg.node.gossipAddr,
		"-tls-cert", f.Cert, "-tls-key", f.Key, "-tls-ca", f.CA)
	if code := evil.wait(30 * time.Second); code != 2 {
		t.Errorf("kvserver with another job's certificate exited %d, want 2 (refused at start)", code)
	}
	// Joining gossip without registering: the Assigner never counts it.
	joinFakeTask(t, tg, gossip.TaskMemberName("kv", "kv-evil2"), "kv", "kv-evil2")
	hc, url := rpcClient("")
	defer hc.CloseIdleConnections()
	reg := slicerv1connect.NewAssignerServiceClient(hc, url(tg.node.rpcAddr))
	_, err := reg.RegisterTask(context.Background(), connect.NewRequest(&slicerv1.RegisterTaskRequest{Job: "kv", Task: "kv-evil2", GossipName: gossip.TaskMemberName("kv", "kv-evil2")}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("registering a task with an admin certificate = %v, want PERMISSION_DENIED", err)
	}
	tg.contained()
}

func joinFakeTask(t *testing.T, tg *target, name, job, task string) {
	t.Helper()
	cfg := gossip.TestConfig(name)
	cfg.Keys = insiderKeys(t)
	cfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: job, Task: task, RPCAddr: "127.0.0.1:1"}
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	if _, err := n.Join([]string{tg.node.gossipAddr}); err != nil {
		t.Fatalf("the fake task could not join gossip: %v", err)
	}
}

// callers returns JobService and LoadService clients with no client
// certificate, and with a client certificate of job kv.
func callers(t *testing.T, tg *target) (anon, client *http.Client) {
	t.Helper()
	anonSrc, err := tlsconfig.Load(tlsconfig.Files{CA: pki.caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon = api.NewHTTPClient(anonSrc.ClientConfig(tlsconfig.WantAgent()))
	client, _ = rpcClient("kv")
	t.Cleanup(anon.CloseIdleConnections)
	t.Cleanup(client.CloseIdleConnections)
	return anon, client
}

func TestAttackWritesWithoutCredentials(t *testing.T) {
	tg := startTarget(t)
	anon, client := callers(t, tg)
	ctx := context.Background()
	url := api.URL(tg.node.rpcAddr, true)
	setCfg := connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 3, MaxRedundancy: 3}})
	report := func() *connect.Request[slicerv1.ReportLoadRequest] {
		return connect.NewRequest(&slicerv1.ReportLoadRequest{
			Job: "kv", Task: "kv-0", Generation: tg.before.GetGeneration(), WindowSeconds: 1,
			Slices: []*slicerv1.SliceLoad{{Start: 0, End: 1 << 63, Load: 1e15}},
		})
	}
	for _, c := range []struct {
		name string
		hc   *http.Client
		want connect.Code
	}{{"no certificate", anon, connect.CodeUnauthenticated}, {"a client certificate", client, connect.CodePermissionDenied}} {
		_, err := slicerv1connect.NewJobServiceClient(c.hc, url).SetJobConfig(ctx, setCfg)
		if connect.CodeOf(err) != c.want {
			t.Errorf("SetJobConfig with %s = %v, want %v", c.name, err, c.want)
		}
		_, err = slicerv1connect.NewLoadServiceClient(c.hc, url).ReportLoad(ctx, report())
		if connect.CodeOf(err) != c.want {
			t.Errorf("ReportLoad with %s = %v, want %v", c.name, err, c.want)
		}
		_, err = slicerv1connect.NewJobServiceClient(c.hc, url).DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"}))
		if connect.CodeOf(err) != c.want {
			t.Errorf("DeleteJob with %s = %v, want %v", c.name, err, c.want)
		}
	}
	// Another task's identity cannot report for kv-0.
	other, err := tlsconfig.Load(issue("task-kv-kv-1", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-1"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := api.NewHTTPClient(other.ClientConfig(tlsconfig.WantAgent()))
	defer hc.CloseIdleConnections()
	if _, err := slicerv1connect.NewLoadServiceClient(hc, url).ReportLoad(ctx, report()); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("ReportLoad for kv-0 with kv-1's certificate = %v, want PERMISSION_DENIED", err)
	}
	// A bearer token that is not the agent's.
	tok := slicerv1connect.NewJobServiceClient(anon, url, connect.WithInterceptors(api.BearerToken("not-the-token-not-the-token-not-the-token")))
	if _, err := tok.SetJobConfig(ctx, setCfg); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("SetJobConfig with a wrong token = %v, want UNAUTHENTICATED", err)
	}
	// Each kind of refusal is logged (and counted: slicerd_rpc_refused_total).
	tg.node.waitLine(10*time.Second, `"msg":"refused a call: unauthenticated"`, `"remote_addr":"127.0.0.1:`)
	tg.node.waitLine(10*time.Second, `"msg":"refused a call: denied"`, `"identity":"spiffe://slicerd/client/kv"`)
	// A TLS handshake with a certificate from another CA is refused.
	stranger := otherCA(t, "stranger", identity.ID{Role: identity.Admin, Name: "x"})
	present := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }
	if conn, err := tls.Dial("tcp", tg.node.rpcAddr, &tls.Config{InsecureSkipVerify: true, GetClientCertificate: present}); err == nil {
		_, _ = conn.Read(make([]byte, 1)) // TLS 1.3: the server's refusal arrives after the handshake
		conn.Close()
	}
	tg.node.waitLine(10*time.Second, `"msg":"refused a TLS handshake"`)
	tg.contained()
}

func TestAttackForgedForwardingHeader(t *testing.T) {
	tg := startTarget(t)
	_, client := callers(t, tg)
	ctx := context.Background()
	req := connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: &slicerv1.JobConfig{MinRedundancy: 3, MaxRedundancy: 3}})
	req.Header().Set(auth.ForwardedHeader, "node-1")
	req.Header().Set(auth.ForwardedForHeader, identity.ID{Role: identity.Admin, Name: "ops"}.String())
	_, err := slicerv1connect.NewJobServiceClient(client, api.URL(tg.node.rpcAddr, true)).SetJobConfig(ctx, req)
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("SetJobConfig with forged forwarding headers = %v, want PERMISSION_DENIED", err)
	}
	if strings.Contains(tg.node.output(), "forwards the job's writes here") {
		t.Error("the forged header made the assigner adopt the job")
	}
	tg.contained()
}

func TestAttackForeignHostHeader(t *testing.T) {
	tg := startTarget(t)
	hc, _ := rpcClient("")
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, api.URL(tg.node.rpcAddr, true)+slicerv1connect.JobServiceListJobsProcedure, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest && resp.StatusCode != http.StatusForbidden {
		t.Errorf("request with Host evil.example: HTTP %d, want it refused", resp.StatusCode)
	}
	tg.contained()
}

// rssBytes reads a process's resident memory from /proc.
func rssBytes(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmRSS:") }

// peakRSSBytes reads a process's peak resident memory from /proc.
func peakRSSBytes(t *testing.T, pid int) int64 { return procStatus(t, pid, "VmHWM:") }

func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc status", field)
	return 0
}

// idleConnBound is the documented bound on what one open but idle HTTP/2
// connection costs slicerd (docs/security.md): a TLS session and the
// HTTP/2 server's buffers. The test allows this much per connection
// slicerd holds, on top of its memory before the attack.
const idleConnBound = 64 << 10

// TestAttackIdleConnections opens 20,000 connections from one attacker
// address (127.0.0.2), each completing the TLS handshake and sending the
// HTTP/2 preface, then holding it open without a request. slicerd keeps
// at most --max-connections-per-ip of them and closes the rest at once;
// clients from other addresses are served throughout.
func TestAttackIdleConnections(t *testing.T) {
	tg := startTarget(t)
	pid := tg.node.cmd.Process.Pid
	before := rssBytes(t, pid)
	const attempts = 20000
	const perIP = 1024 // slicerd's default --max-connections-per-ip

	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range attempts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, ok := idleConn(tg.node.rpcAddr)
			if !ok {
				refused.Add(1)
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("attacker at 127.0.0.2: %d connections held open, %d refused", len(held), refused.Load())
	if len(held) > perIP {
		t.Errorf("slicerd holds %d connections from one address; the cap is %d", len(held), perIP)
	}
	after := rssBytes(t, pid)
	t.Logf("slicerd RSS %.1f MiB before, %.1f MiB with %d idle connections (%.1f KiB each)",
		float64(before)/(1<<20), float64(after)/(1<<20), len(held), float64(after-before)/float64(max(1, len(held)))/1024)
	if grown := after - before; grown > int64(len(held))*idleConnBound+32<<20 {
		t.Errorf("slicerd grew by %d MiB for %d idle connections; the documented bound is %d KiB each",
			grown>>20, len(held), idleConnBound>>10)
	}
	tg.contained()
}

// idleConn opens one attacker connection from 127.0.0.2: the TLS
// handshake, the HTTP/2 preface and an empty SETTINGS frame, then nothing.
// It reports whether slicerd kept it, judged by whether slicerd answered
// with its own SETTINGS.
func idleConn(addr string) (net.Conn, bool) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 10 * time.Second}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, false
	}
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	c := net.Conn(raw)
	if secure {
		tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			raw.Close()
			return nil, false
		}
		c = tc
	}
	preface := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0) // + SETTINGS, no payload
	if _, err := c.Write(preface); err != nil {
		c.Close()
		return nil, false
	}
	head := make([]byte, 9)
	if _, err := io.ReadFull(c, head); err != nil || head[3] != 4 {
		c.Close()
		return nil, false
	}
	raw.SetDeadline(time.Time{})
	return c, true
}

// TestAttackStrangerJoinsGossip tries to join the cluster's gossip without
// the key, and with a wrong one, as a member that claims to be an Assigner
// and one that claims to be a task.
func TestAttackStrangerJoinsGossip(t *testing.T) {
	tg := startTarget(t)
	wrong, err := gossip.ParseKey("d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktISE=")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name string
		keys [][]byte
		self gossip.Peer
	}{
		{"stranger-assigner", nil, gossip.Peer{Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1"}},
		{"kv/stranger", nil, gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "stranger", RPCAddr: "127.0.0.1:1"}},
		{"kv/wrong-key", [][]byte{wrong}, gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "wrong-key", RPCAddr: "127.0.0.1:1"}},
	} {
		cfg := gossip.TestConfig(c.name)
		cfg.Keys, cfg.Self = c.keys, c.self
		if c.keys != nil {
			cfg.KeyringFile = filepath.Join(t.TempDir(), fmt.Sprintf("keyring-%d.json", i))
		}
		n, err := gossip.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Shutdown() })
		if _, err := n.Join([]string{tg.node.gossipAddr}); err == nil {
			t.Errorf("%s joined the encrypted cluster", c.name)
		}
		for _, p := range n.Peers() {
			if p.Name == "node-1" {
				t.Errorf("%s sees the cluster's node-1 in its member list", c.name)
			}
		}
	}
	tg.contained()
}

// stalledTLSConnBound is what docs/operations.md allows one stalled TLS
// watch connection to cost slicerd at peak.
const stalledTLSConnBound = 100 << 10

// TestAttackSlowSubscribers opens 5,000 WatchAssignment streams of a
// 10,000-slice assignment that never read (each on its own TLS connection
// with a client certificate of the job, its flow-control window closed),
// then makes two new generations. slicerd's memory stays within the bound
// docs/operations.md gives ("Slow subscribers"), every stalled stream is
// reset after --stream-write-timeout, health stays SERVING, and a normal
// subscriber gets every generation.
func TestAttackSlowSubscribers(t *testing.T) {
	requireSecure(t)
	const slices, stalled, perIP = 10000, 5000, 1000
	dataDir := t.TempDir()
	seedSlices(t, dataDir, slices)
	node := startSlicerd(t, "node-1", "--data-dir", dataDir, "--stream-write-timeout", "5s")
	for i := range 2 {
		startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr)
	}
	c := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{node.rpcAddr}})
	testwait.Until(t, 30*time.Second, "the seeded assignment on the running tasks", func() bool {
		a := c.Assignment()
		return a != nil && len(a.Slices) >= slices/2 && len(a.Tasks) == 2 && a.Tasks[0].Addr != "127.0.0.1:1"
	})
	pid := node.cmd.Process.Pid
	before := rssBytes(t, pid)

	src := clientSource("kv")
	req, err := proto.Marshal(&slicerv1.WatchAssignmentRequest{Job: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	path := slicerv1connect.DistributorServiceWatchAssignmentProcedure
	conns := make([]net.Conn, 0, stalled)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var failed atomic.Int64
	for i := range stalled {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i/perIP))}, Timeout: 10 * time.Second}
			raw, err := d.Dial("tcp", node.rpcAddr)
			if err != nil {
				failed.Add(1)
				return
			}
			tc := tls.Client(raw, src.ClientConfig(tlsconfig.WantAgent()))
			if err := tc.Handshake(); err != nil {
				raw.Close()
				failed.Add(1)
				return
			}
			if err := testnet.StalledStream(tc, node.rpcAddr, path, req); err != nil {
				tc.Close()
				failed.Add(1)
				return
			}
			mu.Lock()
			conns = append(conns, tc)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d stalled subscribers could not be opened", failed.Load(), stalled)
	}
	// Two new generations while they are stalled: a task joins, then leaves.
	gen := c.Assignment().Generation
	extra := startKV(t, "kv-2", node.gossipAddr)
	testwait.Until(t, 60*time.Second, "the normal subscriber to see kv-2 join", func() bool {
		return len(c.Assignment().Tasks) == 3
	})
	extra.signal(syscall.SIGTERM)
	testwait.Until(t, 60*time.Second, "the normal subscriber to see kv-2 leave", func() bool {
		a := c.Assignment()
		return len(a.Tasks) == 2 && a.Generation >= gen+2
	})
	// Every stalled stream is reset once the write timeout passes.
	reset := 0
	for _, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := testnet.ResetCode(conn); err == nil {
			reset++
		}
	}
	peak := peakRSSBytes(t, pid)
	size := proto.Size(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(c.Assignment())})
	// The documented bound (docs/operations.md, "Slow subscribers"): the
	// 64 MiB send budget, max(size, 8 MiB) for each generation sent within
	// the write timeout by each sending role (here the seeded one, the
	// tasks' arrival and two more, by the Distributor and the Assigner),
	// and about 100 KB per stalled TLS connection at peak (its TLS and
	// HTTP/2 buffers, the frame it could not send, and the garbage
	// collector's slack).
	bound := int64(64<<20) + 5*2*int64(max(size, 8<<20)) + stalled*stalledTLSConnBound
	t.Logf("%d stalled subscribers of a %d-slice assignment (%d KiB encoded): slicerd RSS %.0f MiB before, peak %.0f MiB (bound %.0f MiB over the start); %d of %d streams reset by the write timeout",
		stalled, len(c.Assignment().Slices), size>>10, float64(before)/(1<<20), float64(peak)/(1<<20), float64(bound)/(1<<20), reset, len(conns))
	if peak-before > bound {
		t.Errorf("slicerd peaked at %d MiB over its start, above the documented bound of %d MiB", (peak-before)>>20, bound>>20)
	}
	if reset < len(conns) {
		t.Errorf("only %d of %d stalled streams were reset after the write timeout", reset, len(conns))
	}
	admin, _ := rpcClient("")
	defer admin.CloseIdleConnections()
	health := connect.NewClient[healthv1.HealthCheckRequest, healthv1.HealthCheckResponse](
		admin, api.URL(node.rpcAddr, true)+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	resp, err := health.CallUnary(context.Background(), connect.NewRequest(&healthv1.HealthCheckRequest{}))
	if err != nil || resp.Msg.GetStatus() != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health after the attack: %v, %v; want SERVING", resp, err)
	}
}

// seedSlices stores job kv with an assignment of n equal slices over
// tasks kv-0 and kv-1, and a configuration that keeps them unmerged.
func seedSlices(t *testing.T, dir string, n int) {
	t.Helper()
	ctx := context.Background()
	store, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := assign.DefaultConfig()
	cfg.MinRedundancy, cfg.MaxRedundancy = 1, 1
	cfg.MaxSlicesPerTask = assign.MaxSlicesPerTaskLimit
	cfg.MinSlicesPerTask = cfg.MaxSlicesPerTask // no merges
	if err := store.SetConfig(ctx, "kv", cfg); err != nil {
		t.Fatal(err)
	}
	tasks := []assign.Task{{Name: "kv-0", Addr: "127.0.0.1:1"}, {Name: "kv-1", Addr: "127.0.0.1:1"}}
	width := assign.KeySpaceEnd / assign.SliceKey(n)
	a := &assign.Assignment{Job: "kv", Generation: 1, Tasks: tasks, Slices: make([]assign.Slice, n)}
	for i := range n {
		a.Slices[i] = assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width, Tasks: []string{tasks[i%2].Name}}
	}
	a.Slices[n-1].End = assign.KeySpaceEnd
	if err := store.Commit(ctx, "kv", 0, a); err != nil {
		t.Fatal(err)
	}
}
