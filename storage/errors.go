package storage

import "errors"

// Sentinel errors. Callers match them with errors.Is; the wrapped message
// names the job or file and says what to do.
var (
	// ErrNotFound: the store holds neither an assignment nor a config for
	// the job.
	ErrNotFound = errors.New("storage: not found")
	// ErrConflict: a conditional Commit lost the race; the stored generation
	// is not the one the caller read. Load again and retry.
	ErrConflict = errors.New("storage: generation conflict")
	// ErrInvalid: the caller passed a bad job name, config or assignment.
	ErrInvalid = errors.New("storage: invalid argument")
	// ErrLocked: another process holds the data file.
	ErrLocked = errors.New("storage: data file locked")
	// ErrCorrupt: stored data cannot be read. The store never overwrites
	// what it cannot read.
	ErrCorrupt = errors.New("storage: corrupt data")
	// ErrNewerFormat: the data was written by a newer slicerd.
	ErrNewerFormat = errors.New("storage: newer data format")
	// ErrReadOnly: a write was attempted on a store opened read-only.
	ErrReadOnly = errors.New("storage: read-only store")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("storage: store closed")
	// ErrFenced: a fenced commit (Fencer) carried a job lease epoch that is
	// no longer the job's: another Assigner holds the job now. The caller
	// has lost the job and stops writing it; retrying cannot succeed.
	ErrFenced = errors.New("storage: job lease lost")
	// ErrUnavailable: a networked store's servers did not answer in time.
	// Nothing is known to have changed; retry later (it is not a conflict).
	ErrUnavailable = errors.New("storage: store unavailable")
)
