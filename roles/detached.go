package roles

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/h2server"
)

// Detached watch streams.
//
// A WatchAssignment stream of uncompressed protobuf over HTTP/2 (Connect,
// gRPC or gRPC-Web) is served without a goroutine once its first message
// is sent: its handler detaches the stream from the HTTP/2 server
// (h2server.Detach) and returns, and the stream becomes a detachedSub of
// its job's latest. Each change of the job then kicks the job's detached
// streams, one hand-off per client connection (h2server.Kick), and each
// connection's own goroutine asks every stream of it for its next
// message (detachedSub.next): the same shared encoding a goroutine would
// send, or the delta from what the stream holds. A stream that is still
// writing is asked again when its write completes, so a slow subscriber
// skips generations as before rather than queueing them.
//
// A detached stream costs its HTTP/2 stream state and this struct, about
// 2 KB resident (docs/benchmarks.md), where a stream with a goroutine
// holds an 8 KB stack,
// the server's 4 KB response buffer and its request state; and a
// generation reaches a connection's streams with one hand-off to the
// connection's goroutine, where each stream's goroutine took two per
// message. It keeps its place under --max-streams and the connection's
// stream limit until it ends. It ends, with the status its protocol
// carries (Connect's end-of-stream message, gRPC's trailers, gRPC-Web's
// trailer frame), when its job ends, when the agent shuts down
// (UNAVAILABLE), or at the deadline its call set; it is reset when a write
// waits longer than --stream-write-timeout (the sweep of sendWatch); and
// it goes when the client cancels it or the connection closes.
//
// The Backup detaches its streams too (Clerks fail over to it when no
// Distributor answers); the Assigner's few streams (Distributors,
// Backups) keep their goroutines. Other streams (HTTP/1, JSON,
// compressed, or a stream the server cannot detach) keep their goroutine
// and send as before.

// streamProtocol is the RPC protocol of a stream, by its Content-Type.
type streamProtocol int

const (
	protoUnknown streamProtocol = iota
	protoConnect
	protoGRPC
	protoGRPCWeb
)

// protobufStreamProtocols are the Content-Types of streaming requests
// whose responses are protobuf messages in the 5-byte envelope, and their
// protocols.
var protobufStreamProtocols = map[string]streamProtocol{
	"application/connect+proto":  protoConnect,
	"application/grpc":           protoGRPC,
	"application/grpc+proto":     protoGRPC,
	"application/grpc-web":       protoGRPCWeb,
	"application/grpc-web+proto": protoGRPCWeb,
}

// detachedSub is one detached WatchAssignment stream.
type detachedSub struct {
	l        *latest
	watch    *sendWatch
	protocol streamProtocol
	deltas   bool
	stopping <-chan struct{}
	deadline time.Time             // the call's deadline; zero for none
	count    func(*sharedResponse) // records a message sent; may be nil
	release  func()                // gives back the stream's place under --max-streams; may be nil
	onEnd    func()                // the role's own release when the stream ends; may be nil
	conn     any                   // the connection, the group the stream is kicked with
	d        atomic.Pointer[h2server.Detached]

	// known is what the stream holds, owned by the connection's goroutine.
	known assign.Version
	// began is 1 + the sendWatch tick at which the write in progress was
	// handed to the connection, 0 between writes.
	began atomic.Int64
	// firedFor is the began the sweep last reset, guarded by the
	// sendWatch's mu.
	firedFor int64
	// deadlineTimer kicks the stream at its deadline, so that it ends.
	deadlineTimer *time.Timer
}

// next is the stream's h2server next function: on the connection's
// goroutine, when the stream is kicked or its last write completed.
func (s *detachedSub) next() h2server.Write {
	s.began.Store(0)
	st := s.l.get()
	if st.a != nil && st.a.Version().Supersedes(s.known) {
		msg := st.msg
		if s.deltas {
			if d := st.delta(s.known); d != nil {
				msg = d
			}
		}
		env, err := msg.enveloped()
		if err != nil {
			return s.end(connect.NewError(connect.CodeInternal, err))
		}
		s.known = st.a.Version()
		if s.watch != nil {
			s.began.Store(s.watch.tick.Load() + 1)
		}
		if s.count != nil {
			s.count(msg)
		}
		return h2server.Write{Data: env}
	}
	switch {
	case st.a == nil && st.err != nil:
		return s.end(toConnect(st.err)) // the job ended
	case isClosed(s.stopping):
		return s.end(connect.NewError(connect.CodeUnavailable, errShuttingDown))
	case !s.deadline.IsZero() && !time.Now().Before(s.deadline):
		return s.end(connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded))
	}
	return h2server.Write{}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// end is the end of the stream with err in its protocol.
func (s *detachedSub) end(err error) h2server.Write {
	code, msg := connect.CodeUnknown, err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		code, msg = ce.Code(), ce.Message()
	}
	switch s.protocol {
	case protoGRPC:
		return h2server.Write{End: true, Trailers: http.Header{
			"Grpc-Status":  {strconv.Itoa(int(code))},
			"Grpc-Message": {grpcPercentEncode(msg)},
		}}
	case protoGRPCWeb:
		trailer := "grpc-status: " + strconv.Itoa(int(code)) + "\r\ngrpc-message: " + grpcPercentEncode(msg) + "\r\n"
		return h2server.Write{Data: envelope(0x80, []byte(trailer)), End: true}
	default:
		type wireError struct {
			Code    string `json:"code"`
			Message string `json:"message,omitempty"`
		}
		body, jerr := json.Marshal(struct {
			Error wireError `json:"error"`
		}{wireError{Code: code.String(), Message: msg}})
		if jerr != nil {
			body = []byte(`{"error":{"code":"internal"}}`)
		}
		return h2server.Write{Data: envelope(0x02, body), End: true}
	}
}

// envelope frames p as Connect, gRPC and gRPC-Web frame a message: a
// flags byte, the length in 4 bytes big-endian, then p.
func envelope(flags byte, p []byte) []byte {
	b := make([]byte, envelopePrefix+len(p))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:envelopePrefix], uint32(len(p)))
	copy(b[envelopePrefix:], p)
	return b
}

// grpcPercentEncode encodes a grpc-message value as the gRPC protocol
// requires: bytes outside printable ASCII, and '%', as %XX.
func grpcPercentEncode(msg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c > 0x7E || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// closed is the stream's h2server onClose function: on the connection's
// goroutine, once, however the stream ended.
func (s *detachedSub) closed(error) {
	if s.deadlineTimer != nil {
		s.deadlineTimer.Stop()
	}
	s.l.removeDetached(s)
	s.watch.removeDetached(s)
	if s.release != nil {
		s.release()
	}
	if s.onEnd != nil {
		s.onEnd()
	}
}

// detachStream hands the stream of w, which has sent the generation
// known, over to l's detached streams; it reports whether it did, after
// which the stream's handler must return (whatever it then writes is
// discarded). It does not for a response the HTTP/2 server cannot detach,
// or a stream that already ended; the handler then serves it as before.
func detachStream(ctx context.Context, sl *streamLimits, l *latest, known assign.Version, deltas bool, stopping <-chan struct{}, count func(*sharedResponse), onEnd func()) bool {
	if sl == nil || sl.protocol == protoUnknown || sl.w == nil {
		return false
	}
	s := &detachedSub{l: l, watch: sl.watch, protocol: sl.protocol, deltas: deltas, stopping: stopping,
		count: count, onEnd: onEnd, known: known, conn: sl.conn}
	s.deadline, _ = ctx.Deadline()
	slot, _ := ctx.Value(streamSlotKey{}).(*streamSlot)
	s.release = slot.take()
	if !s.deadline.IsZero() {
		s.deadlineTimer = time.AfterFunc(time.Until(s.deadline), func() {
			if d := s.d.Load(); d != nil {
				h2server.Kick([]*h2server.Detached{d})
			}
		})
	}
	l.addDetached(s)
	d, err := h2server.Detach(sl.w, s.next, s.closed)
	if err != nil {
		l.removeDetached(s)
		slot.giveBack()
		if s.deadlineTimer != nil {
			s.deadlineTimer.Stop()
		}
		return false
	}
	s.d.Store(d)
	sl.watch.addDetached(s)
	// A generation published since the stream's send, before l could
	// kick it, is sent now.
	h2server.Kick([]*h2server.Detached{d})
	return true
}

// addDetached registers a detached stream of l.
func (l *latest) addDetached(s *detachedSub) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	if l.detached == nil {
		l.detached = map[any]map[*detachedSub]struct{}{}
	}
	g := l.detached[s.conn]
	if g == nil {
		g = map[*detachedSub]struct{}{}
		l.detached[s.conn] = g
	}
	g[s] = struct{}{}
}

// removeDetached unregisters s; removing it again does nothing.
func (l *latest) removeDetached(s *detachedSub) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	if g := l.detached[s.conn]; g != nil {
		delete(g, s)
		if len(g) == 0 {
			delete(l.detached, s.conn)
		}
	}
}

// detachedStreams returns l's detached streams, those of one connection
// next to each other.
func (l *latest) detachedStreams() []*h2server.Detached {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	ds := make([]*h2server.Detached, 0, inGroups(l.detached))
	for _, g := range l.detached {
		for s := range g {
			if d := s.d.Load(); d != nil {
				ds = append(ds, d)
			}
		}
	}
	return ds
}

// kickDetached has every detached stream of l look at the current state,
// on a goroutine of l's own: the connections' goroutines take the kicks
// while the publisher goes on. A kick superseded by a later change stops
// early, the later one covering every stream.
func (l *latest) kickDetached() {
	ds := l.detachedStreams()
	if len(ds) == 0 {
		return
	}
	round := l.kicks.Add(1)
	l.running.Add(1)
	l.pacers.Go(func() {
		defer l.running.Add(-1)
		for len(ds) > 0 {
			if l.kicks.Load() != round {
				return
			}
			n := min(len(ds), kickBatch)
			h2server.Kick(ds[:n])
			ds = ds[n:]
		}
	})
}

// kickBatch is how many streams a kick hands over before it checks
// whether a later change superseded it.
const kickBatch = 4096

// detachedCount is the number of l's detached streams.
func (l *latest) detachedCount() int {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	return inGroups(l.detached)
}

// inGroups counts the members of groups.
func inGroups[G comparable, M comparable](groups map[G]map[M]struct{}) int {
	n := 0
	for _, g := range groups {
		n += len(g)
	}
	return n
}

// streamSlotKey is the context key of a stream's *streamSlot.
type streamSlotKey struct{}

// streamSlot is a stream's place under --max-streams, which the stream's
// handler gives back when it returns, unless a detached stream took it
// over to give back when it ends.
type streamSlot struct {
	release func()
	taken   atomic.Bool
}

// take hands the slot's release to a detached stream; nil for no slot.
func (s *streamSlot) take() func() {
	if s == nil {
		return nil
	}
	s.taken.Store(true)
	return s.release
}

// giveBack undoes take: the handler releases the slot after all.
func (s *streamSlot) giveBack() {
	if s != nil {
		s.taken.Store(false)
	}
}

// done releases the slot when its handler returns, unless it was taken.
func (s *streamSlot) done() {
	if !s.taken.Load() {
		s.release()
	}
}
