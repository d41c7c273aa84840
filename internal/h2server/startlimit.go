package h2server

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Starting handlers.
//
// A request's handler is starting from when its goroutine is started
// until its response headers are queued, or it returns. That is when it
// costs CPU: it reads and decodes the request, checks who may call it,
// builds its first response. A server that opens tens of thousands of
// streams at once (clients reconnecting after a restart) would otherwise
// start a goroutine for each at once, up to every connection's stream
// limit, and the scheduler's run queue would hold them all: every other
// goroutine of the process (gossip answering its probes, a connection
// reading its preface) waits behind that queue.
//
// With Server.MaxStartingHandlers set, at most that many handlers are
// starting at once over all of the Server's connections. A request
// beyond them waits in its connection's queue of unstarted handlers,
// which holds no goroutine (the queue upstream keeps for the
// per-connection limit), and connections waiting for a place are served
// in turn, one place each. A place comes back when a handler queues its
// headers, returns, reads a request body that has no data yet (it waits
// for the peer), or says it waits for something other than the CPU
// (Waiting). A handler that holds its place past StartingHandlerPark to
// twice that without any of these is parked: it no longer counts, so
// handlers that wait for a long time without saying so (a long poll, a
// watch of a job with no assignment yet, a forwarded call to a slow
// peer) cannot wedge the server; they only slow it to
// MaxStartingHandlers starts per StartingHandlerPark.

// startLimiter bounds the starting handlers of one Server.
type startLimiter struct {
	limit int
	park  time.Duration

	mu      sync.Mutex
	counted int           // handlers counted, and places granted and not yet used
	epoch   uint64        // advanced every park while connections wait
	inEpoch [2]int        // counted handlers by the parity of the epoch they started in
	waiting []*serverConn // connections waiting for a place, each once, in turn
	timer   *time.Timer
	armed   bool
	parked  atomic.Uint64 // handlers parked since the start, for tests and logs
	holding atomic.Int64  // handlers that took a place and have not given it back, parked or not
}

func newStartLimiter(limit int, park time.Duration) *startLimiter {
	if limit <= 0 {
		return nil
	}
	if park <= 0 {
		park = 100 * time.Millisecond
	}
	return &startLimiter{limit: limit, park: park}
}

// startState is a connection's standing with its Server's startLimiter,
// guarded by the limiter's mutex.
type startState struct {
	waiting bool          // in the limiter's waiting list
	grants  int           // places granted to the connection and not yet used
	wake    chan struct{} // signalled when a place is granted; the serve loop takes it
}

// acquire takes a place for st's handler, or puts sc in the waiting list
// and returns false. Called on sc's serve goroutine.
func (l *startLimiter) acquire(sc *serverConn, st *stream) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case sc.starts.grants > 0:
		sc.starts.grants--
	case len(l.waiting) == 0 && l.counted < l.limit:
		l.counted++
	default:
		if !sc.starts.waiting {
			sc.starts.waiting = true
			l.waiting = append(l.waiting, sc)
		}
		l.armLocked()
		return false
	}
	l.inEpoch[l.epoch&1]++
	st.startEpoch = l.epoch
	st.starting.Store(true)
	l.holding.Add(1)
	return true
}

// release gives st's place back, once, if it holds one. Called from any
// goroutine: the serve loop when the handler's headers are queued, the
// handler's goroutine when it returns or waits.
func (l *startLimiter) release(st *stream) {
	if l == nil || !st.starting.CompareAndSwap(true, false) {
		return
	}
	l.holding.Add(-1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if st.startEpoch+1 >= l.epoch { // else parked, no longer counted
		l.counted--
		l.inEpoch[st.startEpoch&1]--
	}
	l.grantLocked()
}

// giveBack returns the places granted to sc that it did not use, and
// takes it off the waiting list when gone is set (its serve loop ends).
func (l *startLimiter) giveBack(sc *serverConn, gone bool) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if gone && sc.starts.waiting {
		for i, w := range l.waiting {
			if w == sc {
				l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
				break
			}
		}
		sc.starts.waiting = false
	}
	if sc.starts.grants == 0 {
		return
	}
	l.counted -= sc.starts.grants
	sc.starts.grants = 0
	l.grantLocked()
}

// grantLocked hands the free places to the waiting connections, one
// each in turn, and wakes them.
func (l *startLimiter) grantLocked() {
	for l.counted < l.limit && len(l.waiting) > 0 {
		sc := l.waiting[0]
		l.waiting[0] = nil
		l.waiting = l.waiting[1:]
		sc.starts.waiting = false
		sc.starts.grants++
		l.counted++
		select {
		case sc.starts.wake <- struct{}{}:
		default: // already signalled
		}
	}
	if len(l.waiting) == 0 {
		l.waiting = nil
	}
}

// armLocked starts the parking timer unless it runs.
func (l *startLimiter) armLocked() {
	if l.armed {
		return
	}
	l.armed = true
	if l.timer == nil {
		l.timer = time.AfterFunc(l.park, l.tick)
	} else {
		l.timer.Reset(l.park)
	}
}

// tick advances the epoch, parks the handlers started two epochs ago
// that still hold their places, grants the places that frees, and runs
// again while connections wait.
func (l *startLimiter) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	l.epoch++
	if n := l.inEpoch[l.epoch&1]; n > 0 {
		l.counted -= n
		l.inEpoch[l.epoch&1] = 0
		l.parked.Add(uint64(n))
	}
	l.grantLocked()
	if len(l.waiting) > 0 {
		l.armLocked()
	}
}

// Waiting tells the server that the handler of w is about to wait for
// something other than the CPU (an event, another server), so it no
// longer counts against Server.MaxStartingHandlers. Call it from the
// handler's goroutine. It does nothing for a handler that is not
// counted, or for a response of another server.
func Waiting(w http.ResponseWriter) {
	for {
		switch rw := w.(type) {
		case *responseWriter:
			if rw.rws != nil && rw.rws.stream != nil {
				st := rw.rws.stream
				st.sc.srv.startLimiter().release(st)
			}
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = rw.Unwrap()
		default:
			return
		}
	}
}

// ParkedHandlers counts the handlers parked since the Server started:
// those that held a place among the starting handlers for longer than
// StartingHandlerPark without queueing headers, returning or calling
// Waiting. 0 when starts are not limited.
func (s *Server) ParkedHandlers() uint64 {
	if l := s.startLimiter(); l != nil {
		return l.parked.Load()
	}
	return 0
}

// empty reports whether a Read of p would wait for the peer: nothing is
// buffered and the body has neither ended nor failed.
func (p *pipe) empty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return (p.b == nil || p.b.Len() == 0) && p.err == nil && p.breakErr == nil
}

// StartingHandlers counts the handlers that hold a place among the
// starting handlers, or held one when they were parked, and have not
// yet queued headers, returned, waited for their body or called
// Waiting. 0 when starts are not limited.
func (s *Server) StartingHandlers() int {
	if l := s.startLimiter(); l != nil {
		return int(l.holding.Load())
	}
	return 0
}

// startLimiter returns the Server's limiter, nil when starts are not
// limited.
func (s *Server) startLimiter() *startLimiter {
	if s == nil || s.state == nil {
		return nil
	}
	return s.state.starts
}
