package roles

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/roles/distributor"
	"github.com/slicerd/slicerd/roles/watch"
)

// watchWith streams job's assignments from the Distributor at addr with
// the given client options, like watch.
func watchWith(t *testing.T, addr, job string, opts ...connect.ClientOption) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hc := api.NewH2CClient()
	stream, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr), opts...).
		WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job}))
	return follow(t, hc, cancel, stream, err)
}

// latestOf is the Distributor's cache of job.
func latestOf(t *testing.T, d *distributor.Distributor, job string) *watch.Latest {
	t.Helper()
	l, err := d.Latest(job)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestWatchStreamsShareOneEncoding checks that every protobuf stream of a
// job gets the assignment from one encoding per generation, and that each
// protocol and codec (Connect, gRPC, gRPC-Web, gzip, JSON) still decodes it.
func TestWatchStreamsShareOneEncoding(t *testing.T) {
	t.Run("copies", func(t *testing.T) { testWatchStreamsShareOneEncoding(t, DefaultConfig().StreamSendBudget) })
	t.Run("zero-copy", func(t *testing.T) { testWatchStreamsShareOneEncoding(t, 0) })
}

func testWatchStreamsShareOneEncoding(t *testing.T, budget int64) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.StreamSendBudget = budget
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")

	protoStreams := [][]connect.ClientOption{
		nil, nil, nil,
		{connect.WithGRPC()}, {connect.WithGRPC()},
		{connect.WithGRPCWeb()}, {connect.WithGRPCWeb()},
		{connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil)},
	}
	var watchers []*watcher
	for _, opts := range protoStreams {
		watchers = append(watchers, watchWith(t, node.RPCAddr(), "kv", opts...))
	}
	jsonWatcher := watchWith(t, node.RPCAddr(), "kv", connect.WithProtoJSON())
	var first *assign.Assignment
	for _, w := range append(watchers, jsonWatcher) {
		first = w.until(t, "t0 alone", hasTasks("t0"))
	}
	l := latestOf(t, node.distributor, "kv")
	before := l.Encodes()
	firstMsg := l.Message()

	taskMember(t, "kv", "t1", node.GossipAddr())
	var second *assign.Assignment
	for _, w := range append(watchers, jsonWatcher) {
		second = w.until(t, "t0 and t1", hasTasks("t0", "t1"))
	}
	gens := int64(second.Generation - first.Generation)
	encodes := l.Encodes() - before
	if gens >= int64(len(protoStreams)) {
		t.Fatalf("%d generations for one join; the test needs fewer than its %d streams to tell shared from per-stream encoding", gens, len(protoStreams))
	}
	// Encoding per stream would take at least one encoding per stream.
	if encodes < 1 || encodes > gens {
		t.Errorf("%d protobuf encodings for %d generations sent to %d streams; want at most one per generation", encodes, gens, len(protoStreams))
	}
	// Every message goes through connect-go, which copies the encoding
	// within the budget and shares it beyond.
	for i, msg := range []*watch.Message{firstMsg, l.Message()} {
		if zeroCopy := msg.Pinned() != nil; zeroCopy != (budget == 0) {
			t.Errorf("with a send budget of %d bytes, message %d zero-copy %v; want %v", budget, i, zeroCopy, budget == 0)
		}
	}
}

// TestZeroCopySendLeavesSharedBytesIntact sends a generation's shared
// encoding as the send buffer itself on many streams, with other calls on
// the same handlers meanwhile, and checks that nothing wrote into it: the
// shared bytes are never taken into connect-go's buffer pool.
func TestZeroCopySendLeavesSharedBytesIntact(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.StreamSendBudget = 0
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	first := watchJob(t, node.RPCAddr(), "kv", false)
	a := first.until(t, "t0 alone", hasTasks("t0"))
	msg := latestOf(t, node.distributor, "kv").Message()
	if msg.Pinned() == nil || msg.Proto().GetAssignment().GetGeneration() != a.Generation {
		t.Fatalf("generation %d was not sent from a shared buffer", a.Generation)
	}
	want, err := proto.Marshal(msg.Proto())
	if err != nil {
		t.Fatal(err)
	}
	// More streams (their requests are read into pooled buffers) and
	// unary calls, some of which also answer with pooled buffers.
	for i := range 20 {
		var opts []connect.ClientOption
		if i%2 == 1 {
			opts = append(opts, connect.WithGRPC())
		}
		w := watchWith(t, node.RPCAddr(), "kv", opts...)
		w.until(t, "t0 alone on another stream", hasTasks("t0"))
		hc := api.NewH2CClient()
		resp, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr())).
			GetAssignment(context.Background(), connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: "kv"}))
		hc.CloseIdleConnections()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.GetAssignment().GetGeneration() != a.Generation {
			t.Fatalf("GetAssignment answered generation %d, want %d", resp.Msg.GetAssignment().GetGeneration(), a.Generation)
		}
	}
	if !bytes.Equal(msg.Pinned(), want) {
		t.Fatal("the shared encoding changed while streams sent it")
	}
	if cap(msg.Pinned()) < watch.NoRecycleCap {
		t.Fatalf("shared encoding capacity %d; connect-go would pool it", cap(msg.Pinned()))
	}
}

// TestSlowSubscriberIsResetAndOthersGoOn opens a stream that never reads:
// other streams still get every new generation, and the stalled stream is
// reset once its send has waited the stream write timeout.
func TestSlowSubscriberIsResetAndOthersGoOn(t *testing.T) {
	t.Run("copies", func(t *testing.T) { testSlowSubscriber(t, DefaultConfig().StreamSendBudget) })
	t.Run("zero-copy", func(t *testing.T) { testSlowSubscriber(t, 0) })
}

func testSlowSubscriber(t *testing.T, budget int64) {
	cfg := testConfig(t, "node-1", t.TempDir())
	// Every stream's sends are bounded by it, the reading subscriber's
	// too: short enough that the test waits little for the stalled
	// stream's reset, long enough that a busy machine does not keep the
	// reading one from taking a generation that long (at 300 ms, two
	// cores running four test processes once reset it).
	cfg.StreamWriteTimeout = 2 * time.Second
	cfg.StreamSendBudget = budget
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	normal := watchJob(t, node.RPCAddr(), "kv", false)
	normal.until(t, "t0 alone", hasTasks("t0"))

	req, err := proto.Marshal(&slicerv1.WatchAssignmentRequest{Job: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	slow := testnet.DialFrom(t, node.RPCAddr(), "")
	if err := testnet.StalledStream(slow, node.RPCAddr(), "/"+slicerv1connect.DistributorServiceName+"/WatchAssignment", req); err != nil {
		t.Fatal(err)
	}

	taskMember(t, "kv", "t1", node.GossipAddr())
	normal.until(t, "t0 and t1 despite a stalled subscriber", hasTasks("t0", "t1"))

	slow.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang; not a timing claim
	code, err := testnet.ResetCode(slow)
	if err != nil {
		t.Fatalf("stalled stream was not reset: %v", err)
	}
	if code != http2.ErrCodeInternal {
		t.Errorf("stalled stream reset with %v, want INTERNAL_ERROR (a write deadline)", code)
	}
	// The reset freed the stream, not the connection or the node.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	if s, err := checkHealth(ctx, hc, node.RPCAddr()); err != nil || s != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health after the reset: %v, %v", s, err)
	}
}

// TestWatchStreamsAreNotCompressed checks that a client accepting gzip
// gets its WatchAssignment stream uncompressed, which lets streams share
// one encoding, and that a client compressing its request is served
// compressed within the send budget and refused beyond it.
func TestWatchStreamsAreNotCompressed(t *testing.T) {
	for _, budget := range []int64{DefaultConfig().StreamSendBudget, 0} {
		cfg := testConfig(t, fmt.Sprintf("node-%d", budget), t.TempDir())
		cfg.StreamSendBudget = budget
		node := startAgent(t, cfg)
		taskMember(t, "kv", fmt.Sprintf("t%d", budget), node.GossipAddr())
		seesTask(t, node, "kv", fmt.Sprintf("t%d", budget))
		for _, grpc := range []bool{false, true} {
			opts := []connect.ClientOption{}
			header := "Connect-Content-Encoding"
			if grpc {
				opts, header = append(opts, connect.WithGRPC()), "Grpc-Encoding"
			}
			for _, sendGzip := range []bool{false, true} {
				o := opts
				if sendGzip {
					o = append(o, connect.WithSendGzip())
				}
				hc := api.NewH2CClient()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				stream, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(node.RPCAddr()), o...).
					WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
				if err != nil {
					t.Fatal(err)
				}
				got := stream.Receive()
				encoding := stream.ResponseHeader().Get(header)
				err = stream.Err()
				stream.Close()
				cancel()
				hc.CloseIdleConnections()
				what := fmt.Sprintf("budget %d, grpc %v, gzip request %v", budget, grpc, sendGzip)
				switch {
				case sendGzip && budget == 0:
					if got || connect.CodeOf(err) != connect.CodeResourceExhausted {
						t.Errorf("%s: received %v, err %v; want ResourceExhausted", what, got, err)
					}
				case !got:
					t.Errorf("%s: no assignment: %v", what, err)
				case sendGzip && encoding != "gzip":
					t.Errorf("%s: response encoding %q, want gzip", what, encoding)
				case !sendGzip && encoding != "" && encoding != "identity":
					t.Errorf("%s: response encoding %q, want none", what, encoding)
				}
			}
		}
	}
}

// TestIdleStreamOutlivesWriteTimeout: the write timeout bounds sends, not
// the quiet between them, so a subscriber waiting longer than it for the
// next generation keeps its stream.
func TestIdleStreamOutlivesWriteTimeout(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.StreamWriteTimeout = 100 * time.Millisecond
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	w := watchJob(t, node.RPCAddr(), "kv", false)
	w.until(t, "t0 alone", hasTasks("t0"))
	time.Sleep(5 * cfg.StreamWriteTimeout) // time passing while the stream is idle, not a wait for an event
	taskMember(t, "kv", "t1", node.GossipAddr())
	w.until(t, "t0 and t1 on the same stream", hasTasks("t0", "t1")) // fails if the stream ended
}
