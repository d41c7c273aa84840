package watch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/reqctx"
)

// Memory a slow subscriber can pin.
//
// Every WatchAssignment stream of a job, on the Assigner, the Distributor
// and the Backup, sends the same *Message per generation (or the
// same delta per base generation), encoded in protobuf once, however many
// streams send it.
//
// Every message goes through connect-go and Codec, which frames it
// in its protocol (Connect, gRPC or gRPC-Web):
//
// connect-go copies that encoding into a pooled buffer per send,
// and the copy stays pinned while the HTTP/2 write waits for a reader
// that does not read. Such copies are limited to StreamSendBudget bytes
// in flight per node. A send that finds the budget spent is handed the
// shared encoding itself instead: it lives in a slice whose capacity
// exceeds connect-go's buffer-recycling limit (NoRecycleCap), which
// connect-go then uses as the send buffer as is and drops after the send
// rather than pooling it, so nothing reuses or writes into the shared
// bytes (TestZeroCopySendLeavesSharedBytesIntact guards this). Such a
// slice is made only when the budget runs out, once per generation.
//
// StreamWriteTimeout bounds how long one send may wait for its reader (up
// to a quarter more, see SendWatch): the stream is then reset, freeing
// what it held. A node's memory for
// assignment streams is therefore at most
//
//	StreamSendBudget                                   (copies in flight)
//	+ generations sent within StreamWriteTimeout × max(encoded size, 8 MiB)
//	+ connections × ~55 KB + streams × a few KB        (HTTP/2 state, goroutines, buffers)
//
// the middle term per job and per role sending it, and only while the
// budget is spent. Streams that asked for JSON (Connect's
// application/connect+json) encode their own copy on every send, from a
// protobuf form of the message built for that send (see Message); the
// budget counts them at the protobuf size. Streams are not
// compressed unless the client compresses its request (see
// WithLimits); those copy per send and must fit the budget.
// Measured
// (docs/benchmarks.md): 5,000 stalled subscribers of a 10,000-slice
// assignment (260 KB encoded), each on its own connection, took slicerd
// from 34 MB to 362 MB, and to 431 MB after four more generations; 1,522 MB
// when every stream pinned its own copy.

// NoRecycleCap is a capacity above connect-go's maxRecycleBufferSize
// (8 MiB, connectrpc.com/connect buffer_pool.go): a send buffer larger than
// that is dropped after the send, not returned to the pool.
const NoRecycleCap = 8<<20 + 1

// Message is the WatchAssignmentResponse of one generation, sent as is to
// every stream of its job; Codec encodes it once. It is a proto.Message,
// so any codec can encode it.
//
// A message that brings a whole assignment holds the assignment, not its
// protobuf form: at a million slices that form is some 100 MB, three
// times the encoding, and a node holds its jobs' messages for as long as
// the generations are current. The encoding is written from the
// assignment (api.AppendWatchResponse), and the form is built on demand
// for the rare codec that needs one (JSON) and for GetAssignment, shared
// while something holds it and freed after (see Proto).
type Message struct {
	resp      *slicerv1.WatchAssignmentResponse // a delta's; nil when whole is set
	whole     *assign.Assignment
	committed int64 // CommittedUnixNano of whole

	once    sync.Once
	wire    []byte // protobuf encoding; not written after once
	err     error
	encodes *atomic.Int64 // counts encodings, for tests; may be nil
	// published is when the generation was published to this node's
	// streams (latest.publish), for the Distributor's send delay.
	published time.Time
	// committedAt is when the Assigner committed the generation
	// (CommittedUnixNano), zero when unknown, for the Distributor's
	// commit-to-send delay; update is set when the node held an earlier
	// generation of the job when this one arrived. A node's first
	// generation (it just started, or just took the job on) may have been
	// committed long before, so its delay says nothing of distribution.
	committedAt time.Time
	update      bool

	pinOnce sync.Once
	pinned  []byte      // wire in a slice of capacity NoRecycleCap or more
	pinDone atomic.Bool // pinned is set

	// form is the protobuf form of whole that Proto built last, while
	// something still holds it.
	formMu sync.Mutex
	form   weak.Pointer[slicerv1.WatchAssignmentResponse]
}

// Published is when the generation was published to this node's streams.
func (s *Message) Published() time.Time { return s.published }

// Committed is when the Assigner committed the generation, zero when
// unknown.
func (s *Message) Committed() time.Time { return s.committedAt }

// Update reports whether the node held an earlier generation of the job
// when this one arrived, so that its commit-to-send delay measures
// distribution.
func (s *Message) Update() bool { return s.update }

// Size is the length of the message's protobuf encoding, made on first
// use (0 if it cannot be encoded).
func (s *Message) Size() int {
	wire, _ := s.encoded()
	return len(wire)
}

// newMessage returns the message bringing the whole of a, committed at
// committed (see api.CommittedUnixNano); encodes, when not nil, counts
// its encodings.
func newMessage(a *assign.Assignment, committed int64, encodes *atomic.Int64) *Message {
	return &Message{whole: a, committed: committed, encodes: encodes, committedAt: api.CommittedTime(committed)}
}

// newDeltaMessage returns the message that is resp, a delta.
func newDeltaMessage(resp *slicerv1.WatchAssignmentResponse) *Message {
	return &Message{resp: resp, committed: resp.GetCommittedUnixNano(), committedAt: api.CommittedTime(resp.GetCommittedUnixNano())}
}

// Delta is the delta the message brings, nil when it brings a whole
// assignment.
func (s *Message) Delta() *slicerv1.AssignmentDelta { return s.resp.GetDelta() }

// Proto returns the message's protobuf form, which callers must not
// modify. For a whole assignment the form is built on demand, about three
// times the size of the encoding, and shared by every caller until none
// holds it and the collector frees it: calls that overlap (GetAssignment
// calls, JSON streams) or follow one another between two collections
// build it once, and a node keeps none for the messages it only sends
// encoded.
func (s *Message) Proto() *slicerv1.WatchAssignmentResponse {
	if s.resp != nil {
		return s.resp
	}
	s.formMu.Lock()
	defer s.formMu.Unlock()
	if f := s.form.Value(); f != nil {
		return f
	}
	f := &slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(s.whole), CommittedUnixNano: s.committed}
	s.form = weak.Make(f)
	return f
}

// ProtoReflect makes a Message a proto.Message, for codecs other than
// Codec: it reflects a form made by Proto.
func (s *Message) ProtoReflect() protoreflect.Message { return s.Proto().ProtoReflect() }

// CommittedUnixNano is the message's committed_unix_nano.
func (s *Message) CommittedUnixNano() int64 { return s.committed }

// encoded returns the protobuf encoding, made on first use. The caller
// must not modify it.
func (s *Message) encoded() ([]byte, error) {
	s.once.Do(func() {
		if s.encodes != nil {
			s.encodes.Add(1)
		}
		if s.whole != nil {
			s.wire = api.AppendWatchResponse(nil, s.whole, s.committed)
			return
		}
		s.wire, s.err = proto.Marshal(s.resp)
	})
	return s.wire, s.err
}

// unrecycled returns the encoding in a slice connect-go will not pool.
func (s *Message) unrecycled() ([]byte, error) {
	wire, err := s.encoded()
	if err != nil {
		return nil, err
	}
	s.pinOnce.Do(func() {
		if cap(wire) >= NoRecycleCap {
			s.pinned = wire
			return
		}
		s.pinned = make([]byte, len(wire), NoRecycleCap)
		copy(s.pinned, wire)
	})
	s.pinDone.Store(true)
	return s.pinned, nil
}

// Pinned is the encoding handed to sends as is, in a slice of capacity
// NoRecycleCap or more; nil until a send found the budget spent.
func (s *Message) Pinned() []byte {
	if !s.pinDone.Load() {
		return nil
	}
	return s.pinned
}

// zeroCopyResponse asks Codec to hand connect-go the shared
// encoding itself rather than a copy.
type zeroCopyResponse struct{ *Message }

// Codec is connect-go's protobuf codec, except for shared
// responses: a *Message is encoded once and copied into each send
// buffer, and a zeroCopyResponse becomes the send buffer itself.
type Codec struct{}

var _ connect.Codec = Codec{}

func (Codec) Name() string { return "proto" }

// Marshal returns a slice connect-go may pool and reuse, so never shared
// bytes. connect-go calls it only for codecs without MarshalAppend.
func (c Codec) Marshal(m any) ([]byte, error) {
	if z, ok := m.(zeroCopyResponse); ok {
		m = z.Message
	}
	return c.MarshalAppend(nil, m)
}

// MarshalAppend implements connect-go's optional appending codec, which
// its envelope writer prefers: it passes an empty pooled buffer as dst,
// and replaces the buffer with the result when the result's capacity is
// larger, then drops it after the send when that capacity exceeds its
// recycling limit.
func (Codec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	switch s := m.(type) {
	case zeroCopyResponse:
		if len(dst) == 0 {
			return s.unrecycled()
		}
		wire, err := s.encoded()
		if err != nil {
			return nil, err
		}
		return append(dst, wire...), nil
	case *Message:
		wire, err := s.encoded()
		if err != nil {
			return nil, err
		}
		return append(dst, wire...), nil
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a protobuf message", errCodec, m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (Codec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%w: %T is not a protobuf message", errCodec, m)
	}
	if err := proto.Unmarshal(b, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

var errCodec = errors.New("watch: codec")

// sendBudget counts the bytes of stream send copies in flight.
type sendBudget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes if the budget has them; a nil budget (a handler
// served without WithLimits) has no limit.
func (b *sendBudget) take(n int64) bool {
	if b == nil {
		return true
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *sendBudget) give(n int64) {
	if b != nil {
		b.used.Add(-n)
	}
}

// streamLimits is what a streaming handler needs to bound its own sends:
// the request's ResponseController (connect-go does not expose the
// ResponseWriter), the node's watch on how long a send may block, and the
// node's budget for send copies.
type streamLimits struct {
	w          http.ResponseWriter
	rc         *http.ResponseController
	watch      *SendWatch
	budget     *sendBudget
	compressed bool // responses are compressed, so each send copies
}

// uncompressedHeaders are the request headers by which Connect, gRPC and
// gRPC-Web streaming clients accept compressed responses, and
// compressedRequestHeaders those that say a request is compressed.
var (
	uncompressedHeaders      = []string{"Connect-Accept-Encoding", "Grpc-Accept-Encoding"}
	compressedRequestHeaders = []string{"Connect-Content-Encoding", "Grpc-Encoding"}
)

// WithLimits stores each request's streamLimits in its context; a
// nil watch leaves sends unbounded in time. It also answers WatchAssignment
// streams uncompressed: compression would encode and pin a copy per stream
// (5,000 stalled gzip streams of a 10,000-slice assignment took 1.6 GB and
// 165% CPU), where the uncompressed encoding is shared. Only a client that
// compresses its own request gets compressed responses (the protocols
// require it), and those sends must fit the send budget.
func WithLimits(h http.Handler, watch *SendWatch, budget int64) http.Handler {
	b := &sendBudget{limit: budget}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sl := &streamLimits{w: w, rc: http.NewResponseController(w), watch: watch, budget: b}
		if strings.HasSuffix(r.URL.Path, "/WatchAssignment") {
			for _, k := range uncompressedHeaders {
				r.Header.Del(k)
			}
			// A compressed request still gets compressed responses.
			for _, k := range compressedRequestHeaders {
				if v := r.Header.Get(k); v != "" && v != "identity" {
					sl.compressed = true
				}
			}
		}
		r, v := reqctx.Attach(r)
		v.Limits = sl
		h.ServeHTTP(w, r)
	})
}

// errStreamSend ends a stream whose send failed, most often because its
// reader fell behind by more than the stream write timeout.
var errStreamSend = errors.New("watch: assignment stream send failed: the client stopped reading for longer than --stream-write-timeout, or went away; it can resume from its known generation")

// errCompressedOverBudget ends a compressed stream that would exceed the
// send budget: its copy cannot be shared.
var errCompressedOverBudget = errors.New("watch: compressed assignment streams are over the node's --stream-send-budget-mib; watch without compressing the request, whose responses share one copy")

// sendShared returns the send function of a WatchAssignment stream, and
// the function that ends its use, to be called when the stream ends.
//
// Each message goes through connect-go, which frames it for the stream's
// protocol. While the node's send budget allows, connect-go copies the
// shared encoding into its send buffer; beyond the budget it is handed
// the shared encoding itself. Each send must finish within the stream
// write timeout, or the stream is reset (HTTP/2 RST_STREAM, which clients
// see as a stream error and retry from their known generation; on HTTP/1
// the connection closes), which frees what the send held.
func sendShared(ctx context.Context, stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) (send func(*Message) error, stop func()) {
	var sl *streamLimits
	if v := reqctx.From(ctx); v != nil {
		sl, _ = v.Limits.(*streamLimits)
	}
	if sl == nil {
		sl = &streamLimits{}
	}
	dog := sl.watch.watch(sl.rc)
	// failed is what a send that failed returns: UNAVAILABLE, so the
	// client reconnects, unless the stream's own context ended.
	failed := func(err error) error {
		if err != nil && ctx.Err() == nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: %w", errStreamSend, err))
		}
		return err
	}
	send = func(s *Message) error {
		var msg any = s
		if wire, err := s.encoded(); err == nil {
			n := int64(len(wire))
			switch {
			case sl.budget.take(n):
				defer sl.budget.give(n)
			case sl.compressed:
				return connect.NewError(connect.CodeResourceExhausted, errCompressedOverBudget)
			default:
				msg = zeroCopyResponse{s}
			}
		}
		dog.arm()
		err := stream.Conn().Send(msg)
		dog.disarm()
		return failed(err)
	}
	return send, dog.stop
}

// SendWatch bounds every stream's sends in time with one sweep rather
// than a timer per send: arming and resetting a timer on every send of
// every stream costs a timer-heap operation each, and setting a write
// deadline per send two hand-offs to the connection's goroutine. A send
// records the tick it began at (two atomic stores per send); every quarter
// of the timeout the sweep advances the tick and resets each stream whose
// send has waited at least the whole timeout (so between 1 and 1.25 times
// it) by setting its write deadline in the past, after which the server
// resets the stream at once. A stream between sends is never reset, so an
// idle subscriber keeps its stream. The sweep walks every open stream, a
// few hundred microseconds at 100,000.
type SendWatch struct {
	timeout time.Duration
	tick    atomic.Int64
	fired   atomic.Uint64 // sends reset so far

	mu   sync.Mutex
	dogs map[*sendWatchdog]struct{}
}

// sweepsPerTimeout is how many sweeps make up a timeout.
const sweepsPerTimeout = 4

// NewSendWatch returns the watch over sends of at most timeout (none for
// a timeout <= 0); Run sweeps it.
func NewSendWatch(timeout time.Duration) *SendWatch {
	return &SendWatch{timeout: timeout, dogs: map[*sendWatchdog]struct{}{}}
}

// Run sweeps until ctx ends; the Agent owns it.
func (w *SendWatch) Run(ctx context.Context) {
	if w == nil || w.timeout <= 0 {
		return
	}
	t := time.NewTicker(w.timeout / sweepsPerTimeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.sweep()
		}
	}
}

// sweep advances the tick and resets the sends that began a timeout ago.
func (w *SendWatch) sweep() {
	now := w.tick.Add(1)
	var late []*sendWatchdog
	w.mu.Lock()
	for d := range w.dogs {
		if b := d.began.Load(); b != 0 && now-(b-1) > sweepsPerTimeout {
			late = append(late, d)
		}
	}
	w.mu.Unlock()
	for _, d := range late {
		d.fire()
	}
}

// Timeouts counts the sends reset for waiting a whole timeout.
func (w *SendWatch) Timeouts() uint64 { return w.fired.Load() }

// watch returns the watchdog of a new stream, or nil when sends are not
// bounded; the stream must call its stop when it ends.
func (w *SendWatch) watch(rc *http.ResponseController) *sendWatchdog {
	if w == nil || w.timeout <= 0 || rc == nil {
		return nil
	}
	d := &sendWatchdog{watch: w, rc: rc}
	w.mu.Lock()
	w.dogs[d] = struct{}{}
	w.mu.Unlock()
	return d
}

// sendWatchdog is one stream's entry in its sendWatch.
type sendWatchdog struct {
	watch *SendWatch
	rc    *http.ResponseController
	// began is 1 + the tick at which the send in progress began, 0
	// between sends.
	began atomic.Int64

	mu       sync.Mutex
	stopped  bool  // the stream ended: rc must not be used
	firedFor int64 // began of the send fire last reset
}

func (d *sendWatchdog) arm() {
	if d != nil {
		d.began.Store(d.watch.tick.Load() + 1)
	}
}

func (d *sendWatchdog) disarm() {
	if d != nil {
		d.began.Store(0)
	}
}

// fire ends a send that is still waiting.
func (d *sendWatchdog) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.began.Load(); b != 0 && !d.stopped {
		_ = d.rc.SetWriteDeadline(time.Unix(1, 0)) // in the past: reset now
		// A send still waiting at the next sweep is counted once.
		if d.firedFor != b {
			d.firedFor = b
			d.watch.fired.Add(1)
		}
	}
}

func (d *sendWatchdog) stop() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
	d.watch.mu.Lock()
	delete(d.watch.dogs, d)
	d.watch.mu.Unlock()
}
