package roles

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

// assignerStreams is the number of streams the node's Assigner serves
// in these tests: the node's Distributor following the job.
const assignerStreams = 1

// goroutineStreams counts l's streams served by a goroutine.
func (l *latest) goroutineStreams() int {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	return inGroups(l.subs)
}

// TestDetachedStreamsServeEveryProtocol checks that a Distributor's
// protobuf watch streams over HTTP/2 (Connect, gRPC, gRPC-Web) go on
// without a goroutine after their first message, still get every change,
// and end with UNAVAILABLE in their own protocol when the agent shuts
// down; a JSON stream keeps its goroutine.
func TestDetachedStreamsServeEveryProtocol(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")

	protocols := map[string][]connect.ClientOption{
		"connect":  nil,
		"grpc":     {connect.WithGRPC()},
		"grpc-web": {connect.WithGRPCWeb()},
	}
	watchers := map[string]*watcher{}
	for name, opts := range protocols {
		watchers[name] = watchWith(t, node.RPCAddr(), "kv", opts...)
	}
	json := watchWith(t, node.RPCAddr(), "kv", connect.WithProtoJSON())
	for _, w := range watchers {
		w.until(t, "t0 alone", hasTasks("t0"))
	}
	json.until(t, "t0 alone (JSON)", hasTasks("t0"))
	l := node.distributor.latestOf(t, "kv")
	testwait.For(t, "the three protobuf streams to be detached", func() bool { return l.detachedCount() == 3 })
	if n := l.goroutineStreams(); n != 1 {
		t.Errorf("%d streams keep a goroutine; want 1 (the JSON one)", n)
	}
	if n := node.streams.Open(); n != 4+assignerStreams {
		t.Errorf("%d streams open under --max-streams; want %d", n, 4+assignerStreams)
	}

	taskMember(t, "kv", "t1", node.GossipAddr())
	for name, w := range watchers {
		w.until(t, "t0 and t1 on "+name, hasTasks("t0", "t1"))
	}
	json.until(t, "t0 and t1 (JSON)", hasTasks("t0", "t1"))

	node.stop(t)
	watchers["json"] = json
	for name, w := range watchers {
		select {
		case err := <-w.err:
			if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("%s stream ended with %v; want UNAVAILABLE, shutting down", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s stream did not end after the agent stopped", name)
		}
	}
}

// TestDetachedStreamEndsWithItsDeadline checks that a detached stream
// whose call set a deadline ends with DEADLINE_EXCEEDED from the server
// (the client, told by the server, sees the code the server sent).
func TestDetachedStreamEndsWithItsDeadline(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	// A gRPC client without a deadline of its own sends the server one in
	// grpc-timeout, so that the end comes from the server alone.
	client := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr()), connect.WithGRPC(),
		connect.WithInterceptors(timeoutHeader("2S")))
	stream, err := client.WatchAssignment(context.Background(), connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	l := node.distributor.latestOf(t, "kv")
	testwait.For(t, "the stream to be detached", func() bool { return l.detachedCount() == 1 })
	for stream.Receive() {
	}
	if connect.CodeOf(stream.Err()) != connect.CodeDeadlineExceeded {
		t.Fatalf("stream ended with %v; want DEADLINE_EXCEEDED", stream.Err())
	}
	testwait.For(t, "the stream to be gone", func() bool { return l.detachedCount() == 0 && node.streams.Open() == assignerStreams })
}

// timeoutHeader sets a gRPC call's grpc-timeout header, as a client with
// a deadline would, without a deadline on the client's context.
func timeoutHeader(v string) connect.Interceptor { return timeoutInterceptor(v) }

type timeoutInterceptor string

func (i timeoutInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }
func (i timeoutInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Grpc-Timeout", string(i))
		return conn
	}
}
func (i timeoutInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// TestDetachedStreamThatStopsReadingIsReset checks that a detached stream
// whose subscriber stops reading after its first message is reset once a
// write waits --stream-write-timeout, and gives back its place.
func TestDetachedStreamThatStopsReadingIsReset(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.StreamWriteTimeout = 300 * time.Millisecond
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	normal := watch(t, node.RPCAddr(), "kv", false)
	normal.until(t, "t0 alone", hasTasks("t0"))
	l := node.distributor.latestOf(t, "kv")
	first, err := l.get().msg.enveloped()
	if err != nil {
		t.Fatal(err)
	}

	req, err := proto.Marshal(&slicerv1.WatchAssignmentRequest{Job: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	slow := testnet.DialFrom(t, node.RPCAddr(), "")
	// Window for the first message only.
	if err := testnet.StalledStreamAfter(slow, uint32(len(first)), node.RPCAddr(), "/"+slicerv1connect.DistributorServiceName+"/WatchAssignment", req); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "both streams to be detached", func() bool { return l.detachedCount() == 2 })
	before := node.sendWatch.timeouts()

	taskMember(t, "kv", "t1", node.GossipAddr())
	normal.until(t, "t0 and t1 despite a subscriber that stopped reading", hasTasks("t0", "t1"))
	slow.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; not a timing claim
	code, err := testnet.ResetCode(slow)
	if err != nil {
		t.Fatalf("the stream that stopped reading was not reset: %v", err)
	}
	if code != http2.ErrCodeInternal {
		t.Errorf("reset with %v, want INTERNAL_ERROR", code)
	}
	testwait.For(t, "the reset stream to be gone", func() bool { return l.detachedCount() == 1 && node.streams.Open() == 1+assignerStreams })
	if node.sendWatch.timeouts() == before {
		t.Error("the reset was not counted as a send timeout")
	}
}

// TestDetachedStreamsKeepTheirPlace checks that detached streams count
// under --max-streams until they end.
func TestDetachedStreamsKeepTheirPlace(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.MaxStreams = 2 + assignerStreams
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	l := node.distributor.latestOf(t, "kv")

	open := func() (*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		hc := api.NewH2CClient()
		t.Cleanup(hc.CloseIdleConnections)
		s, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr())).
			WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cancel(); s.Close() })
		return s, cancel
	}
	a, cancelA := open()
	b, _ := open()
	for _, s := range []*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse]{a, b} {
		if !s.Receive() {
			t.Fatalf("no first message: %v", s.Err())
		}
	}
	testwait.For(t, "two detached streams", func() bool { return l.detachedCount() == 2 })
	c, _ := open()
	if c.Receive() || connect.CodeOf(c.Err()) != connect.CodeResourceExhausted {
		t.Fatalf("a third stream over --max-streams: %v; want RESOURCE_EXHAUSTED", c.Err())
	}
	cancelA()
	testwait.For(t, "the canceled stream to be gone", func() bool { return l.detachedCount() == 1 && node.streams.Open() == 1+assignerStreams })
	d, _ := open()
	if !d.Receive() {
		t.Fatalf("a stream after one ended: %v", d.Err())
	}
}

// TestBackupDetachesAndFollowsUntilTheStreamEnds checks that the Backup
// detaches a Clerk's stream, which still gets the job's commits, and that
// the Backup follows the job until that stream ends, not its handler.
func TestBackupDetachesAndFollowsUntilTheStreamEnds(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	// The Backup serves what was committed.
	watch(t, node.RPCAddr(), "kv", false).until(t, "t0 committed", hasTasks("t0"))

	poller := func() *poller {
		node.backup.mu.Lock()
		defer node.backup.mu.Unlock()
		return node.backup.pollers["kv"]
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	stream, err := slicerv1connect.NewBackupServiceClient(hc, api.RPCURL(node.RPCAddr())).
		WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	testwait.For(t, "the Backup's stream to be detached", func() bool {
		p := poller()
		return p != nil && p.l.detachedCount() == 1 && p.l.goroutineStreams() == 0
	})
	taskMember(t, "kv", "t1", node.GossipAddr())
	for {
		if !stream.Receive() {
			t.Fatalf("stream ended before t1 joined: %v", stream.Err())
		}
		a, err := api.FromProto(stream.Msg().GetAssignment())
		if err != nil {
			t.Fatal(err)
		}
		if hasTasks("t0", "t1")(a) {
			break
		}
	}
	if poller() == nil {
		t.Fatal("the Backup stopped following the job while a detached stream watched it")
	}
	cancel()
	testwait.For(t, "the Backup to stop following the job", func() bool { return poller() == nil })
}

func TestGRPCPercentEncode(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"job \"kv\" is gone; ok": "job \"kv\" is gone; ok",
		"50% done\nnext":         "50%25 done%0Anext",
		"caf\u00e9":              "caf%C3%A9",
	} {
		if got := grpcPercentEncode(in); got != want {
			t.Errorf("grpcPercentEncode(%q) = %q, want %q", in, got, want)
		}
	}
}
