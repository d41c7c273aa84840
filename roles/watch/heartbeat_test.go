package watch

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/internal/testwait"
)

// heartbeatDistributor serves WatchAssignment from a Latest, as the
// Distributor does, over h2c, and counts what its streams write.
type heartbeatDistributor struct {
	slicerv1connect.UnimplementedDistributorServiceHandler
	l     *Latest
	addr  string
	opens atomic.Int64 // streams opened
	// heartbeats written to streams that asked for them, and to those
	// that did not
	asked, unasked atomic.Int64
}

func (d *heartbeatDistributor) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest],
	stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	d.opens.Add(1)
	return d.l.Serve(ctx, nil, req, stream, nil)
}

// heartbeatCounter counts the empty Connect messages (heartbeats) a
// stream's handler writes.
type heartbeatCounter struct {
	http.ResponseWriter
	n *atomic.Int64
}

var emptyEnvelope = make([]byte, 5)

func (w heartbeatCounter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if bytes.Equal(p, emptyEnvelope) {
		w.n.Add(1)
	}
	return n, err
}
func (w heartbeatCounter) Flush()                      { w.ResponseWriter.(http.Flusher).Flush() }
func (w heartbeatCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func newHeartbeatDistributor(t *testing.T, l *Latest) *heartbeatDistributor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &heartbeatDistributor{l: l, addr: ln.Addr().String()}
	path, h := slicerv1connect.NewDistributorServiceHandler(d, connect.WithCodec(Codec{}))
	mux := http.NewServeMux()
	// Uncompressed, as the node's streams are (WithLimits).
	mux.Handle(path, WithLimits(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := &d.unasked
		if api.AsksHeartbeats(r.Header) {
			n = &d.asked
		}
		h.ServeHTTP(heartbeatCounter{ResponseWriter: w, n: n}, r)
	}), nil, 64<<20))
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: protocols}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return d
}

func heartbeatAssignment(t *testing.T, gen uint64) *assign.Assignment {
	t.Helper()
	a, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:1"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	a.Generation = gen
	return a
}

// A stream that asks for heartbeats gets them while no generation goes
// out, and a Clerk, which asks and then drops a stream silent for
// api.HeartbeatMisses intervals, keeps its one stream for many intervals;
// a stream that does not ask (a caller that predates heartbeats) gets
// none, only the generations.
func TestServeHeartbeatsIdleStreamsThatAskForThem(t *testing.T) {
	old := heartbeatInterval
	heartbeatInterval = 250 * time.Millisecond
	t.Cleanup(func() { heartbeatInterval = old })
	l := New()
	l.Publish(heartbeatAssignment(t, 1), time.Time{})
	d := newHeartbeatDistributor(t, l)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plain, err := slicerv1connect.NewDistributorServiceClient(api.NewH2CClient(), api.RPCURL(d.addr)).
		WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if !plain.Receive() || plain.Msg().GetAssignment().GetGeneration() != 1 {
		t.Fatalf("the stream that did not ask for heartbeats began with %v (err %v), want generation 1", plain.Msg(), plain.Err())
	}
	if h := plain.ResponseHeader().Get(api.HeartbeatIntervalHeader); h != "" {
		t.Errorf("the stream that did not ask for heartbeats was announced them (%s: %s)", api.HeartbeatIntervalHeader, h)
	}

	cfg := clerk.DefaultConfig()
	cfg.Job = "kv"
	cfg.Addrs = []string{d.addr}
	cfg.SubsetSize = 0
	c, err := clerk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(cctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testwait.For(t, "the Clerk's first assignment", func() bool { return c.Generation() == 1 })
	// A heartbeat at once, then at most one an interval: past twice the
	// intervals a silent stream is allowed.
	want := int64(2*api.HeartbeatMisses + 2)
	testwait.For(t, "heartbeats on the Clerk's stream", func() bool { return d.asked.Load() >= want })
	if n := d.opens.Load(); n != 2 {
		t.Errorf("%d streams opened, want 2: the Clerk dropped a stream that sent heartbeats", n)
	}
	if n := d.unasked.Load(); n != 0 {
		t.Errorf("%d heartbeats went to the stream that did not ask for them", n)
	}
	l.Publish(heartbeatAssignment(t, 2), time.Time{})
	if !plain.Receive() || plain.Msg().GetAssignment().GetGeneration() != 2 {
		t.Fatalf("the stream that did not ask for heartbeats went on with %v (err %v), want generation 2", plain.Msg(), plain.Err())
	}
	testwait.For(t, "the Clerk's second assignment", func() bool { return c.Generation() == 2 })
}
