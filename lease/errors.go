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
	// ErrOtherProcess: Read found the reader's read held by another
	// process of the reader (another instance: a task restarted while its
	// previous process, paused or cut off, may still use the read). The
	// message says until when it lasts unless renewed; the new process
	// reads again once it has expired or been released.
	ErrOtherProcess = errors.New("lease: read held by another process of the reader")
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

// OtherProcessError is the error of a Read refused because another
// instance of the reader holds a live read; it matches ErrOtherProcess.
type OtherProcessError struct {
	Job    string
	Kind   Kind
	Reader string
	// Remaining is how long the other instance's read lasts unless it
	// renews or releases it, as the manager counts it; 0 if unknown.
	Remaining time.Duration
}

func (e *OtherProcessError) Error() string {
	msg := fmt.Sprintf("lease: read held by another process of the reader: job %q: another process of task %q holds a read of the %s",
		e.Job, e.Reader, e.Kind)
	if e.Remaining > 0 {
		msg += fmt.Sprintf(" for another %v", e.Remaining.Round(time.Millisecond))
	}
	return msg + "; this process reads it once that read has been released or has expired"
}

// Is makes an OtherProcessError match ErrOtherProcess.
func (e *OtherProcessError) Is(target error) bool { return target == ErrOtherProcess }
