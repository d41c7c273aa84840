package watch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/startgate"
)

// Latest holds the newest assignment of one job and wakes every waiter when
// it changes. Waiters hold no per-subscriber queue: each reads the newest
// value after waking, so a slow stream skips intermediate generations instead
// of slowing the publisher or buffering without bound.
//
// Readers take no lock: every change installs a new immutable state,
// so the streams a change wakes (up to one per subscriber) load it from
// one atomic pointer instead of queueing on a mutex. Writers serialise on
// mu.
//
// Each stream waits on a channel of its own, which a change signals, one
// group of streams after another, a group being the streams of one client
// connection: the streams of one HTTP/2 connection then run back to back,
// so the connection can write their frames in fewer flushes, and a waiting
// stream costs one channel receive rather than a select over channels that
// thousands of streams share.
//
// A change to a job with more than paceLimit streams wakes them in a
// paced round: at most paceLimit of them are woken and still sending at
// any moment, so that a fan-out to 100,000 streams never puts 100,000
// goroutines in the scheduler's run queue at once, where gossip's probe
// acknowledgements and the Assigner's work would queue behind them.
// Senders that make no progress for paceStall (stalled subscribers, whose
// sends wait for --stream-write-timeout) do not hold the round up: it
// then lets paceLimit more go.
type Latest struct {
	mu      sync.Mutex
	state   atomic.Pointer[state]
	encodes atomic.Int64 // protobuf encodings of full assignments so far

	subMu sync.Mutex
	subs  map[string]map[*subscriber]struct{} // by group

	round    atomic.Uint64 // the latest wake-up round; a pacer stops when it is not its own
	inflight atomic.Int64  // streams a pacer woke that have not finished sending
	released chan struct{} // signalled when inflight falls to paceLimit/2, and by stopPacing
	// pacers are the pacing goroutines, at most one running its round and
	// any superseded one on its way out. A round ends when every stream
	// was woken (at the latest n/paceLimit × paceStall after it began),
	// when a later change starts another, or at stopPacing, which end
	// calls and which waits for them.
	pacers  sync.WaitGroup
	running atomic.Int32 // pacing goroutines started and not yet returned
}

// Pacing of large wake-ups.
const (
	paceLimit = 512
	paceStall = 50 * time.Millisecond
)

// subscriber is one waiting stream: wake is signalled at every change and
// when its context ends. paced is its part in a pacing round.
type subscriber struct {
	wake  chan struct{}
	paced atomic.Int32
}

// subscriber.paced: a pacer counts a stream in inflight on idle → woken,
// and the stream uncounts itself on woken → idle (nothing left to send)
// or woken → gone (it ended); a gone stream is never counted again.
const (
	paceIdle int32 = iota
	paceWoken
	paceGone
)

func (s *subscriber) signal() {
	select {
	case s.wake <- struct{}{}:
	default: // a signal is pending already
	}
}

// subscribe registers a stream of group; the returned function
// unregisters it.
func (l *Latest) subscribe(group string) (*subscriber, func()) {
	sub := &subscriber{wake: make(chan struct{}, 1)}
	l.subMu.Lock()
	defer l.subMu.Unlock()
	if l.subs == nil {
		l.subs = map[string]map[*subscriber]struct{}{}
	}
	g := l.subs[group]
	if g == nil {
		g = map[*subscriber]struct{}{}
		l.subs[group] = g
	}
	g[sub] = struct{}{}
	return sub, func() {
		l.subMu.Lock()
		defer l.subMu.Unlock()
		delete(g, sub)
		if len(g) == 0 && l.subs[group] != nil {
			delete(l.subs, group)
		}
	}
}

// wakeAll signals every subscriber, group by group: at once when they
// are few, else in a paced round of its own.
func (l *Latest) wakeAll() {
	l.subMu.Lock()
	n := 0
	for _, g := range l.subs {
		n += len(g)
	}
	if n <= paceLimit {
		l.subMu.Unlock()
		l.wakeNow()
		return
	}
	subs := make([]*subscriber, 0, n)
	for _, g := range l.subs {
		for sub := range g {
			subs = append(subs, sub)
		}
	}
	l.subMu.Unlock()
	round := l.round.Add(1)
	// The round ends when every stream was woken, or when a later change
	// starts another; with every sender stuck that takes
	// n/paceLimit × paceStall.
	l.running.Add(1)
	l.pacers.Go(func() {
		defer l.running.Add(-1)
		l.pace(round, subs)
	})
}

// wakeNow signals every subscriber at once, group by group; a round under
// way stops, since everyone is woken.
func (l *Latest) wakeNow() {
	l.subMu.Lock()
	for _, g := range l.subs {
		for sub := range g {
			sub.signal()
		}
	}
	l.subMu.Unlock()
	l.round.Add(1)
}

// pace wakes subs in order, keeping at most limit of them woken and still
// sending; limit grows by paceLimit whenever no sender finished for
// paceStall.
func (l *Latest) pace(round uint64, subs []*subscriber) {
	limit := int64(paceLimit)
	var t *time.Timer
	for i := 0; i < len(subs); {
		if l.round.Load() != round {
			return
		}
		for ; i < len(subs) && l.inflight.Load() < limit; i++ {
			sub := subs[i]
			if sub.paced.CompareAndSwap(paceIdle, paceWoken) {
				l.inflight.Add(1)
			}
			sub.signal()
		}
		if i == len(subs) {
			return
		}
		if t == nil {
			t = time.NewTimer(paceStall)
			defer t.Stop()
		} else {
			t.Reset(paceStall)
		}
		select {
		case <-l.released:
		case <-t.C:
			limit += paceLimit
		}
	}
}

// stopPacing ends any pacing round and waits for its goroutine.
func (l *Latest) stopPacing() {
	l.round.Add(1)
	select {
	case l.released <- struct{}{}: // a pacer waiting for senders looks at its round
	default:
	}
	l.pacers.Wait()
}

// settle uncounts sub from inflight if a pacer counted it: the stream has
// nothing left to send (to paceIdle) or ended (to paceGone).
func (l *Latest) settle(sub *subscriber, to int32) {
	if sub.paced.Swap(to) == paceWoken && l.inflight.Add(-1) <= paceLimit/2 {
		select {
		case l.released <- struct{}{}:
		default:
		}
	}
}

// deltaBases is how many earlier generations a Latest keeps to send
// deltas from, and deltaBaseSlices how many slices they may hold in all
// (about 40 bytes each beyond the task lists they share): a subscriber
// further behind gets the full assignment. A job at the largest size
// (100,000 slices) keeps its previous generation only, 4 MB.
const (
	deltaBases      = 8
	deltaBaseSlices = 200_000
)

// state is one value of a Latest. It is never modified once
// installed, except for the deltas it computes and encodes on first use.
type state struct {
	a   *assign.Assignment
	msg *Message // a in wire form, built and encoded once for every stream
	err error    // terminal error for waiters that have no assignment yet
	// bases are the earlier assignments of a's incarnation, oldest first,
	// and deltas the deltas from each of them to a, made on first use.
	bases  []*assign.Assignment
	deltas []lazyDelta
}

// lazyDelta is the delta from one base to a state's assignment, made and
// encoded once however many streams send it; msg stays nil when the delta
// would not be smaller than the full assignment.
type lazyDelta struct {
	once sync.Once
	msg  *Message
}

// New returns a Latest that holds nothing yet.
func New() *Latest {
	l := &Latest{released: make(chan struct{}, 1)}
	l.state.Store(&state{})
	return l
}

// get returns the current state.
func (l *Latest) get() *state {
	return l.state.Load()
}

// Current returns the held assignment, or nil.
func (l *Latest) Current() *assign.Assignment {
	return l.get().a
}

// Previous returns the assignment of the same incarnation held before the
// current one, or nil (none was held here since this node started, or
// the incarnation changed).
func (l *Latest) Previous() *assign.Assignment {
	b := l.get().bases
	if len(b) == 0 {
		return nil
	}
	return b[len(b)-1]
}

// replace installs next and wakes every stream; l.mu is held.
func (l *Latest) replace(next *state) {
	l.state.Store(next)
	l.wakeAll()
}

// Publish installs a if it supersedes what is held (a newer generation, or
// another store incarnation); it reports whether it did. committed is when
// the Assigner committed a, by its clock, or the zero time when unknown
// (a read from the store); every message that brings a carries it, in the
// encoding shared by every stream.
func (l *Latest) Publish(a *assign.Assignment, committed time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.state.Load()
	if prev.a != nil && !a.Version().Supersedes(prev.a.Version()) {
		return false
	}
	next := &state{
		a: a,
		msg: newMessage(&slicerv1.WatchAssignmentResponse{
			Assignment: api.ToProto(a), CommittedUnixNano: api.CommittedUnixNano(committed),
		}, &l.encodes),
	}
	next.msg.published = time.Now()
	next.msg.update = prev.a != nil
	if prev.a != nil && prev.a.Incarnation == a.Incarnation && prev.a.Job == a.Job {
		next.bases = append(next.bases, prev.bases[max(0, len(prev.bases)-deltaBases+1):]...)
		next.bases = append(next.bases, prev.a)
		n := 0
		for _, b := range next.bases {
			n += len(b.Slices)
		}
		for len(next.bases) > 1 && n > deltaBaseSlices {
			n -= len(next.bases[0].Slices)
			next.bases = next.bases[1:]
		}
	}
	next.deltas = make([]lazyDelta, len(next.bases))
	l.replace(next)
	return true
}

// Fail records err for waiters that still have no assignment.
func (l *Latest) Fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := *l.state.Load()
	next.err = err
	l.replace(&next)
}

// End drops the held assignment and ends every stream of l with err: the
// job is gone. Its streams are woken at once, not paced (they end without
// sending), and any pacing round is stopped and waited for. A later
// publish starts afresh.
func (l *Latest) End(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopPacing()
	l.state.Store(&state{err: err})
	l.wakeNow()
}

// delta returns the message that brings a subscriber holding known to
// s.a: the delta when s keeps known as a base and the delta is smaller
// than the full assignment, and nil otherwise.
func (s *state) delta(known assign.Version) *Message {
	if s.a == nil || known.Generation == 0 || known.Incarnation != s.a.Incarnation {
		return nil
	}
	for i, b := range s.bases {
		if b.Generation != known.Generation {
			continue
		}
		ld := &s.deltas[i]
		ld.once.Do(func() {
			d := &slicerv1.WatchAssignmentResponse{Delta: api.Diff(b, s.a), CommittedUnixNano: s.msg.GetCommittedUnixNano()}
			if d.Delta == nil {
				return
			}
			full, err := s.msg.encoded()
			if err != nil {
				return
			}
			m := newMessage(d, nil)
			m.published, m.update = s.msg.published, s.msg.update
			if wire, err := m.encoded(); err == nil && len(wire) < len(full) {
				ld.msg = m
			}
		})
		return ld.msg
	}
	return nil
}

// Stream sends every assignment that supersedes known until ctx ends or l
// fails before it has any assignment; as deltas where it can when deltas
// is set (the subscriber applies them). It waits for changes in group,
// the caller's connection ("" for none). stopping is closed when the
// agent shuts down, which then cancels ctx: a stream ended so returns
// UNAVAILABLE, telling the client to reconnect elsewhere.
func (l *Latest) Stream(ctx context.Context, stopping <-chan struct{}, known assign.Version, deltas bool, group string, send func(*Message) error) error {
	sub, unsubscribe := l.subscribe(group)
	defer unsubscribe()
	defer l.settle(sub, paceGone)
	stop := context.AfterFunc(ctx, sub.signal)
	defer stop()
	// done is read once: ctx.Err walks the request's chain of contexts
	// (the server's, the gate's, auth's, connect-go's) on every call, a
	// cache miss per link at every wake of every stream.
	done := ctx.Done()
	// waited: the stream gave back its start place (startgate.Waiting,
	// itself a walk of that chain) when it first waited.
	waited := false
	for {
		s := l.get()
		switch {
		case s.a != nil && s.a.Version().Supersedes(known):
			msg := s.msg
			if deltas {
				if d := s.delta(known); d != nil {
					msg = d
				}
			}
			if err := send(msg); err != nil {
				return err
			}
			known = s.a.Version()
			continue
		case s.a == nil && s.err != nil:
			return s.err
		}
		l.settle(sub, paceIdle)
		if !waited {
			startgate.Waiting(ctx) // its start is over: it waits for a change
			waited = true
		}
		<-sub.wake
		select {
		case <-done:
			// The agent cancels every request's context when it stops.
			select {
			case <-stopping:
				return connect.NewError(connect.CodeUnavailable, ErrShuttingDown)
			default:
				return nil
			}
		default:
		}
	}
}

// acceptsDeltas reports whether a watch request's caller applies deltas
// of the format this server writes.
func acceptsDeltas(req *slicerv1.WatchAssignmentRequest) bool {
	return req.GetDeltaVersion() >= api.DeltaVersion
}

// knownVersion is the assignment version a watch request says its caller
// holds.
func knownVersion(req *slicerv1.WatchAssignmentRequest) assign.Version {
	return assign.Version{Incarnation: req.GetKnownIncarnation(), Generation: req.GetKnownGeneration()}
}

// Serve answers a WatchAssignment call from l: every assignment that
// supersedes what the caller says it holds, as deltas when it applies
// them, until the call ends. sent, when not nil, is told of each message
// sent.
func (l *Latest) Serve(ctx context.Context, stopping <-chan struct{}, req *connect.Request[slicerv1.WatchAssignmentRequest],
	stream *connect.ServerStream[slicerv1.WatchAssignmentResponse], sent func(*Message)) error {
	send, stop := sendShared(ctx, stream)
	defer stop()
	if sent != nil {
		inner := send
		send = func(m *Message) error {
			if err := inner(m); err != nil {
				return err
			}
			sent(m)
			return nil
		}
	}
	return l.Stream(ctx, stopping, knownVersion(req.Msg), acceptsDeltas(req.Msg), req.Peer().Addr, send)
}

// Subscribers counts the streams waiting on l.
func (l *Latest) Subscribers() int {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	n := 0
	for _, g := range l.subs {
		n += len(g)
	}
	return n
}

// Message is the held generation's full message, nil for none.
func (l *Latest) Message() *Message { return l.get().msg }

// Encodes counts the protobuf encodings of full assignments l made.
func (l *Latest) Encodes() int64 { return l.encodes.Load() }
