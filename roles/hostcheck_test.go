package roles

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/testlog"
)

// hostTransport sends every request with its Host header set to host, as
// a browser does after DNS rebinding: the connection goes to slicerd's
// address, the header names the attacker's domain.
type hostTransport struct {
	host string
	rt   http.RoundTripper
}

func (h hostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = h.host
	return h.rt.RoundTrip(r)
}

// hostClient is an h2c client whose requests carry the Host header host
// (with the node's port).
func hostClient(t *testing.T, addr, host string) *http.Client {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	hc := api.NewH2CClient()
	hc.Transport = hostTransport{host: net.JoinHostPort(host, port), rt: hc.Transport}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

func healthAs(t *testing.T, addr, host string) (healthv1.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return checkHealth(ctx, hostClient(t, addr, host), addr)
}

// A request whose Host names a foreign domain is refused with a message
// naming the host and --allowed-hosts: a gRPC health check gets
// PERMISSION_DENIED, a plain request 421; the refusals are logged once per
// interval with a count. IP addresses and localhost pass, and a watch
// stream keeps working.
func TestHostCheckRefusesForeignHost(t *testing.T) {
	var logs testlog.Buffer
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	node := startAgent(t, cfg)
	addr := node.RPCAddr()
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	w := watchJob(t, addr, "kv", false)

	_, err := healthAs(t, addr, "evil.example")
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `"evil.example:`) ||
		!strings.Contains(err.Error(), "--allowed-hosts") {
		t.Errorf("health check with Host evil.example: %v; want PERMISSION_DENIED naming the host and --allowed-hosts", err)
	}
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, api.RPCURL(addr)+"/", nil)
		req.Host = "evil.example"
		resp, err := http1Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), `"evil.example"`) {
			t.Errorf("GET with Host evil.example: %d %q; want 421 naming the host", resp.StatusCode, body)
		}
	}
	// A Connect JSON call, as curl or a page's fetch would make it.
	hc := http1Client()
	hc.Transport = hostTransport{host: "rebind.evil.example", rt: hc.Transport}
	if code, body := postJSON(t, hc, addr, slicerv1connect.JobServiceGetJobProcedure[1:], `{"job":"kv"}`); code == http.StatusOK ||
		!strings.Contains(string(body), "permission_denied") {
		t.Errorf("Connect JSON call with a foreign Host: %d %s; want permission_denied", code, body)
	}

	for _, host := range []string{"127.0.0.1", "localhost", "LocalHost.", "::1", "10.9.8.7"} {
		if status, err := healthAs(t, addr, host); err != nil || status != healthv1.HealthCheckResponse_SERVING {
			t.Errorf("health check with Host %s: %v, %v; want SERVING", host, status, err)
		}
	}
	if got := node.hosts.Refused(); got != 4 {
		t.Errorf("Refused() = %d, want 4", got)
	}
	stillWatching(t, node, w)

	if n := strings.Count(logs.String(), "refused requests with a foreign Host header"); n != 1 {
		t.Errorf("log after 4 refusals within 10s has %d lines about them, want 1:\n%s", n, logs.String())
	}
	node.stop(t)
	if !strings.Contains(logs.String(), "refused=3") || !strings.Contains(logs.String(), "refused_total=4") {
		t.Errorf("log at shutdown does not count the 3 refusals since the first line:\n%s", logs.String())
	}
}

// --allowed-hosts lets a name through, and a watch over it works; other
// names are still refused. "*" allows any name.
func TestHostCheckAllowedHosts(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.AllowedHosts = []string{"slicerd.test", "*.svc.test"}
	node := startAgent(t, cfg)
	addr := node.RPCAddr()
	for _, host := range []string{"slicerd.test", "SLICERD.test", "node-1.svc.test"} {
		if status, err := healthAs(t, addr, host); err != nil || status != healthv1.HealthCheckResponse_SERVING {
			t.Errorf("health check with allowed Host %s: %v, %v; want SERVING", host, status, err)
		}
	}
	for _, host := range []string{"evil.example", "slicerd.test.evil.example", "svc.test"} {
		if _, err := healthAs(t, addr, host); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("health check with Host %s: %v; want PERMISSION_DENIED", host, err)
		}
	}

	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := slicerv1connect.NewDistributorServiceClient(hostClient(t, addr, "slicerd.test"), api.RPCURL(addr)).
		WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for {
		if !stream.Receive() {
			t.Fatalf("watch with Host slicerd.test ended: %v", stream.Err())
		}
		a, err := api.FromProto(stream.Msg().GetAssignment())
		if err == nil && slices.Equal(taskNames(a), []string{"t0"}) {
			break
		}
	}

	cfg = testConfig(t, "node-2", t.TempDir())
	cfg.AllowedHosts = []string{"*"}
	open := startAgent(t, cfg)
	if status, err := healthAs(t, open.RPCAddr(), "evil.example"); err != nil || status != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health check with --allowed-hosts '*' and Host evil.example: %v, %v; want SERVING", status, err)
	}
}

func TestOwnHosts(t *testing.T) {
	for _, tc := range []struct {
		rpc, advertise string
		want           []string
	}{
		{"127.0.0.1:7070", "", []string{"127.0.0.1"}},
		{":7070", "node-1.internal:7070", []string{"node-1.internal"}},
		{"slicerd-a:7070", "10.0.0.5:7070", []string{"slicerd-a", "10.0.0.5"}},
		{"[::1]:7070", "", []string{"::1"}},
	} {
		if got := ownHosts(Config{RPCAddr: tc.rpc, AdvertiseRPCAddr: tc.advertise}); !slices.Equal(got, tc.want) {
			t.Errorf("ownHosts(%q, %q) = %q, want %q", tc.rpc, tc.advertise, got, tc.want)
		}
	}
}

func TestValidateAllowedHosts(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	for _, bad := range []string{"slicerd.test:7070", "http://slicerd.test", ""} {
		cfg.AllowedHosts = []string{bad}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "allowed hosts") {
			t.Errorf("AllowedHosts %q: Validate() = %v; want an error naming allowed hosts", bad, err)
		}
	}
	cfg.AllowedHosts = []string{"*", "a.test", "*.b.test"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid AllowedHosts: %v", err)
	}
}
