package slicelet

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrInvalidConfig is returned by New for a configuration it cannot run.
	ErrInvalidConfig = errors.New("slicelet: invalid config")
	// ErrRunning is returned by a second call to Run; a Slicelet runs once.
	ErrRunning = errors.New("slicelet: Run already called")
)
