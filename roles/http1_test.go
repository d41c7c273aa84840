package roles

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
)

// http1Client speaks only HTTP/1.1, as curl or a browser's fetch without
// HTTP/2 does.
func http1Client() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &http.Client{Transport: &http.Transport{Protocols: protocols}}
}

// postJSON POSTs body to a unary method with the Connect protocol's JSON
// encoding and returns the status and the response body.
func postJSON(t *testing.T, hc *http.Client, addr, method, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, api.RPCURL(addr)+"/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s over HTTP/1.1: %v", method, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 1 {
		t.Errorf("POST %s answered over %s, want HTTP/1.1", method, resp.Proto)
	}
	return resp.StatusCode, out
}

// A client with no HTTP/2 and no generated code reaches slicerd with the
// Connect protocol's JSON over HTTP/1.1 (what docs/api.md's curl example
// does), and the answer follows the protobuf JSON mapping: 64-bit integers
// are strings and a zero field, such as the first slice's start, is left
// out. gRPC-Web and Connect streams work over HTTP/1.1 too.
func TestConnectJSONOverHTTP1(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	taskMember(t, "kv", "t0", node.GossipAddr())
	taskMember(t, "kv", "t1", node.GossipAddr())
	seesTask(t, node, "kv", "t1")
	watchJob(t, node.RPCAddr(), "kv", false).until(t, "both tasks assigned", hasTasks("t0", "t1"))
	hc := http1Client()
	defer hc.CloseIdleConnections()

	status, body := postJSON(t, hc, node.RPCAddr(), "slicer.v1.DistributorService/GetAssignment", `{"job":"kv"}`)
	if status != http.StatusOK {
		t.Fatalf("GetAssignment over HTTP/1.1: status %d, body %s", status, body)
	}
	var msg slicerv1.GetAssignmentResponse
	if err := protojson.Unmarshal(body, &msg); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	a, err := api.FromProto(msg.GetAssignment())
	if err != nil {
		t.Fatalf("the assignment decoded from JSON is invalid: %v", err)
	}
	if names := taskNames(a); len(names) != 2 {
		t.Errorf("assignment over HTTP/1.1 names tasks %v, want t0 and t1", names)
	}

	// The raw JSON, as a client without protobuf support sees it.
	var raw struct {
		Assignment struct {
			Generation json.RawMessage
			Slices     []map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if g := raw.Assignment.Generation; !bytes.HasPrefix(g, []byte(`"`)) {
		t.Errorf("generation is %s in JSON, want a string", g)
	}
	slices := raw.Assignment.Slices
	if len(slices) == 0 {
		t.Fatalf("no slices in %s", body)
	}
	if start, ok := slices[0]["start"]; ok {
		t.Errorf("first slice carries start %s; protobuf JSON leaves a zero start out", start)
	}
	if end := string(slices[len(slices)-1]["end"]); end != `"9223372036854775808"` {
		t.Errorf("last slice ends at %s in JSON, want the string \"9223372036854775808\"", end)
	}

	// An error is a JSON object with a code, and an HTTP status to match.
	status, body = postJSON(t, hc, node.RPCAddr(), "slicer.v1.JobService/GetJob", `{"job":"nosuchjob"}`)
	var cerr struct{ Code, Message string }
	if err := json.Unmarshal(body, &cerr); err != nil {
		t.Fatalf("decoding error body %s: %v", body, err)
	}
	if status != http.StatusNotFound || cerr.Code != "not_found" || !strings.Contains(cerr.Message, "nosuchjob") {
		t.Errorf("GetJob of an unknown job over HTTP/1.1: status %d, body %s; want 404 and code not_found naming the job", status, body)
	}

	// gRPC-Web, and a Connect stream with JSON, over the same HTTP/1.1 client.
	jobs, err := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(node.RPCAddr()), connect.WithGRPCWeb()).
		ListJobs(context.Background(), connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil {
		t.Fatalf("ListJobs with gRPC-Web over HTTP/1.1: %v", err)
	}
	if n := len(jobs.Msg.GetJobs()); n != 1 || jobs.Msg.GetJobs()[0].GetName() != "kv" {
		t.Errorf("ListJobs with gRPC-Web lists %v, want kv", jobs.Msg.GetJobs())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr()), connect.WithProtoJSON()).
		WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("WatchAssignment with Connect JSON over HTTP/1.1 ended: %v", stream.Err())
	}
	if g := stream.Msg().GetAssignment().GetGeneration(); g < a.Generation {
		t.Errorf("stream sent generation %d, older than the %d just read", g, a.Generation)
	}
}
