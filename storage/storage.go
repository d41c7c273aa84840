package storage

import (
	"context"

	"github.com/slicerd/slicerd/assign"
)

// Record is what the store holds for one job.
type Record struct {
	Job string
	// Current is the job's latest committed assignment; nil if none stored.
	Current *assign.Assignment
	// Previous is the assignment Current replaced; nil if none.
	Previous *assign.Assignment
	// Config is the job's sharding config: assign.DefaultConfig() unless
	// one was set with SetConfig.
	Config assign.Config
	// Configured reports whether Config was set with SetConfig.
	Configured bool
}

// Generation is the generation of r.Current, 0 when none is stored: the
// value to pass as prevGen to the next Commit.
func (r Record) Generation() uint64 {
	if r.Current == nil {
		return 0
	}
	return r.Current.Generation
}

// Store keeps each job's assignment and config. Every implementation gives
// the same guarantees, described in the package documentation. The
// assignments a Store returns are fresh copies the caller owns.
type Store interface {
	// Load returns the job's record; ErrNotFound if the store has neither
	// an assignment nor a config for it.
	Load(ctx context.Context, job string) (Record, error)
	// Commit stores next as the job's current assignment (moving the old
	// current to previous) only if the stored current generation equals
	// prevGen (0 = nothing stored yet), next.Generation > prevGen,
	// next.Job == job, and next.Validate() passes. Otherwise it returns
	// ErrConflict (generation mismatch; the message gives stored vs
	// expected) or ErrInvalid, and changes nothing. The assignment is
	// stored under the store's incarnation, whatever next.Incarnation
	// says, and a successful Commit sets next.Incarnation to it. A Commit
	// that creates a job deleted at generation g stores next with g added
	// to its generation, and sets next.Generation to that.
	Commit(ctx context.Context, job string, prevGen uint64, next *assign.Assignment) error
	// SetConfig validates and stores the job's config, creating the job.
	SetConfig(ctx context.Context, job string, cfg assign.Config) error
	// SetConfigIf is SetConfig applied only if the stored config is still
	// at version (ConfigVersion of it; 0: only if none is stored), checked
	// in the write itself: ErrConflict otherwise, changing nothing. An
	// unreadable stored config is ErrCorrupt.
	SetConfigIf(ctx context.Context, job string, cfg assign.Config, version uint64) error
	// Jobs lists the names of the jobs in the store, sorted.
	Jobs(ctx context.Context) ([]string, error)
	// Delete removes the job's assignments and config at once, readable
	// or not, remembering the generation it was at: ErrNotFound if the
	// store holds nothing for it. A Commit that read the job before the
	// Delete conflicts; a Commit after it starts a new job (prevGen 0, no
	// previous assignment, the default config) above that generation.
	// A store that must read before it writes (etcd) may fail with
	// ErrConflict, deleting nothing, when commits keep changing the job
	// meanwhile: retry.
	Delete(ctx context.Context, job string) error
	// Incarnation is the store's incarnation ID, chosen at random when the
	// store was created and never changed: a store deleted and created
	// again gets another. Every assignment Load returns carries it, and
	// Commit sets it in next. It is "" only for a read-only store opened
	// before any writer created it.
	Incarnation() string
	// Close releases the store. Calls after Close return ErrClosed.
	Close() error
}

// Fencer is implemented by a Store that can make a commit conditional on
// the committer still holding the job's lease (package lease), checked in
// the same write as the generation: so of two Assigners that both believe
// they lead a job, only the one whose lease is current ever commits, and
// one that lost its lease while computing cannot write afterwards.
type Fencer interface {
	// CommitFenced is Commit, applied only if the job lease's epoch
	// stored with the job's lease is epoch (which must not be 0); it fails
	// with ErrFenced, changing nothing, when it is not.
	CommitFenced(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment) error
}

// CurrentLoader is implemented by a Store that can load a job's record
// without its previous assignment, reading and decoding less: slicerd's
// roles need the current one alone, and a job of a million slices stores
// each in about 10 MB. A wrapper that embeds a Store hides it, and
// LoadCurrent then falls back to the wrapper's Load.
type CurrentLoader interface {
	// LoadCurrent is Load with Record.Previous nil. It fails as Load
	// does, except that it does not read the previous assignment, so does
	// not find it corrupt.
	LoadCurrent(ctx context.Context, job string) (Record, error)
}

// LoadCurrent loads job's record from s without its previous assignment:
// with s's LoadCurrent when it has one, else with Load.
func LoadCurrent(ctx context.Context, s Store, job string) (Record, error) {
	if c, ok := s.(CurrentLoader); ok {
		return c.LoadCurrent(ctx, job)
	}
	rec, err := s.Load(ctx, job)
	rec.Previous = nil
	return rec, err
}
