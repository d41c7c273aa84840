package watch

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/startgate"
	"github.com/slicerd/slicerd/roles/auth"
)

// Latest holds the newest assignment of one job and sends it to every
// stream when it changes. Streams hold no per-subscriber queue: each is
// sent the newest value when its turn comes, so a slow stream skips
// intermediate generations instead of slowing the publisher or buffering
// without bound.
//
// Readers take no lock: every change installs a new immutable state,
// which the senders load from one atomic pointer instead of queueing on a
// mutex. Writers serialise on mu.
//
// A change is sent in a round: a few worker goroutines (roundWorkers) walk
// the job's streams, one group of streams after another, a group being the
// streams of one client connection, and call each stream's send function
// on its handler's behalf while the handler waits. The handler goroutines
// of the job's streams stay asleep: a change costs one send per stream
// from a goroutine that is already running, rather than waking each
// stream's goroutine to send for itself (a wake-up, a switch to a stack
// that went cold, and back to sleep, for every stream of every change).
// Consecutive streams of a connection are sent by different workers, so
// the connection can write their frames in fewer flushes. Relays' streams
// (Subscription.Relay: Distributors serving the job on to subscribers of
// their own) come first in every round, so that a fan-out tree's next
// level starts its own round while this one runs rather than after it;
// and since only
// the workers send, a fan-out to 100,000 streams never puts 100,000
// goroutines in the scheduler's run queue, where gossip's probe
// acknowledgements and the Assigner's work would queue behind them.
//
// Whoever sends on a stream holds its subscriber's mutex: its handler
// while it sends the stream's first messages and whenever it wakes (its
// context ended, or a worker's send failed), or a worker. A worker that
// finds a stream held skips it and wakes its handler, which sends what is
// new once it holds the stream. A worker whose send waits on a
// subscriber that does not read holds only that stream; a worker that
// finished no send for paceStall is replaced by another, so stalled
// subscribers do not hold the others up.
type Latest struct {
	mu      sync.Mutex
	state   atomic.Pointer[state]
	encodes atomic.Int64 // protobuf encodings of full assignments so far

	subMu  sync.Mutex
	subs   map[string]map[*subscriber]struct{} // by group
	relays int                                 // subscribers with relay set

	round    atomic.Uint64 // the latest round; a round's goroutines stop when it is not their own
	released chan struct{} // nudges a round's supervisor to look at its round (stopPacing)
	// pacers are the rounds' supervisors, at most one running its round
	// and any superseded one on its way out. A round ends when every
	// stream was taken by a worker, when a later change starts another,
	// or at stopPacing, which End calls and which waits for them.
	pacers  sync.WaitGroup
	running atomic.Int32 // supervisors started and not yet returned
	// senders are the rounds' workers. A worker stops when its round
	// ends, once its send in progress returns: a send to a subscriber
	// that does not read, at the latest after the stream write timeout,
	// and the stream's handler waits for it before it returns.
	senders sync.WaitGroup
}

// Rounds.
const (
	roundWorkers = 256
	paceStall    = 50 * time.Millisecond
)

// subscriber is one stream. wake is signalled when its context ends, when
// a worker's send for it failed, and when a worker found it held.
type subscriber struct {
	wake chan struct{}
	// mu is held by whoever sends on the stream: its handler or a worker.
	mu sync.Mutex
	// Under mu:
	known  assign.Version // the version the stream's subscriber holds
	deltas bool           // the subscriber applies deltas
	relay  bool           // sent first in a round; set before it is registered
	send   func(*Message) error
	err    error // a worker's send failed: the handler returns it
	gone   bool  // the handler returned: nobody may send on the stream
}

func (s *subscriber) signal() {
	select {
	case s.wake <- struct{}{}:
	default: // a signal is pending already
	}
}

// Subscription is what a stream's subscriber holds and asks for.
type Subscription struct {
	Known  assign.Version // the version the subscriber holds
	Deltas bool           // it applies deltas
	// Group is the stream's client connection: consecutive streams of a
	// group go to different workers of a round.
	Group string
	// Relay sends the stream a new generation before the streams that are
	// not relays: its subscriber serves the job on to its own. Set it
	// only for a caller trusted to say so (see Serve).
	Relay bool
	// Heartbeat, when positive, sends the stream a heartbeat (an empty
	// message, api.IsHeartbeat) at once and then every Heartbeat, whatever
	// else goes out on it, so that no more than Heartbeat and one send's
	// wait for the subscriber (at most 1.25 times the stream write
	// timeout) pass between two complete messages. Set it only for a
	// caller that asked for heartbeats (api.AsksHeartbeats).
	Heartbeat time.Duration
}

// heartbeatInterval is the heartbeat interval Serve announces and keeps;
// tests shorten it.
var heartbeatInterval = api.HeartbeatInterval

// heartbeatMessage is the heartbeat every stream sends, encoded once (to
// nothing: an empty WatchAssignmentResponse).
var heartbeatMessage = newDeltaMessage(&slicerv1.WatchAssignmentResponse{})

// subscribe registers a stream, its mutex held by the caller; the
// returned function unregisters it.
func (l *Latest) subscribe(s Subscription, send func(*Message) error) (*subscriber, func()) {
	sub := &subscriber{wake: make(chan struct{}, 1), known: s.Known, deltas: s.Deltas, relay: s.Relay, send: send}
	sub.mu.Lock()
	l.subMu.Lock()
	defer l.subMu.Unlock()
	if l.subs == nil {
		l.subs = map[string]map[*subscriber]struct{}{}
	}
	g := l.subs[s.Group]
	if g == nil {
		g = map[*subscriber]struct{}{}
		l.subs[s.Group] = g
	}
	g[sub] = struct{}{}
	if s.Relay {
		l.relays++
	}
	return sub, func() {
		l.subMu.Lock()
		defer l.subMu.Unlock()
		delete(g, sub)
		if len(g) == 0 && l.subs[s.Group] != nil {
			delete(l.subs, s.Group)
		}
		if s.Relay {
			l.relays--
		}
	}
}

// deliver sends sub every assignment that supersedes what it holds, the
// delta where it can; sub.mu is held. It returns the send's error, or the
// Latest's when it has no assignment and failed.
func (l *Latest) deliver(sub *subscriber) error {
	for {
		s := l.get()
		switch {
		case s.a != nil && s.a.Version().Supersedes(sub.known):
			msg := s.msg
			if sub.deltas {
				if d := s.delta(sub.known); d != nil {
					msg = d
				}
			}
			if err := sub.send(msg); err != nil {
				return err
			}
			sub.known = s.a.Version()
		case s.a == nil && s.err != nil:
			return s.err
		default:
			return nil
		}
	}
}

// sendFor delivers to sub on its handler's behalf, unless someone holds
// the stream: then its handler is woken, to deliver once it holds it. A
// failed send is left for the handler to return.
func (l *Latest) sendFor(sub *subscriber) {
	if !sub.mu.TryLock() {
		sub.signal()
		return
	}
	if !sub.gone && sub.err == nil {
		if err := l.deliver(sub); err != nil {
			sub.err = err
			sub.signal()
		}
	}
	sub.mu.Unlock()
}

// wakeAll sends the held state to every subscriber in a round of its own:
// the relays, then the others group after group.
func (l *Latest) wakeAll() {
	subs := l.roundOrder()
	round := l.round.Add(1)
	if len(subs) == 0 {
		return
	}
	l.running.Add(1)
	l.pacers.Go(func() {
		defer l.running.Add(-1)
		l.pace(round, subs)
	})
}

// roundOrder lists the subscribers in the order a round takes them: the
// relays, then the others group after group (but for the few a relay's
// move to the front swapped out of place).
func (l *Latest) roundOrder() []*subscriber {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	n := 0
	for _, g := range l.subs {
		n += len(g)
	}
	subs := make([]*subscriber, 0, n)
	for _, g := range l.subs {
		for sub := range g {
			subs = append(subs, sub)
		}
	}
	if l.relays > 0 {
		front := 0
		for i, sub := range subs {
			if sub.relay {
				subs[front], subs[i] = sub, subs[front]
				front++
			}
		}
	}
	return subs
}

// wakeNow wakes every subscriber's handler at once, group by group; a
// round under way stops.
func (l *Latest) wakeNow() {
	l.round.Add(1)
	l.subMu.Lock()
	for _, g := range l.subs {
		for sub := range g {
			sub.signal()
		}
	}
	l.subMu.Unlock()
}

// pace runs a round: roundWorkers workers take subs in order, and each
// worker that finished no send for paceStall (its subscriber does not
// read) is replaced by another, so that a run of stalled subscribers,
// such as every stream of a client that stopped reading, holds the round
// up for one paceStall per roundWorkers of them rather than one per
// stream.
func (l *Latest) pace(round uint64, subs []*subscriber) {
	var next atomic.Int64
	taken := make(chan struct{})
	var takenOnce sync.Once
	type worker struct {
		sent     atomic.Int64
		last     int64
		replaced bool
	}
	var workers []*worker
	start := func(n int) {
		for range n {
			w := &worker{}
			workers = append(workers, w)
			l.senders.Go(func() {
				for l.round.Load() == round {
					i := next.Add(1) - 1
					if i >= int64(len(subs)) {
						takenOnce.Do(func() { close(taken) })
						return
					}
					l.sendFor(subs[i])
					w.sent.Add(1)
				}
			})
		}
	}
	start(min(roundWorkers, len(subs)))
	t := time.NewTicker(paceStall)
	defer t.Stop()
	for {
		select {
		case <-taken:
			return
		case <-l.released:
		case <-t.C:
		}
		if l.round.Load() != round {
			return
		}
		stuck := 0
		for _, w := range workers {
			if n := w.sent.Load(); n != w.last || w.replaced {
				w.last = n
				continue
			}
			w.replaced = true
			stuck++
		}
		// One for one, and never more than the streams not yet taken: a
		// process starved of CPU makes every worker look stuck.
		start(min(stuck, max(0, len(subs)-int(next.Load()))))
	}
}

// stopPacing ends any round and waits for its supervisor; its workers
// stop after their sends in progress.
func (l *Latest) stopPacing() {
	l.round.Add(1)
	select {
	case l.released <- struct{}{}: // a supervisor waiting for its tick looks at its round
	default:
	}
	l.pacers.Wait()
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
		a:   a,
		msg: newMessage(a, api.CommittedUnixNano(committed), &l.encodes),
	}
	next.msg.published = time.Now()
	next.msg.update = prev.a != nil
	if prev.a != nil && prev.a.Incarnation == a.Incarnation && prev.a.Job == a.Job {
		bases := append(prev.bases[max(0, len(prev.bases)-deltaBases+1):len(prev.bases):len(prev.bases)], prev.a)
		n := 0
		for _, b := range bases {
			n += len(b.Slices)
		}
		for len(bases) > 1 && n > deltaBaseSlices {
			n -= len(bases[0].Slices)
			bases = bases[1:]
		}
		// A list of its own, holding no dropped base in its array: at a
		// million slices each is some 70 MB.
		next.bases = slices.Clone(bases)
	}
	next.deltas = make([]lazyDelta, len(next.bases))
	l.replace(next)
	return true
}

// Rewind installs a, an earlier generation of the held assignment's job
// and incarnation than the held one: the store it was read from went back
// (restored from an older copy), and what the node publishes next follows
// from a. It keeps no base for deltas: the held generations may differ
// from the store's of the same numbers. Streams that hold a later
// generation are sent nothing until one above theirs is published.
func (l *Latest) Rewind(a *assign.Assignment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.state.Load()
	next := &state{a: a, msg: newMessage(a, 0, &l.encodes)}
	next.msg.published = time.Now()
	next.msg.update = prev.a != nil
	l.replace(next)
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
// job is gone. Its streams' handlers are woken at once (they end without
// sending, each once a worker's send in progress on it returns), and any
// round is stopped and its supervisor waited for. A later publish starts
// afresh.
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
			d := &slicerv1.WatchAssignmentResponse{Delta: api.Diff(b, s.a), CommittedUnixNano: s.msg.CommittedUnixNano()}
			if d.Delta == nil {
				return
			}
			full, err := s.msg.encoded()
			if err != nil {
				return
			}
			m := newDeltaMessage(d)
			m.published, m.update = s.msg.published, s.msg.update
			if wire, err := m.encoded(); err == nil && len(wire) < len(full) {
				ld.msg = m
			}
		})
		return ld.msg
	}
	return nil
}

// Stream sends every assignment that supersedes s.Known until ctx ends or
// l fails before it has any assignment; as deltas where it can when
// s.Deltas is set (the subscriber applies them). The stream's first messages are
// sent here, the later ones by the rounds' workers while this waits (see
// Latest). s says what the subscriber holds and how it is sent.
// stopping is closed when the agent shuts down, which then cancels ctx: a
// stream ended so returns UNAVAILABLE, telling the client to reconnect
// elsewhere. With s.Heartbeat set, the handler sends a heartbeat after
// the first messages and then wakes every s.Heartbeat (the first time
// after a random part of it, so that streams opened together do not beat
// together) to send another: one timer per stream, and at 100,000
// streams and the 15 s of api.HeartbeatInterval some 6,700 wakes and
// five-byte sends a second.
func (l *Latest) Stream(ctx context.Context, stopping <-chan struct{}, s Subscription, send func(*Message) error) error {
	sub, unsubscribe := l.subscribe(s, send)
	defer unsubscribe()
	// sub.mu is held but while the handler waits; no worker sends on the
	// stream once it returns.
	defer func() {
		sub.gone = true
		sub.mu.Unlock()
	}()
	// done is read once: ctx.Err walks the request's chain of contexts
	// (the server's, the gate's, auth's, connect-go's) on every call, a
	// cache miss per link.
	done := ctx.Done()
	var beat <-chan time.Time
	var timer *time.Timer
	if s.Heartbeat > 0 {
		timer = time.NewTimer(s.Heartbeat/2 + rand.N(s.Heartbeat/2+1))
		defer timer.Stop()
		beat = timer.C
		// The first heartbeat goes out at once, after what the stream
		// has to send first (or its error), with the response headers that
		// announce the others.
		if err := l.deliver(sub); err != nil {
			return err
		}
		if err := sub.send(heartbeatMessage); err != nil {
			return err
		}
	}
	waited := false
	for {
		if sub.err != nil {
			return sub.err
		}
		if err := l.deliver(sub); err != nil {
			return err
		}
		sub.mu.Unlock()
		if !waited {
			startgate.Waiting(ctx) // its start is over: it waits
			waited = true
		}
		// Parked on two channels (three with heartbeats): a wake from a
		// worker and the end of the call. (A context.AfterFunc signalling
		// wake would park on one, but costs an entry in the parent context
		// and a closure per stream, about 370 bytes: 37 MB at 100,000
		// streams.)
		beating := false
		select {
		case <-sub.wake:
		case <-done:
		case <-beat:
			beating = true
		}
		sub.mu.Lock()
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
		if beating && sub.err == nil {
			if err := sub.send(heartbeatMessage); err != nil {
				return err
			}
			timer.Reset(s.Heartbeat)
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

// subscription is what a WatchAssignment call asks for. It is a relay's
// only when it says so and auth.MayRelay trusts its caller to.
func subscription(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest]) Subscription {
	return Subscription{
		Known:  knownVersion(req.Msg),
		Deltas: acceptsDeltas(req.Msg),
		Group:  req.Peer().Addr,
		Relay:  req.Msg.GetRelay() && auth.MayRelay(auth.CallerFrom(ctx)),
	}
}

// Serve answers a WatchAssignment call from l: every assignment that
// supersedes what the caller says it holds, as deltas when it applies
// them, until the call ends; to a caller that asks for heartbeats
// (api.AsksHeartbeats), with heartbeats every api.HeartbeatInterval,
// announced in the response headers. sent, when not nil, is told of each
// message sent but heartbeats. A caller that says it is a relay (the
// request's relay field) is sent each generation first when
// auth.MayRelay trusts it to say so.
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
			if m != heartbeatMessage {
				sent(m)
			}
			return nil
		}
	}
	sub := subscription(ctx, req)
	if api.AsksHeartbeats(req.Header()) {
		sub.Heartbeat = heartbeatInterval
		api.AnnounceHeartbeat(stream.ResponseHeader(), heartbeatInterval)
	}
	return l.Stream(ctx, stopping, sub, send)
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

// Relays counts the streams waiting on l that are sent first: relay
// Distributors' (Subscription.Relay).
func (l *Latest) Relays() int {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	return l.relays
}

// Message is the held generation's full message, nil for none.
func (l *Latest) Message() *Message { return l.get().msg }

// Encodes counts the protobuf encodings of full assignments l made.
func (l *Latest) Encodes() int64 { return l.encodes.Load() }
