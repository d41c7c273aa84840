//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
)

// h2Conn carries many WatchAssignment streams (the Connect protocol over
// cleartext HTTP/2) on one connection read by one goroutine, with no
// goroutine per stream: -client h2. It stands for many subscribers on
// other machines while costing the shared machine far less CPU per
// message than a connect-go client (one goroutine wake-up per read burst
// rather than several per message), so that more of the machine measures
// slicerd. It speaks what a Connect client would: the request envelope,
// flow control (WINDOW_UPDATE), SETTINGS and PING acknowledgements, HPACK.
type h2Conn struct {
	ctx  context.Context
	s    *subscribers
	addr string
	c    net.Conn

	mu     sync.Mutex // the write side: framer writes, HPACK, stream ids
	fr     *http2.Framer
	enc    *hpack.Encoder
	hbuf   bytes.Buffer
	nextID uint32

	// Owned by the read loop once it runs.
	streams map[uint32]*h2Stream
	reopens sync.WaitGroup // the streams being reopened
}

// h2Stream is one watch stream: the harness's stream idx.
type h2Stream struct {
	idx     int
	buf     []byte // envelope bytes received and not yet parsed
	known   uint64
	inc     string
	unacked uint32 // flow-control bytes consumed and not yet returned
}

// h2Window is the flow-control window each stream and the connection
// grant slicerd; consumed bytes are returned once they reach half of it.
const h2Window = 1 << 20

// startRaw opens the bulk streams on s.conns h2Conns. A connection that
// fails is dialled again after a pause, its streams reopened from the
// generations they hold, as a Clerk reconnects; s.redials counts those.
func (s *subscribers) startRaw(ctx context.Context) {
	per := make([][]*h2Stream, s.conns)
	for i := 1; i < s.n; i++ {
		per[i%s.conns] = append(per[i%s.conns], &h2Stream{idx: i})
	}
	for _, sts := range per {
		if len(sts) == 0 {
			continue
		}
		s.wg.Go(func() {
			for {
				err := runH2Conn(ctx, s, s.rawAddr, sts)
				if ctx.Err() != nil {
					return
				}
				s.redials.Add(1)
				fmt.Fprintf(os.Stderr, "fanout: h2 connection: %v; dialling again\n", err)
				if benchproc.Sleep(ctx, 100*time.Millisecond) != nil {
					return
				}
			}
		})
	}
}

// runH2Conn opens one connection with a stream for each of sts and reads
// it until ctx ends or the connection fails.
func runH2Conn(ctx context.Context, s *subscribers, addr string, sts []*h2Stream) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	h := &h2Conn{ctx: ctx, s: s, addr: addr, c: c, nextID: 1, streams: map[uint32]*h2Stream{}}
	// The streams' reopenings (ended) are over before they open on
	// another connection.
	defer h.reopens.Wait()
	defer cancel()
	h.fr = http2.NewFramer(c, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		return err
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window}, http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
		return err
	}
	if err := h.fr.WriteWindowUpdate(0, h2Window); err != nil {
		return err
	}
	// The streams open while the responses are read, as a client's would:
	// a connection that wrote all its requests before reading any would
	// leave slicerd's responses to them unread meanwhile.
	opened := make(chan error, 1)
	go func() {
		var err error
		for _, st := range sts {
			if err = h.open(st); err != nil {
				break
			}
		}
		opened <- err
		if err != nil {
			c.Close() // ends the read loop
		}
	}()
	err = h.read()
	c.Close() // ends the opening, if still under way
	// An opening that failed by itself says why; one cut short by the
	// close above does not.
	if oerr := <-opened; oerr != nil && !errors.Is(oerr, net.ErrClosed) {
		return oerr
	}
	return err
}

// open sends the request of st on a new stream.
func (h *h2Conn) open(st *h2Stream) error {
	var deltas uint32
	if h.s.deltas {
		deltas = api.DeltaVersion
	}
	msg, err := proto.Marshal(&slicerv1.WatchAssignmentRequest{Job: "kv", KnownGeneration: st.known, KnownIncarnation: st.inc, DeltaVersion: deltas})
	if err != nil {
		return err
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)

	h.mu.Lock()
	defer h.mu.Unlock()
	h.hbuf.Reset()
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", h.addr},
		{":path", slicerv1connect.DistributorServiceWatchAssignmentProcedure},
		{"content-type", "application/connect+proto"}, {"connect-protocol-version", "1"},
		{"connect-accept-encoding", "gzip"}, {"user-agent", "slicerd-fanout-h2"},
	} {
		if err := h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	id := h.nextID
	h.nextID += 2
	st.buf, st.unacked = st.buf[:0], 0
	h.streams[id] = st // before the response can arrive: the read loop waits on mu to write
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return h.fr.WriteData(id, true, body)
}

// read handles frames until the connection fails.
func (h *h2Conn) read() error {
	var connUnacked uint32
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.write(func() error { return h.fr.WritePing(true, f.Data) })
			}
		case *http2.GoAwayFrame:
			return fmt.Errorf("slicerd sent GOAWAY: %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			h.ended(f.StreamID)
		case *http2.MetaHeadersFrame:
			if f.PseudoValue("status") != "" && f.PseudoValue("status") != "200" {
				fmt.Fprintf(os.Stderr, "fanout: h2 stream: HTTP status %s\n", f.PseudoValue("status"))
			}
			if f.StreamEnded() {
				h.ended(f.StreamID)
			}
		case *http2.DataFrame:
			n := f.Header().Length
			connUnacked += n
			h.mu.Lock()
			st := h.streams[f.StreamID]
			h.mu.Unlock()
			if st != nil {
				st.buf = append(st.buf, f.Data()...)
				st.unacked += n
				h.parse(st, now)
				if st.unacked >= h2Window/2 {
					id, inc := f.StreamID, st.unacked
					st.unacked = 0
					h.write(func() error { return h.fr.WriteWindowUpdate(id, inc) })
				}
			}
			if connUnacked >= h2Window/2 {
				inc := connUnacked
				connUnacked = 0
				h.write(func() error { return h.fr.WriteWindowUpdate(0, inc) })
			}
			if f.StreamEnded() {
				h.ended(f.StreamID)
			}
		}
	}
}

// parse records every whole message in st's buffer.
func (h *h2Conn) parse(st *h2Stream, now int64) {
	for len(st.buf) >= 5 {
		size := int(binary.BigEndian.Uint32(st.buf[1:5]))
		if len(st.buf) < 5+size {
			return
		}
		flags, msg := st.buf[0], st.buf[5:5+size]
		if flags == 0 {
			var m slicerv1.WatchAssignmentResponse
			if err := (generationCodec{}).Unmarshal(msg, &m); err == nil {
				st.known, st.inc = generationOf(&m)
				h.s.record(st.idx, st.known, now)
			}
		}
		st.buf = st.buf[5+size:]
	}
	if len(st.buf) == 0 {
		st.buf = nil // drop a grown buffer between messages
	}
}

// ended reopens a stream that ended, from the generation it holds.
func (h *h2Conn) ended(id uint32) {
	h.mu.Lock()
	st := h.streams[id]
	delete(h.streams, id)
	h.mu.Unlock()
	if st == nil {
		return
	}
	h.reopens.Go(func() { // not from the read loop, which must keep reading
		if benchproc.Sleep(h.ctx, 100*time.Millisecond) == nil {
			_ = h.open(st)
		}
	})
}

// write runs a framer write under the write lock; a failed write shows
// up as a read error.
func (h *h2Conn) write(f func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = f()
}
