package roles

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
)

// Memory a slow subscriber can pin.
//
// Every WatchAssignment stream of a job, on the Assigner, the Distributor
// and the Backup, sends the same *sharedResponse per generation, and
// sharingCodec encodes it in protobuf once, however many streams send it.
// connect-go still copies the encoding into each stream's send buffer (its
// buffer pool recycles the bytes a codec returns, so they cannot be shared
// safely), and that copy stays pinned while the HTTP/2 write waits for a
// reader that does not read. StreamWriteTimeout bounds that wait: a send
// still blocked after it resets the stream, which frees the copy. So a
// node's memory for assignment streams is at most
//
//	jobs × generations held × encoded size   (the shared encodings)
//	+ sends in flight × encoded size         (one copy per blocked send, for at most StreamWriteTimeout)
//	+ streams × a few KiB                    (goroutine, HTTP/2 stream state)
//
// where a send is in flight only while its stream is behind. The measured
// figures for 5,000 slow subscribers of a 10,000-slice assignment are in
// docs/benchmarks.md.

// sharedResponse is the WatchAssignmentResponse of one generation, sent
// as is to every stream of its job. It embeds the message, so it is a
// proto.Message and any codec can encode it; sharingCodec encodes it once.
type sharedResponse struct {
	*slicerv1.WatchAssignmentResponse

	once    sync.Once
	wire    []byte // protobuf encoding; never written after once
	err     error
	encodes *atomic.Int64 // counts encodings, for tests; may be nil
}

func newSharedResponse(msg *slicerv1.WatchAssignmentResponse, encodes *atomic.Int64) *sharedResponse {
	return &sharedResponse{WatchAssignmentResponse: msg, encodes: encodes}
}

// encoded returns the protobuf encoding, made on first use. The caller
// must not modify it.
func (s *sharedResponse) encoded() ([]byte, error) {
	s.once.Do(func() {
		if s.encodes != nil {
			s.encodes.Add(1)
		}
		s.wire, s.err = proto.Marshal(s.WatchAssignmentResponse)
	})
	return s.wire, s.err
}

// sharingCodec is connect-go's protobuf codec, except that a
// *sharedResponse is encoded once and its bytes copied on every send.
// It never returns the shared bytes themselves: connect-go puts the slices
// Marshal returns into a buffer pool and reuses them, and MarshalAppend
// appends into a pooled buffer, so both hand out copies.
type sharingCodec struct{}

var _ connect.Codec = sharingCodec{}

func (sharingCodec) Name() string { return "proto" }

func (c sharingCodec) Marshal(m any) ([]byte, error) {
	return c.MarshalAppend(nil, m)
}

// MarshalAppend implements connect-go's optional appending codec, which
// its envelope writer prefers.
func (sharingCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	if s, ok := m.(*sharedResponse); ok {
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

func (sharingCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%w: %T is not a protobuf message", errCodec, m)
	}
	if err := proto.Unmarshal(b, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

var errCodec = errors.New("roles: codec")

// writeBoundKey is the context key of a request's *writeBound.
type writeBoundKey struct{}

// writeBound is what a streaming handler needs to bound its own sends:
// the request's ResponseController (connect-go does not expose the
// ResponseWriter) and the longest a send may block.
type writeBound struct {
	rc      *http.ResponseController
	timeout time.Duration
}

// withWriteBound stores each request's writeBound in its context; timeout
// 0 leaves sends unbounded.
func withWriteBound(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wb := &writeBound{rc: http.NewResponseController(w), timeout: timeout}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), writeBoundKey{}, wb)))
	})
}

// errStreamSend ends a stream whose send failed, most often because its
// reader fell behind by more than the stream write timeout.
var errStreamSend = errors.New("roles: assignment stream send failed: the client stopped reading for longer than --stream-write-timeout, or went away; it can resume from its known generation")

// sendShared returns the send function of a WatchAssignment stream. Each
// send must finish within the request's write bound, or the stream is
// reset (HTTP/2 RST_STREAM, which clients see as a stream error and retry
// from their known generation; on HTTP/1 the connection closes), which
// frees what the send pinned.
func sendShared(ctx context.Context, stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) func(*sharedResponse) error {
	wb, _ := ctx.Value(writeBoundKey{}).(*writeBound)
	return func(s *sharedResponse) error {
		if wb == nil || wb.timeout <= 0 {
			return stream.Conn().Send(s)
		}
		// A ResponseWriter without deadlines (none of net/http's) sends
		// unbounded.
		bounded := wb.rc.SetWriteDeadline(time.Now().Add(wb.timeout)) == nil
		err := stream.Conn().Send(s)
		if bounded && err == nil {
			// The deadline would reset an idle stream too; clear it
			// until the next send.
			err = wb.rc.SetWriteDeadline(time.Time{})
		}
		if err != nil && ctx.Err() == nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: %w", errStreamSend, err))
		}
		return err
	}
}
