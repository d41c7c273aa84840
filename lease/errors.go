package lease

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers match them with errors.Is; the wrapped message
// names the job and lease and says what to do.
var (
	// ErrHeld: Acquire found the job lease held; the message names the
	// holder. Try again after its TTL.
	ErrHeld = errors.New("lease: held by another")
	// ErrLost: the caller's job lease expired, was released, or passed to
	// another holder. The caller no longer leads the job and stops writing
	// it at once.
	ErrLost = errors.New("lease: lost")
	// ErrNotHeld: nobody holds the job lease.
	ErrNotHeld = errors.New("lease: not held")
	// ErrBusy: Set found readers still holding the guard or bridge;
	// Recall it and Wait for them first.
	ErrBusy = errors.New("lease: readers remain")
	// ErrRecalled: Read found the guard or bridge recalled or at another
	// value than asked. The reader stops using the old value and reads
	// the new one once it is set.
	ErrRecalled = errors.New("lease: recalled")
	// ErrInvalid: a bad job, name, kind, value or TTL.
	ErrInvalid = errors.New("lease: invalid argument")
	// ErrUnavailable: the lease manager did not answer in time. Nothing
	// is known to have changed; a reader stops using what it holds when
	// that expires, whatever the manager's state.
	ErrUnavailable = errors.New("lease: manager unavailable")
	// ErrClosed: the manager has been closed.
	ErrClosed = errors.New("lease: manager closed")
	// ErrCorrupt: the manager's stored state cannot be read.
	ErrCorrupt = errors.New("lease: corrupt state")
)

// HeldError is the error of an Acquire that found the job lease held; it
// matches ErrHeld.
type HeldError struct {
	Job, Holder string
	Epoch       uint64
	// Remaining is how long the lease lasts unless renewed, 0 if unknown.
	Remaining time.Duration
}

func (e *HeldError) Error() string {
	msg := fmt.Sprintf("lease: held by another: job %q: %s holds its lease at epoch %d", e.Job, e.Holder, e.Epoch)
	if e.Remaining > 0 {
		msg += fmt.Sprintf(" for another %v", e.Remaining.Round(time.Millisecond))
	}
	return msg
}

// Is makes a HeldError match ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }
