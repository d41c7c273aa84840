package storage

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/slicerd/slicerd/assign"
)

// The value encodings and argument checks every Store shares, exported so
// that stores outside this package (such as etcdstore) write the same bytes
// and enforce the same contract as Bolt.

// EncodeAssignment encodes a current or previous assignment value.
func EncodeAssignment(a *assign.Assignment) ([]byte, error) { return encodeAssignment(a) }

// EncodeConfig encodes a config value.
func EncodeConfig(cfg assign.Config) ([]byte, error) { return encodeConfig(cfg) }

// ConfigValue validates cfg and encodes it as a store writes it for job;
// errors match ErrInvalid.
func ConfigValue(job string, cfg assign.Config) ([]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: set config of job %q: %w", ErrInvalid, job, err)
	}
	enc, err := encodeConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: set config of job %q: %w", ErrInvalid, job, err)
	}
	return enc, nil
}

// ConfigVersion is the version of cfg as stored, for SetConfigIf: a hash
// of its encoding, never 0 (which stands for no config stored). Two
// configs have one version only if they are equal, bar a collision of 64
// bits, so a write conditional on it is applied over the config read,
// or one equal to it, and never over a change made since.
func ConfigVersion(cfg assign.Config) uint64 {
	enc, err := encodeConfig(cfg)
	if err != nil {
		return 1 // a config that does not encode is never stored
	}
	return xxhash.Sum64(enc) | 1
}

// ConfigVersionOf is ConfigVersion of a stored config value: 0 when
// absent (nil), and an error matching ErrCorrupt when it does not decode.
func ConfigVersionOf(job string, v []byte) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	cfg, err := decodeConfig(v)
	if err != nil {
		return 0, fmt.Errorf("%w: job %q: %w", ErrCorrupt, job, err)
	}
	return ConfigVersion(cfg), nil
}

// ConfigChanged is the error of a conditional config write whose version
// is no longer the stored one.
func ConfigChanged(job string, stored, want uint64) error {
	return fmt.Errorf("%w: set config of job %q: the stored configuration changed since it was read (version %d, not %d); read the job again and retry", ErrConflict, job, stored, want)
}

// EncodeFormatVersion and DecodeFormatVersion are the format version value
// encoding.
func EncodeFormatVersion(v uint64) []byte { return encodeFormatVersion(v) }

// DecodeFormatVersion decodes a format version value.
func DecodeFormatVersion(b []byte) (uint64, error) { return decodeFormatVersion(b) }

// DecodeRecord builds job's Record from its stored values, any of which may
// be nil (absent). It returns an error matching ErrNotFound when there is
// neither an assignment nor a config, and one matching ErrCorrupt that
// describes the first value it cannot use otherwise; the caller adds where
// the value is stored.
func DecodeRecord(job string, cur, prev, cfg []byte) (Record, error) {
	rec, err := decodeRecord(job, cur, prev, cfg)
	var cv errCorruptValue
	if errors.As(err, &cv) {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, cv.err)
	}
	return rec, err
}

// DecodeAssignment decodes job's current or previous assignment value (key
// says which, for the message); an error matches ErrCorrupt.
func DecodeAssignment(job, key string, b []byte) (*assign.Assignment, error) {
	a, err := decodeAssignment(job, key, b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return a, nil
}

// CheckCommit validates Commit's arguments: ErrInvalid unless next is a
// valid assignment of job with a generation above prevGen.
func CheckCommit(job string, prevGen uint64, next *assign.Assignment) error {
	if err := assign.ValidateJobName(job); err != nil {
		return fmt.Errorf("%w: commit: %w", ErrInvalid, err)
	}
	switch {
	case next == nil:
		return fmt.Errorf("%w: commit job %q: the assignment is nil", ErrInvalid, job)
	case next.Job != job:
		return fmt.Errorf("%w: commit job %q: the assignment is for job %q", ErrInvalid, job, next.Job)
	case next.Generation <= prevGen:
		return fmt.Errorf("%w: commit job %q: generation %d must be above the generation it replaces, %d",
			ErrInvalid, job, next.Generation, prevGen)
	}
	if err := next.Validate(); err != nil {
		return fmt.Errorf("%w: commit job %q: %w", ErrInvalid, job, err)
	}
	return nil
}

// EncodeGeneration and DecodeGeneration are the encoding of the generation
// a deleted job is recorded with: 8 bytes big-endian, as the format version.
func EncodeGeneration(g uint64) []byte { return encodeFormatVersion(g) }

// DecodeGeneration decodes a generation EncodeGeneration wrote.
func DecodeGeneration(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("it is %d bytes long, want 8", len(b))
	}
	return decodeFormatVersion(b)
}

// Renumber returns the assignment a store writes for a Commit that creates
// a job deleted at generation floor: a copy of a with floor added to its
// generation, or a itself when floor is 0.
func Renumber(floor uint64, a *assign.Assignment) *assign.Assignment {
	if floor == 0 {
		return a
	}
	c := *a
	c.Generation = floor + a.Generation
	return &c
}

// NewIncarnation returns a new random store incarnation ID, for a store
// being created.
func NewIncarnation() string { return newIncarnation() }

// DecodeIncarnation decodes and checks a stored incarnation value; nil
// (absent) is an error.
func DecodeIncarnation(b []byte) (string, error) { return decodeIncarnation(b) }

// StampRecord gives rec's assignments without an incarnation (stored
// before the store had one) the store's incarnation, and returns an error
// matching ErrCorrupt if one names another incarnation. A store calls it
// on every record it loads.
func StampRecord(rec *Record, incarnation string) error {
	err := stampRecord(rec, incarnation)
	var cv errCorruptValue
	if errors.As(err, &cv) {
		return fmt.Errorf("%w: %w", ErrCorrupt, cv.err)
	}
	return err
}

// Stamp returns the assignment a store of the given incarnation writes for
// Commit(…, next): next, or a copy of it, with the store's incarnation. An
// assignment always belongs to the store it is committed to, whatever
// incarnation it was derived from.
func Stamp(incarnation string, next *assign.Assignment) *assign.Assignment {
	if next.Incarnation == incarnation {
		return next
	}
	c := *next
	c.Incarnation = incarnation
	return &c
}

// Conflict is the error of a Commit of job at generation next that expected
// the stored generation to be expected but found stored.
func Conflict(job string, next, stored, expected uint64) error {
	return fmt.Errorf("%w: commit job %q generation %d: %v; load the job again and retry",
		ErrConflict, job, next, conflictError{stored: stored, expected: expected})
}

// Fenced is the error of a fenced Commit of job at generation next whose
// epoch, held, is not the job lease's stored epoch (0: no lease is held).
func Fenced(job string, next, stored, held uint64) error {
	return fmt.Errorf("%w: commit job %q generation %d: %v; another assigner holds the job, so this one stops writing it",
		ErrFenced, job, next, fencedError{stored: stored, held: held})
}

// fencedError carries the epochs of a fenced Commit that lost its lease.
type fencedError struct{ stored, held uint64 }

func (e fencedError) Error() string {
	if e.stored == 0 {
		return fmt.Sprintf("the job lease of epoch %d is no longer held by anyone", e.held)
	}
	return fmt.Sprintf("the job lease is at epoch %d, the committer holds epoch %d", e.stored, e.held)
}
