// Package fanout wakes any number of subscribers with coalesced signals:
// a subscriber that has not yet taken a signal holds one pending, however
// many times it was signalled, and a notifier never waits for a slow one.
// It suits "something changed, read the current state" subscriptions such
// as membership changes.
package fanout

import "sync"

// Signal is a set of subscriptions. The zero value is ready to use; a
// Signal must not be copied after first use.
type Signal struct {
	mu   sync.Mutex
	subs map[uint64]chan struct{}
	next uint64
}

// Subscribe returns a channel (buffer 1) that receives a signal after each
// Notify, coalescing with a signal not yet received, and a function that
// unsubscribes. The function is safe to call more than once; the channel
// is never closed.
func (s *Signal) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs == nil {
		s.subs = make(map[uint64]chan struct{})
	}
	id := s.next
	s.next++
	s.subs[id] = ch
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

// Notify signals every subscription without blocking.
func (s *Signal) Notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
