// Package startgate bounds the RPC handlers that are starting at once.
//
// A handler is starting from when it enters the gate until it returns
// (a unary RPC has then sent its answer) or says it waits for an event
// (Waiting: a watch stream has sent what it had and waits for the next
// change).
// That is when it costs CPU: it decodes the request, checks who may call
// it and builds its first response. When tens of thousands of streams
// open at once (subscribers reconnecting after a restart) the HTTP/2
// server starts a goroutine for each; without a bound every one of them
// would be runnable at once, and every other goroutine of the process
// (gossip answering its probes, a connection reading its preface) would
// wait behind that run queue. With the gate, at most Limit handlers run
// their start; the others are parked on a channel, in arrival order,
// costing their goroutine but no CPU and no place in the run queue.
//
// A handler whose read of its request body has not returned within
// ReadGrace gives its place back: it waits for its peer, so a client
// sending bodies slowly holds no place for long. A handler that holds its
// place for the park time without any of these events (a slow store, a
// forwarded call to a slow peer) gives it back and is counted as parked,
// so a slow handler can slow the starts down but never wedge them.
package startgate

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/slicerd/slicerd/internal/reqctx"
)

// ReadGrace is how long a read of a request body may wait with the
// handler's place held: a body that is on its way is read sooner.
const ReadGrace = 5 * time.Millisecond

// DefaultPark is how long a handler may hold its place without answering
// or saying it waits before it stops counting.
const DefaultPark = 100 * time.Millisecond

// Gate bounds the starting handlers of the handlers it wraps. The zero
// value is not usable; use New.
type Gate struct {
	sem  chan struct{}
	park time.Duration

	parked atomic.Uint64 // places given back by the park timer
}

// New returns a gate that lets limit handlers start at once, each for at
// most park (DefaultPark when park <= 0). limit must be positive.
func New(limit int, park time.Duration) *Gate {
	if limit <= 0 {
		panic("startgate: limit must be positive")
	}
	if park <= 0 {
		park = DefaultPark
	}
	return &Gate{sem: make(chan struct{}, limit), park: park}
}

// Limit is the number of handlers that may start at once.
func (g *Gate) Limit() int { return cap(g.sem) }

// Starting is the number of handlers holding a place now.
func (g *Gate) Starting() int { return len(g.sem) }

// Parked counts the handlers that held their place for the park time
// without answering or waiting, since the gate was made.
func (g *Gate) Parked() uint64 { return g.parked.Load() }

// place is one handler's place in the gate, given back once.
type place struct {
	g     *Gate
	done  atomic.Bool // given back
	timer *time.Timer
}

func (p *place) release(parked bool) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	if parked {
		p.g.parked.Add(1)
	} else {
		p.timer.Stop()
	}
	<-p.g.sem
}

// notStarted answers a request whose context ended before it had a place.
const notStarted = "slicerd: shutting down or the request was canceled before it started"

// Wrap returns h behind the gate. A request waits for a place, or for its
// context to end (the client went away, or the server shuts down), in
// which case it is answered 503 without reaching h.
func (g *Gate) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case g.sem <- struct{}{}:
		case <-r.Context().Done():
			http.Error(w, notStarted, http.StatusServiceUnavailable)
			return
		}
		if r.Context().Err() != nil { // both were ready: the request is gone
			<-g.sem
			http.Error(w, notStarted, http.StatusServiceUnavailable)
			return
		}
		p := &place{g: g}
		p.timer = time.AfterFunc(g.park, func() { p.release(true) })
		defer p.release(false)
		r, v := reqctx.Attach(r)
		v.Place = p
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &body{ReadCloser: r.Body, p: p}
		}
		h.ServeHTTP(w, r)
	})
}

// Waiting gives back the place of the request of ctx, if it holds one:
// its handler is about to wait for something other than the CPU (an
// event, a change of a job). Calling it again, or for a context with no
// place, does nothing.
func Waiting(ctx context.Context) {
	if v := reqctx.From(ctx); v != nil {
		if p, _ := v.Place.(*place); p != nil {
			p.release(false)
		}
	}
}

// body gives the place back when a read waits longer than ReadGrace for
// the peer.
type body struct {
	io.ReadCloser
	p *place
}

func (b *body) Read(q []byte) (int, error) {
	if b.p.done.Load() {
		return b.ReadCloser.Read(q)
	}
	t := time.AfterFunc(ReadGrace, func() { b.p.release(false) })
	n, err := b.ReadCloser.Read(q)
	t.Stop()
	return n, err
}
