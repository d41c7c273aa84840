package watch

import "errors"

var (
	// ErrTooManyStreams refuses a stream over the node's stream cap
	// (Limiter).
	ErrTooManyStreams = errors.New("watch: too many open streams")
	// ErrShuttingDown ends the streams of a node that is shutting down,
	// as UNAVAILABLE: their clients reconnect to another node.
	ErrShuttingDown = errors.New("slicerd is shutting down; reconnect to another node")
)
