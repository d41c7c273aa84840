package lease

import "sync"

// PerVersion keeps one value derived from a membership (a View, an index
// of tasks by job) for as long as the membership's version
// (gossip.Node.Version) stays the same, so that it is derived once per
// version rather than by every caller. It is built under its lock:
// callers that arrive while it is built wait for that one rather than
// each reading every member. The zero value is ready to use.
type PerVersion[T any] struct {
	mu      sync.Mutex
	val     T
	version uint64
	set     bool
}

// Get returns the value kept for version, or one kept for a newer version
// (newer than what the caller read is no staler), else build's, kept.
func (c *PerVersion[T]) Get(version uint64, build func() T) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set && c.version >= version {
		return c.val
	}
	c.val, c.version, c.set = build(), version, true
	return c.val
}
