package clerk

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrInvalidConfig is returned by New for a configuration it cannot run.
	ErrInvalidConfig = errors.New("clerk: invalid config")
	// ErrNoAssignment means no assignment has arrived yet.
	ErrNoAssignment = errors.New("clerk: no assignment yet")
	// ErrRunning is returned by a second concurrent call to Run.
	ErrRunning = errors.New("clerk: already running")
	// errRejected marks a message that failed validation; the stream that
	// carried it is dropped so a misbehaving server is failed over.
	errRejected = errors.New("clerk: rejected assignment")
	// errSilent marks a stream dropped because its server, which had
	// promised heartbeats, sent nothing for api.HeartbeatMisses intervals.
	errSilent = errors.New("clerk: assignment stream went silent")
)
