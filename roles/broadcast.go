package roles

import (
	"context"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// latest holds the newest assignment of one job and wakes every waiter when
// it changes. Waiters hold no per-subscriber queue: each reads the newest
// value after waking, so a slow stream skips intermediate generations instead
// of slowing the publisher or buffering without bound.
//
// Readers take no lock: every change installs a new immutable latestState,
// so the streams a change wakes (up to one per subscriber) load it from
// one atomic pointer instead of queueing on a mutex. Writers serialise on
// mu.
type latest struct {
	mu      sync.Mutex
	state   atomic.Pointer[latestState]
	encodes atomic.Int64 // protobuf encodings of full assignments so far
}

// deltaBases is how many earlier generations a latest keeps to send
// deltas from: a subscriber further behind gets the full assignment.
const deltaBases = 8

// latestState is one value of a latest. It is never modified once
// installed, except for the deltas it computes and encodes on first use.
type latestState struct {
	a       *assign.Assignment
	msg     *sharedResponse // a in wire form, built and encoded once for every stream
	err     error           // terminal error for waiters that have no assignment yet
	changed chan struct{}   // closed when the next state replaces this one
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
	msg  *sharedResponse
}

func newLatest() *latest {
	l := &latest{}
	l.state.Store(&latestState{changed: make(chan struct{})})
	return l
}

// get returns the current state.
func (l *latest) get() *latestState {
	return l.state.Load()
}

// current returns the held assignment, or nil.
func (l *latest) current() *assign.Assignment {
	return l.get().a
}

// replace installs next and wakes the waiters of the state it replaces;
// l.mu is held.
func (l *latest) replace(next *latestState) {
	prev := l.state.Load()
	next.changed = make(chan struct{})
	l.state.Store(next)
	close(prev.changed)
}

// publish installs a if it supersedes what is held (a newer generation, or
// another store incarnation); it reports whether it did.
func (l *latest) publish(a *assign.Assignment) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.state.Load()
	if prev.a != nil && !a.Version().Supersedes(prev.a.Version()) {
		return false
	}
	next := &latestState{
		a:   a,
		msg: newSharedResponse(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a)}, &l.encodes),
	}
	if prev.a != nil && prev.a.Incarnation == a.Incarnation && prev.a.Job == a.Job {
		next.bases = append(next.bases, prev.bases[max(0, len(prev.bases)-deltaBases+1):]...)
		next.bases = append(next.bases, prev.a)
	}
	next.deltas = make([]lazyDelta, len(next.bases))
	l.replace(next)
	return true
}

// fail records err for waiters that still have no assignment.
func (l *latest) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := *l.state.Load()
	next.err = err
	l.replace(&next)
}

// end drops the held assignment and ends every stream of l with err: the
// job is gone. A later publish starts afresh.
func (l *latest) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replace(&latestState{err: err})
}

// delta returns the message that brings a subscriber holding known to
// s.a: the delta when s keeps known as a base and the delta is smaller
// than the full assignment, and nil otherwise.
func (s *latestState) delta(known assign.Version) *sharedResponse {
	if s.a == nil || known.Generation == 0 || known.Incarnation != s.a.Incarnation {
		return nil
	}
	for i, b := range s.bases {
		if b.Generation != known.Generation {
			continue
		}
		ld := &s.deltas[i]
		ld.once.Do(func() {
			d := &slicerv1.WatchAssignmentResponse{Delta: api.Diff(b, s.a)}
			if d.Delta == nil {
				return
			}
			full, err := s.msg.encoded()
			if err != nil {
				return
			}
			m := newSharedResponse(d, nil)
			if wire, err := m.encoded(); err == nil && len(wire) < len(full) {
				ld.msg = m
			}
		})
		return ld.msg
	}
	return nil
}

// stream sends every assignment that supersedes known until ctx ends or l
// fails before it has any assignment; as deltas where it can when deltas
// is set (the subscriber applies them). stopping is closed when the agent
// shuts down.
func (l *latest) stream(ctx context.Context, stopping <-chan struct{}, known assign.Version, deltas bool, send func(*sharedResponse) error) error {
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
		select {
		case <-s.changed:
		case <-ctx.Done():
			return nil
		case <-stopping:
			return connect.NewError(connect.CodeUnavailable, errShuttingDown)
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
