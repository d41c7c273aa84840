package slicelet

import (
	"context"
	"sync"

	"github.com/slicerd/slicerd/assign"
)

// AwaitHandle is Handle for a request that may arrive a little before its
// key: in strong mode, while the newest assignment this task holds gives
// it the key but no lease covers the key yet (the key is on its way here:
// the guard is being recalled from its former owner), it waits until a
// lease does, the key stops being on its way, or ctx ends, and returns
// the handle then. A client that routes with the new assignment before
// the move completes is thus served once it completes rather than
// refused. In affinity mode, and for a key this task is not getting, it
// returns at once, as Handle does. Check Owned on the result.
//
// Bound ctx by what a request may wait: a move is normally done in tens
// of milliseconds, but a task holding the key's guard that stopped
// responding keeps it until its read expires (about the lease TTL).
func (s *Slicelet) AwaitHandle(ctx context.Context, key []byte) Handle {
	return s.await(ctx, assign.HashKey(key))
}

// AwaitHandleString is AwaitHandle for a string key.
func (s *Slicelet) AwaitHandleString(ctx context.Context, key string) Handle {
	return s.await(ctx, assign.HashString(key))
}

func (s *Slicelet) await(ctx context.Context, k assign.SliceKey) Handle {
	if h := s.handle(k); h.Owned() || !s.strongMode() || !s.affinitized(k) {
		return h // the common case, without the waiters' lock
	}
	for {
		// The change to wait for first: a change after it closes it.
		changed := s.strong.changes.wait()
		h := s.handle(k)
		if h.Owned() || !s.affinitized(k) {
			return h
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return h
		}
	}
}

// affinitized reports whether the newest assignment gives k to this task.
func (s *Slicelet) affinitized(k assign.SliceKey) bool {
	v := s.view.Load()
	return v != nil && v.mine[v.table.Lookup(k)]
}

// broadcast wakes every waiter on a change at once: wait returns a
// channel that the next notify closes.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// notify wakes the waiters; it costs nothing when there are none.
func (b *broadcast) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
