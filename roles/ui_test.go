package roles

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
)

// uiCall posts a JSON request to a procedure on the web UI's address, as
// the page does, and returns the HTTP status and the decoded body.
func uiCall(t *testing.T, hc *http.Client, base, procedure, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", base+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %d with a body that is not JSON: %q", procedure, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// The agent serves the web UI on --ui-addr: the page, and the read-only
// procedures with live data; a write gets an error and changes nothing,
// and an unknown job gets a message saying so.
func TestUIServesReadsOnly(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.UIAddr = "127.0.0.1:0"
	node := startAgent(t, cfg)
	if node.UIAddr() == "" || node.UIHandler() == nil {
		t.Fatalf("UIAddr %q, UIHandler %v; want both set", node.UIAddr(), node.UIHandler())
	}
	taskMember(t, "kv", "kv-0", node.GossipAddr())
	// The job exists once gossip brings its task: a watch before that is
	// answered "unknown job".
	seesTask(t, node, "kv", "kv-0")
	w := watchJob(t, node.RPCAddr(), "kv", false)
	w.until(t, "an assignment to kv-0", hasTasks("kv-0"))

	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	base := "http://" + node.UIAddr()

	resp, err := hc.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "app.js") {
		t.Fatalf("GET /ui/: %d %q; want the page", resp.StatusCode, page)
	}

	for _, p := range []string{
		slicerv1connect.JobServiceGetJobProcedure, slicerv1connect.JobServiceGetJobHistoryProcedure,
		slicerv1connect.JobServiceGetLoadHistoryProcedure, slicerv1connect.DistributorServiceGetAssignmentProcedure,
	} {
		code, body := uiCall(t, hc, base, p, `{"job":"kv"}`)
		if code != 200 {
			t.Errorf("%s through the UI: %d %v", p, code, body)
		}
	}
	code, body := uiCall(t, hc, base, slicerv1connect.JobServiceExplainKeyProcedure, `{"job":"kv","key":"dXNlcjo0Mg=="}`) // "user:42"
	if code != 200 || body["sliceKey"] != "7930827119023188193" {
		t.Errorf("ExplainKey user:42 through the UI: %d %v; want slice key 7930827119023188193", code, body)
	}
	if code, body := uiCall(t, hc, base, slicerv1connect.JobServiceListJobsProcedure, `{}`); code != 200 || !strings.Contains(mustJSON(body), `"name":"kv"`) {
		t.Errorf("ListJobs through the UI: %d %v", code, body)
	}

	code, body = uiCall(t, hc, base, slicerv1connect.JobServiceGetJobProcedure, `{"job":"nope"}`)
	if code != 404 || body["code"] != "not_found" || !strings.Contains(body["message"].(string), `unknown job "nope"`) {
		t.Errorf("GetJob of an unknown job through the UI: %d %v; want not_found naming it", code, body)
	}
	code, body = uiCall(t, hc, base, slicerv1connect.JobServiceExplainKeyProcedure, `{"job":"kv","sliceKey":"9223372036854775808"}`)
	if code != 400 || body["code"] != "invalid_argument" {
		t.Errorf("ExplainKey of slice key 2^63 through the UI: %d %v; want invalid_argument", code, body)
	}

	for _, p := range []string{slicerv1connect.JobServiceSetJobConfigProcedure, slicerv1connect.JobServiceDeleteJobProcedure} {
		code, body := uiCall(t, hc, base, p, `{"job":"kv","config":{"minRedundancy":1,"maxRedundancy":3}}`)
		if code != 403 || body["code"] != "permission_denied" {
			t.Errorf("%s through the UI: %d %v; want permission_denied", p, code, body)
		}
	}
	h2c := api.NewH2CClient()
	defer h2c.CloseIdleConnections()
	jobs := slicerv1connect.NewJobServiceClient(h2c, api.RPCURL(node.RPCAddr()))
	got, err := jobs.GetJob(context.Background(), connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Msg.GetJob().GetConfigured() || got.Msg.GetJob().GetConfig().GetMaxRedundancy() != 1 {
		t.Errorf("the job's configuration changed after writes through the UI: %v", got.Msg.GetJob())
	}

	// A page from another host name (DNS rebinding) is refused.
	req, _ := http.NewRequest("POST", base+slicerv1connect.JobServiceGetJobProcedure, strings.NewReader(`{"job":"kv"}`))
	req.Host = "attacker.example"
	req.Header.Set("Content-Type", "application/json")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Error("the UI answered a request for another host name")
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Even past the UI's filter, the services the UI is built on have no
// writes.
func TestUIServicesHaveNoWrites(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewJobServiceHandler(readOnlyJobs{a: node.assigner}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := slicerv1connect.NewJobServiceClient(srv.Client(), srv.URL)
	_, err := client.SetJobConfig(context.Background(), connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv",
		Config: &slicerv1.JobConfig{MinRedundancy: 1, MaxRedundancy: 2}}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("SetJobConfig on the UI's JobService: %v, want UNIMPLEMENTED", err)
	}
	_, err = client.DeleteJob(context.Background(), connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("DeleteJob on the UI's JobService: %v, want UNIMPLEMENTED", err)
	}
	if _, err := node.store.Load(context.Background(), "kv"); err == nil {
		t.Error("a write through the UI's JobService stored job kv")
	}
	srv.CloseClientConnections()
}

// The UI is off unless configured, needs the Assigner, and stays on
// loopback unless the operator says the network is trusted.
func TestUIConfig(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir(), gossip.RoleDistributor))
	if node.UIHandler() != nil || node.UIAddr() != "" {
		t.Errorf("a node without an Assigner has UIHandler %v, UIAddr %q; want none", node.UIHandler(), node.UIAddr())
	}
	plain := startAgent(t, testConfig(t, "node-2", t.TempDir()))
	if plain.UIAddr() != "" || plain.UIHandler() == nil {
		t.Errorf("a node without UIAddr: UIAddr %q, UIHandler %v; want no listener but a handler", plain.UIAddr(), plain.UIHandler())
	}

	cfg := testConfig(t, "node-3", t.TempDir(), gossip.RoleDistributor)
	cfg.UIAddr = "127.0.0.1:0"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--ui-addr") {
		t.Errorf("UIAddr without the assigner role: %v, want a config error naming --ui-addr", err)
	}
	cfg = testConfig(t, "node-3", t.TempDir())
	cfg.UIAddr = "0.0.0.0:8080"
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("UIAddr on every interface: %v, want a config error pointing at --insecure", err)
	}
	cfg.Insecure = true
	if err := cfg.Validate(); err != nil {
		t.Errorf("UIAddr on every interface with Insecure: %v", err)
	}
	cfg = testConfig(t, "node-3", t.TempDir())
	cfg.UIAddr = plain.RPCAddr() // taken
	if _, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "--ui-addr") {
		t.Errorf("UIAddr already taken: %v, want a config error naming --ui-addr", err)
	}
}
