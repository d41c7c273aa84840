package assigner

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/auth"
)

// captureLoad is a LoadService that records the reports it receives and
// who forwarded them.
type captureLoad struct {
	slicerv1connect.UnimplementedLoadServiceHandler
	mu   sync.Mutex
	from []string
}

func (c *captureLoad) ReportLoad(_ context.Context, req *connect.Request[slicerv1.ReportLoadRequest]) (*connect.Response[slicerv1.ReportLoadResponse], error) {
	c.mu.Lock()
	c.from = append(c.from, req.Header().Get(auth.ForwardedHeader))
	c.mu.Unlock()
	return connect.NewResponse(&slicerv1.ReportLoadResponse{}), nil
}

func (c *captureLoad) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.from...)
}

// An Assigner that gets a task's report sent to every Assigner keeps it,
// and, knowing no holder of the job while it prefers another Assigner,
// passes a copy there as a forwarded write, at most once a second per
// job. The one that gets such a copy, preferring another itself and
// seeing no holder, adopts the job: two Assigners that each prefer the
// other no longer leave it to nobody.
func TestEveryAssignerReportNudgesThePreferred(t *testing.T) {
	ctx := context.Background()
	other := ""
	for _, name := range []string{"a0", "a2", "a3", "a4", "a5", "a6"} {
		if lease.DefaultPreference().Choose("kv", []string{"a1", name}, nil, nil, "") == name {
			other = name
			break
		}
	}
	capture := &captureLoad{}
	mux := http.NewServeMux()
	mux.Handle(slicerv1connect.NewLoadServiceHandler(capture))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: protocols}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	members := &fakeMembers{}
	members.set("kv", "t0")
	members.peers = append(members.peers,
		gossip.Peer{Name: "a1", Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1", Status: gossip.StatusAlive},
		gossip.Peer{Name: other, Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: ln.Addr().String(), Status: gossip.StatusAlive})
	a := testAssigner(t, testConfig(t, "a1"), tmpStore(t), members, nil)
	defer a.rpcClients.CloseIdle()
	now := time.Unix(1000, 0)
	a.loads.now = func() time.Time { return now }

	report := func() {
		t.Helper()
		req := connect.NewRequest(&slicerv1.ReportLoadRequest{Job: "kv", Task: "t0", WindowSeconds: 1, EveryAssigner: true})
		if _, err := a.ReportLoad(ctx, req); err != nil {
			t.Fatalf("ReportLoad: %v", err)
		}
	}
	report()
	report() // within the second: no second copy
	if got := capture.received(); len(got) != 1 || got[0] != "a1" {
		t.Fatalf("copies at %s = %q, want one forwarded by a1", other, got)
	}
	if a.loads.reporting("kv") != 1 {
		t.Error("the report was not kept where it arrived")
	}
	now = now.Add(nudgeEvery)
	report()
	if got := capture.received(); len(got) != 2 {
		t.Errorf("copies after a second = %d, want 2", len(got))
	}

	// The receiving side: a copy forwarded by the Assigner this one
	// prefers, while nobody holds the job, is an adoption.
	b := testAssigner(t, testConfig(t, "a1"), tmpStore(t), members, nil)
	fwd := connect.NewRequest(&slicerv1.ReportLoadRequest{Job: "kv", Task: "t0", WindowSeconds: 1, EveryAssigner: true})
	fwd.Header().Set(auth.ForwardedHeader, other)
	if _, err := b.ReportLoad(ctx, fwd); err != nil {
		t.Fatalf("forwarded ReportLoad: %v", err)
	}
	if !b.leader.Adopting("kv") {
		t.Error("an assigner that prefers another and gets that one's forwarded report, with no holder, did not adopt the job")
	}
}
