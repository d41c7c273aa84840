package roles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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

func (d *Distributor) latestOf(t *testing.T, job string) *latest {
	t.Helper()
	l, err := d.job(job)
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
	l := node.distributor.latestOf(t, "kv")
	before := l.encodes.Load()
	firstMsg := l.get().msg

	taskMember(t, "kv", "t1", node.GossipAddr())
	var second *assign.Assignment
	for _, w := range append(watchers, jsonWatcher) {
		second = w.until(t, "t0 and t1", hasTasks("t0", "t1"))
	}
	gens := int64(second.Generation - first.Generation)
	encodes := l.encodes.Load() - before
	if gens >= int64(len(protoStreams)) {
		t.Fatalf("%d generations for one join; the test needs fewer than its %d streams to tell shared from per-stream encoding", gens, len(protoStreams))
	}
	// Encoding per stream would take at least one encoding per stream.
	if encodes < 1 || encodes > gens {
		t.Errorf("%d protobuf encodings for %d generations sent to %d streams; want at most one per generation", encodes, gens, len(protoStreams))
	}
	// Every message goes through connect-go, which copies the encoding
	// within the budget and shares it beyond.
	for i, msg := range []*sharedResponse{firstMsg, l.get().msg} {
		if zeroCopy := msg.pinned != nil; zeroCopy != (budget == 0) {
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
	first := watch(t, node.RPCAddr(), "kv", false)
	a := first.until(t, "t0 alone", hasTasks("t0"))
	msg := node.distributor.latestOf(t, "kv").get().msg
	if msg.pinned == nil || msg.Assignment.GetGeneration() != a.Generation {
		t.Fatalf("generation %d was not sent from a shared buffer", a.Generation)
	}
	want, err := proto.Marshal(msg.WatchAssignmentResponse)
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
	if !bytes.Equal(msg.pinned, want) {
		t.Fatal("the shared encoding changed while streams sent it")
	}
	if cap(msg.pinned) < noRecycleCap {
		t.Fatalf("shared encoding capacity %d; connect-go would pool it", cap(msg.pinned))
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
	cfg.StreamWriteTimeout = 300 * time.Millisecond
	cfg.StreamSendBudget = budget
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")
	normal := watch(t, node.RPCAddr(), "kv", false)
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

func TestSendBudget(t *testing.T) {
	b := &sendBudget{limit: 100}
	if !b.take(60) || !b.take(40) {
		t.Fatal("budget of 100 refused 60 then 40")
	}
	if b.take(1) {
		t.Fatal("spent budget granted 1 more byte")
	}
	b.give(40)
	if !b.take(30) {
		t.Fatal("budget refused 30 after 40 were given back")
	}
	if b.used.Load() != 90 {
		t.Errorf("used %d, want 90", b.used.Load())
	}
	var none *sendBudget
	if !none.take(1 << 40) {
		t.Error("a nil budget refused a send; it has no limit")
	}
	none.give(1 << 40)
}

// TestSharingCodecEncodings checks that every way the codec hands out a
// shared response decodes to the same message, and that only the
// zero-copy way into an empty buffer returns the shared bytes.
func TestSharingCodecEncodings(t *testing.T) {
	a, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:1"}, {Name: "t1", Addr: "127.0.0.1:2"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var encodes atomic.Int64
	s := newSharedResponse(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a)}, &encodes)
	want, err := proto.Marshal(s.WatchAssignmentResponse)
	if err != nil {
		t.Fatal(err)
	}
	c := sharingCodec{}
	prefix := []byte("prefix")
	for _, tc := range []struct {
		name   string
		encode func() ([]byte, error)
		dst    []byte
		shared bool
	}{
		{"Marshal", func() ([]byte, error) { return c.Marshal(s) }, nil, false},
		{"MarshalAppend", func() ([]byte, error) { return c.MarshalAppend(nil, s) }, nil, false},
		{"MarshalAppend after a prefix", func() ([]byte, error) { return c.MarshalAppend(bytes.Clone(prefix), s) }, prefix, false},
		{"Marshal zero-copy", func() ([]byte, error) { return c.Marshal(zeroCopyResponse{s}) }, nil, false},
		{"MarshalAppend zero-copy", func() ([]byte, error) { return c.MarshalAppend(nil, zeroCopyResponse{s}) }, nil, true},
		{"MarshalAppend zero-copy after a prefix", func() ([]byte, error) { return c.MarshalAppend(bytes.Clone(prefix), zeroCopyResponse{s}) }, prefix, false},
	} {
		got, err := tc.encode()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got, append(bytes.Clone(tc.dst), want...)) {
			t.Errorf("%s: wrong bytes", tc.name)
		}
		if shared := cap(got) >= noRecycleCap; shared != tc.shared {
			t.Errorf("%s: returned the shared bytes %v, want %v", tc.name, shared, tc.shared)
		}
	}
	if n := encodes.Load(); n != 1 {
		t.Errorf("%d encodings, want 1", n)
	}
	var back slicerv1.WatchAssignmentResponse
	if err := c.Unmarshal(want, &back); err != nil || !proto.Equal(&back, s.WatchAssignmentResponse) {
		t.Errorf("Unmarshal: %v", err)
	}
	if _, err := c.Marshal(42); !errors.Is(err, errCodec) {
		t.Errorf("Marshal(42): %v, want errCodec", err)
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
	w := watch(t, node.RPCAddr(), "kv", false)
	w.until(t, "t0 alone", hasTasks("t0"))
	time.Sleep(5 * cfg.StreamWriteTimeout) // time passing while the stream is idle, not a wait for an event
	taskMember(t, "kv", "t1", node.GossipAddr())
	w.until(t, "t0 and t1 on the same stream", hasTasks("t0", "t1")) // fails if the stream ended
}

// The sweep resets a send only once it has waited a whole timeout, never
// a stream between sends, and never one that ended.
func TestSendWatchResetsOnlyLateSends(t *testing.T) {
	var nilDog *sendWatchdog
	nilDog.arm() // no timeout: a no-op
	nilDog.disarm()
	nilDog.stop()
	if (*sendWatch)(nil).watch(nil) != nil || newSendWatch(0).watch(http.NewResponseController(httptest.NewRecorder())) != nil {
		t.Fatal("a watchdog without a timeout")
	}

	w := newSendWatch(time.Hour) // swept by hand below
	rec := &deadlineRecorder{ResponseWriter: httptest.NewRecorder()}
	d := w.watch(http.NewResponseController(rec))
	sweep := func(n int) {
		for range n {
			w.sweep()
		}
	}
	d.arm()
	d.disarm()
	sweep(2 * sweepsPerTimeout)
	if rec.set != 0 {
		t.Fatalf("an idle stream was reset (%d deadlines)", rec.set)
	}
	d.arm()
	sweep(sweepsPerTimeout)
	if rec.set != 0 {
		t.Fatalf("a send was reset before a whole timeout had passed (%d deadlines)", rec.set)
	}
	sweep(1)
	if rec.set != 1 || !rec.last.Before(time.Now()) {
		t.Fatalf("a send stuck for a timeout set %d deadlines, the last %v; want one in the past", rec.set, rec.last)
	}
	d.disarm()
	d.arm()
	d.stop()
	sweep(2 * sweepsPerTimeout)
	if rec.set != 1 {
		t.Fatal("the sweep used the ResponseController of a stream that ended")
	}
	if len(w.dogs) != 0 {
		t.Fatalf("%d watchdogs left after their streams ended", len(w.dogs))
	}
}

// deadlineRecorder records the write deadlines http.ResponseController
// sets on it.
type deadlineRecorder struct {
	http.ResponseWriter
	set  int
	last time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.set++
	d.last = t
	return nil
}
