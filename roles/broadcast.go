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
type latest struct {
	mu      sync.Mutex
	a       *assign.Assignment
	msg     *sharedResponse // a in wire form, built and encoded once for every stream
	err     error           // terminal error for waiters that have no assignment yet
	changed chan struct{}
	encodes atomic.Int64 // protobuf encodings of msg so far
}

func newLatest() *latest {
	return &latest{changed: make(chan struct{})}
}

// get returns the current assignment (nil if none), the terminal error, and
// a channel closed at the next change.
func (l *latest) get() (*assign.Assignment, *sharedResponse, error, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.a, l.msg, l.err, l.changed
}

// current returns the held assignment, or nil.
func (l *latest) current() *assign.Assignment {
	a, _, _, _ := l.get()
	return a
}

// publish installs a if it supersedes what is held (a newer generation, or
// another store incarnation); it reports whether it did.
func (l *latest) publish(a *assign.Assignment) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.a != nil && !a.Version().Supersedes(l.a.Version()) {
		return false
	}
	l.a, l.err = a, nil
	l.msg = newSharedResponse(&slicerv1.WatchAssignmentResponse{Assignment: api.ToProto(a)}, &l.encodes)
	close(l.changed)
	l.changed = make(chan struct{})
	return true
}

// fail records err for waiters that still have no assignment.
func (l *latest) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
	close(l.changed)
	l.changed = make(chan struct{})
}

// stream sends every assignment that supersedes known until ctx ends or l
// fails before it has any assignment. stopping is closed when the agent
// shuts down.
func (l *latest) stream(ctx context.Context, stopping <-chan struct{}, known assign.Version, send func(*sharedResponse) error) error {
	for {
		a, msg, err, changed := l.get()
		switch {
		case a != nil && a.Version().Supersedes(known):
			if err := send(msg); err != nil {
				return err
			}
			known = a.Version()
			continue
		case a == nil && err != nil:
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-stopping:
			return connect.NewError(connect.CodeUnavailable, errShuttingDown)
		}
	}
}

// knownVersion is the assignment version a watch request says its caller
// holds.
func knownVersion(req *slicerv1.WatchAssignmentRequest) assign.Version {
	return assign.Version{Incarnation: req.GetKnownIncarnation(), Generation: req.GetKnownGeneration()}
}
