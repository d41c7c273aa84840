package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/atomicfile"
)

// BoltOptions configures OpenBolt.
type BoltOptions struct {
	// LockTimeout is how long to wait for another process to release the
	// data file before failing with ErrLocked. Zero means 1s.
	LockTimeout time.Duration
	// ReadOnly opens the file with a shared lock and refuses writes.
	// Several read-only openers may share a file; none may share it with
	// a writer.
	ReadOnly bool
	// Logger receives open and conflict events; nil discards them.
	Logger *slog.Logger
}

const defaultLockTimeout = time.Second

// Bolt is a Store in a single bbolt file. Commits are serialised by bbolt's
// single writer and synced to disk before they return.
type Bolt struct {
	db       *bbolt.DB
	path     string
	readOnly bool
	log      *slog.Logger
	closed   atomic.Bool
	// incarnation is the file's incarnation ID; "" only for a fresh file
	// opened read-only.
	incarnation string
}

var (
	_ Store         = (*Bolt)(nil)
	_ Fencer        = (*Bolt)(nil)
	_ CurrentLoader = (*Bolt)(nil)
)

// OpenDataDir creates dir (mode 0700) if it is missing and opens the data
// file DataFileName in it.
func OpenDataDir(dir string, opts BoltOptions) (*Bolt, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: data dir is empty; set --data-dir", ErrInvalid)
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("storage: create data dir %s: %w; make it a directory slicerd's user can write, or choose another --data-dir", dir, err)
		}
	}
	return OpenBolt(filepath.Join(dir, DataFileName), opts)
}

// OpenBolt opens the bbolt data file at path, creating it (mode 0600) with
// the current format unless opts.ReadOnly. A file it cannot read fails with
// ErrCorrupt or ErrNewerFormat and is left untouched.
func OpenBolt(path string, opts BoltOptions) (*Bolt, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: data file path is empty", ErrInvalid)
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("path", path)

	exists, err := checkPath(path, opts.ReadOnly)
	if err != nil {
		return nil, err
	}
	if !exists {
		if err := createBolt(path, opts, log); err != nil {
			return nil, err
		}
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	b := &Bolt{db: db, path: path, readOnly: opts.ReadOnly, log: log}
	version, err := b.prepare(false)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	log.Info("storage opened", "format_version", version, "incarnation", b.incarnation, "read_only", opts.ReadOnly)
	return b, nil
}

// createBolt creates the data file at path whole: it writes the schema to
// a file beside it, then links that file to path, which fails if a file
// appeared there meanwhile (another slicerd created it; the caller opens
// that one). slicerd therefore never leaves a data file that exists but
// holds no store, and OpenBolt refuses such a file (a 0-byte one
// included) rather than initialise it over whatever was lost.
func createBolt(path string, opts BoltOptions, log *slog.Logger) error {
	tmp := path + ".creating"
	// A leftover of a creation that crashed: it was never the store.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: remove the unfinished data file %s: %w; remove it by hand, or choose another --data-dir", tmp, err)
	}
	db, err := openBolt(tmp, opts)
	if err != nil {
		return err
	}
	b := &Bolt{db: db, path: tmp, log: log}
	_, err = b.prepare(true)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("storage: create data file %s: %w", path, cerr)
	}
	if err == nil {
		if err = os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
			err = nil
		} else if err == nil {
			err = atomicfile.SyncDir(filepath.Dir(path))
		}
	}
	if rerr := os.Remove(tmp); err == nil && rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("storage: create data file %s: %w; check that slicerd's user may write its directory", path, err)
	}
	return nil
}

// checkPath turns the common set-up mistakes into errors that say what to
// do, before bbolt produces a terser one, and reports whether the file
// exists.
func checkPath(path string, readOnly bool) (exists bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A link to a file that does not exist (a volume not mounted, a
		// restore not done): creating a store through it would put a new
		// one where the old one is missing.
		if li, lerr := os.Lstat(path); lerr == nil && li.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			return false, fmt.Errorf("storage: data file %s is a symbolic link to %s, which does not exist; slicerd does not create its store through a link: mount or restore what the link points to, or remove the link to start with an empty store", path, target)
		}
	}
	switch {
	case err == nil && fi.Mode().IsRegular() && fi.Size() == 0 && !readOnly:
		return true, corruptFile(path, errors.New("it is empty (0 bytes), and slicerd creates its data file whole, so this one lost its contents or was made by something else"))
	case err == nil && fi.IsDir():
		return true, fmt.Errorf("storage: data file %s is a directory; remove it or choose another --data-dir", path)
	case err == nil && !fi.Mode().IsRegular():
		return true, fmt.Errorf("storage: data file %s is not a regular file (%s); remove it or choose another --data-dir", path, fi.Mode().Type())
	case errors.Is(err, fs.ErrNotExist) && readOnly:
		return false, fmt.Errorf("storage: data file %s: %w; a read-only open needs an existing data file: start slicerd once without read-only, or fix --data-dir", path, err)
	case err == nil && fi.Size() == 0 && readOnly:
		return true, fmt.Errorf("storage: data file %s is empty; a read-only open needs an initialised data file: start slicerd once without read-only, or fix --data-dir", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("storage: data file %s: %w; check that --data-dir exists, is a directory, and is accessible to slicerd's user", path, err)
	}
	return err == nil, nil
}

// openBolt opens the file with bbolt, classifying failures and recovering
// from bbolt panicking (or faulting on a truncated memory map) on a
// damaged file.
func openBolt(path string, opts BoltOptions) (db *bbolt.DB, err error) {
	var (
		file    *os.File
		openErr error
		size    int64 = -1
	)
	openFile := func(name string, flag int, perm os.FileMode) (*os.File, error) {
		file, openErr = os.OpenFile(name, flag, perm)
		if openErr == nil {
			if fi, err := file.Stat(); err == nil {
				size = fi.Size()
			}
		}
		return file, openErr
	}
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				// Releases the lock; the memory map of the damaged file leaks.
				_ = file.Close()
			}
			db, err = nil, corruptFile(path, fmt.Errorf("bbolt panicked reading it: %v", r))
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	db, err = bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:  opts.LockTimeout,
		ReadOnly: opts.ReadOnly,
		OpenFile: openFile,
	})
	if err == nil {
		return db, nil
	}
	var errno syscall.Errno
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: data file %s is in use by another slicerd process (waited %v); stop it or choose another --data-dir", ErrLocked, path, opts.LockTimeout)
	case openErr != nil:
		return nil, fmt.Errorf("storage: open data file %s: %w; check that its directory exists and that slicerd's user may read and write it, or choose another --data-dir", path, err)
	case size > 0 && !errors.As(err, &errno):
		// Content errors (bad magic, checksum, bbolt version, too short)
		// carry no errno; I/O errors do. An empty file is a new one: bbolt
		// initialises it (createBolt's; checkPath refuses any other).
		return nil, corruptFile(path, err)
	}
	return nil, fmt.Errorf("storage: open data file %s: %w; check the disk and the file's permissions", path, err)
}

// corruptFile wraps a reason the file at path cannot be used.
func corruptFile(path string, reason error) error {
	return fmt.Errorf("%w: data file %s cannot be read: %w; slicerd left it untouched: restore it from a backup, or move it aside to start with an empty store", ErrCorrupt, path, reason)
}

// prepare checks the file's size and format version and, when create is
// set (createBolt's new file), writes the schema; a file without one is
// otherwise refused. It upgrades a writable file of an older format. It
// sets b.incarnation and returns the format version.
func (b *Bolt) prepare(create bool) (uint64, error) {
	var (
		version uint64
		fresh   bool
	)
	err := b.view(func(tx *bbolt.Tx) error {
		// Pages below the high-water mark must lie inside the file: reading
		// a page past its end would fault.
		fi, err := os.Stat(b.path)
		if err != nil {
			return err
		}
		if fi.Size() < tx.Size() {
			return errCorruptValue{fmt.Errorf("it is truncated: %d bytes long, but its pages reach %d bytes", fi.Size(), tx.Size())}
		}
		version, b.incarnation, fresh, err = readFormat(tx)
		if err != nil {
			return errCorruptValue{err}
		}
		return nil
	})
	switch {
	case err != nil:
		return 0, b.fileError(err)
	case version > FormatVersion:
		return 0, fmt.Errorf("%w: data file %s was written by a newer slicerd (format %d, this binary reads up to %d); upgrade slicerd",
			ErrNewerFormat, b.path, version, FormatVersion)
	case fresh && !create:
		return 0, corruptFile(b.path, errors.New("it is a bbolt file without slicerd's schema, and slicerd creates its data file whole, so this one lost its contents or was made by something else"))
	case b.readOnly && version < FormatVersion:
		return 0, fmt.Errorf("%w: data file %s has format %d; open it once without read-only to upgrade it to format %d",
			ErrReadOnly, b.path, version, FormatVersion)
	case b.readOnly, version == FormatVersion:
		// Nothing to write: opening never touches a current file.
		return version, nil
	}
	incarnation := newIncarnation()
	err = b.update(func(tx *bbolt.Tx) error {
		if fresh {
			b.log.Info("creating a new data file", "format_version", FormatVersion, "incarnation", incarnation)
			return createSchema(tx, incarnation)
		}
		if version < FormatVersion {
			b.log.Info("upgrading data file", "from", version, "to", FormatVersion, "incarnation", incarnation)
			if err := migrate(tx, version, incarnation); err != nil {
				return errCorruptValue{err}
			}
		}
		return nil
	})
	if err != nil {
		return 0, b.fileError(err)
	}
	b.incarnation = incarnation
	return FormatVersion, nil
}

// Path returns the data file's path.
func (b *Bolt) Path() string { return b.path }

// Incarnation implements Store.
func (b *Bolt) Incarnation() string { return b.incarnation }

// Load implements Store.
func (b *Bolt) Load(ctx context.Context, job string) (Record, error) {
	return b.load(ctx, job, true)
}

// LoadCurrent implements CurrentLoader.
func (b *Bolt) LoadCurrent(ctx context.Context, job string) (Record, error) {
	return b.load(ctx, job, false)
}

// load is Load, leaving the previous assignment out unless withPrevious.
func (b *Bolt) load(ctx context.Context, job string, withPrevious bool) (Record, error) {
	if err := b.check(ctx, "load", job); err != nil {
		return Record{}, err
	}
	// Copy the values out and decode after the transaction: a long read
	// transaction would hold up a commit that needs to grow the file.
	var raw rawRecord
	err := b.view(func(tx *bbolt.Tx) error {
		raw = readRaw(tx, job)
		return nil
	})
	if !withPrevious {
		raw.prev = nil
	}
	if err != nil {
		return Record{}, b.opError("load", job, err)
	}
	var rec Record
	if raw.found {
		rec, err = decodeRecord(job, raw.cur, raw.prev, raw.cfg)
		if err == nil {
			err = stampRecord(&rec, b.incarnation)
		}
	} else {
		err = ErrNotFound
	}
	if errors.Is(err, ErrNotFound) {
		return Record{}, fmt.Errorf("%w: load job %q: no assignment or config is stored for it", ErrNotFound, job)
	}
	if err != nil {
		return Record{}, b.opError("load", job, err)
	}
	return rec, nil
}

// Commit implements Store.
func (b *Bolt) Commit(ctx context.Context, job string, prevGen uint64, next *assign.Assignment) error {
	return b.commit(ctx, job, 0, prevGen, next, nil)
}

// CommitFenced implements Fencer: the epoch is checked against the one the
// last lease write (PutLeaseState) stored, in the commit's transaction.
func (b *Bolt) CommitFenced(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment) error {
	if epoch == 0 {
		return fmt.Errorf("%w: commit job %q: a fenced commit needs the job lease's epoch, not 0", ErrInvalid, job)
	}
	return b.commit(ctx, job, epoch, prevGen, next, nil)
}

// CommitRecorded implements Historian.
func (b *Bolt) CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e HistoryEntry) error {
	if epoch == 0 {
		return fmt.Errorf("%w: commit job %q: a fenced commit needs the job lease's epoch, not 0", ErrInvalid, job)
	}
	if err := checkHistoryEntry(e); err != nil {
		return fmt.Errorf("%w: commit job %q: history entry: %w", ErrInvalid, job, err)
	}
	return b.commit(ctx, job, epoch, prevGen, next, &e)
}

// History implements Historian.
func (b *Bolt) History(ctx context.Context, job string, limit int) ([]HistoryEntry, error) {
	if err := b.check(ctx, "read history of", job); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > HistoryLimit {
		limit = HistoryLimit
	}
	var raw [][]byte
	err := b.view(func(tx *bbolt.Tx) error {
		raw = readHistory(tx, job, limit)
		return nil
	})
	if err != nil {
		return nil, b.opError("read history of", job, err)
	}
	out := make([]HistoryEntry, 0, len(raw))
	for _, v := range raw {
		e, err := DecodeHistoryEntry(v)
		if err != nil {
			b.log.Warn("history entry left out", "job", job, "err", err)
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// commit is Commit, fenced by epoch unless it is 0, recording e in the
// job's history unless it is nil.
func (b *Bolt) commit(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e *HistoryEntry) error {
	if err := b.checkWrite(ctx, "commit", job); err != nil {
		return err
	}
	if err := CheckCommit(job, prevGen, next); err != nil {
		return err
	}
	stamped := Stamp(b.incarnation, next)
	enc, err := encodeAssignment(stamped)
	if err != nil {
		return fmt.Errorf("%w: commit job %q: %w", ErrInvalid, job, err)
	}
	var stored *assign.Assignment
	err = b.update(func(tx *bbolt.Tx) error {
		if epoch != 0 {
			fence, err := readFence(tx, job)
			if err != nil {
				return err
			}
			if fence != epoch {
				return fencedError{stored: fence, held: epoch}
			}
		}
		var err error
		stored, err = writeAssignment(tx, job, prevGen, stamped, enc)
		if err != nil || e == nil {
			return err
		}
		e.Generation = stored.Generation
		return writeHistory(tx, job, *e)
	})
	if err != nil {
		var (
			conflict conflictError
			fenced   fencedError
		)
		switch {
		case errors.As(err, &conflict):
			b.log.Debug("commit conflict", "job", job, "stored", conflict.stored, "expected", conflict.expected)
			return Conflict(job, next.Generation, conflict.stored, conflict.expected)
		case errors.As(err, &fenced):
			b.log.Debug("commit fenced", "job", job, "stored_epoch", fenced.stored, "epoch", fenced.held)
			return Fenced(job, next.Generation, fenced.stored, fenced.held)
		}
		return b.opError("commit", job, err)
	}
	next.Incarnation, next.Generation = stored.Incarnation, stored.Generation
	b.log.Debug("committed", "job", job, "generation", next.Generation, "replaced", prevGen, "epoch", epoch)
	return nil
}

// LeaseStates returns every job's lease state, as PutLeaseState stored it:
// the embedded lease manager (package lease) reads it when it starts.
func (b *Bolt) LeaseStates(ctx context.Context) (map[string][]byte, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("%w: read lease states", ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: read lease states: %w", err)
	}
	var out map[string][]byte
	err := b.view(func(tx *bbolt.Tx) error {
		var err error
		out, err = readLeaseStates(tx)
		return err
	})
	if err != nil {
		return nil, b.opError("read lease states of", "", err)
	}
	return out, nil
}

// LeaseState returns job's lease state as PutLeaseState stored it, nil
// when none is stored: the embedded lease manager reads a job's back when
// it uses the job again after dropping it from memory.
func (b *Bolt) LeaseState(ctx context.Context, job string) ([]byte, error) {
	if err := b.check(ctx, "read lease state of", job); err != nil {
		return nil, err
	}
	var out []byte
	err := b.view(func(tx *bbolt.Tx) error {
		if _, err := readFence(tx, job); err != nil {
			return err
		}
		if leases := tx.Bucket(bucketLeases); leases != nil {
			out = bytes.Clone(leases.Get([]byte(job)))
		}
		return nil
	})
	if err != nil {
		return nil, b.opError("read lease state of", job, err)
	}
	return out, nil
}

// PutLeaseState stores job's lease state for the embedded lease manager.
// Its first 8 bytes are the job lease's epoch, big-endian, which every
// later CommitFenced of the job must carry; an epoch below the stored one
// is refused with ErrFenced, so epochs never go back. The rest is the
// lease package's, opaque here.
func (b *Bolt) PutLeaseState(ctx context.Context, job string, state []byte) error {
	if err := b.checkWrite(ctx, "write lease state of", job); err != nil {
		return err
	}
	if len(state) < 8 {
		return fmt.Errorf("%w: write lease state of job %q: it is %d bytes long; it starts with the 8-byte epoch", ErrInvalid, job, len(state))
	}
	state = bytes.Clone(state)
	err := b.update(func(tx *bbolt.Tx) error { return writeLeaseState(tx, job, state) })
	var fenced fencedError
	if errors.As(err, &fenced) {
		return fmt.Errorf("%w: write lease state of job %q: %v; epochs never go back", ErrFenced, job, fenced)
	}
	if err != nil {
		return b.opError("write lease state of", job, err)
	}
	return nil
}

// SetConfig implements Store.
func (b *Bolt) SetConfig(ctx context.Context, job string, cfg assign.Config) error {
	if err := b.checkWrite(ctx, "set config", job); err != nil {
		return err
	}
	enc, err := ConfigValue(job, cfg)
	if err != nil {
		return err
	}
	err = b.update(func(tx *bbolt.Tx) error {
		return writeConfig(tx, job, enc)
	})
	if err != nil {
		return b.opError("set config", job, err)
	}
	return nil
}

// SetConfigIf implements Store.
func (b *Bolt) SetConfigIf(ctx context.Context, job string, cfg assign.Config, version uint64) error {
	if err := b.checkWrite(ctx, "set config", job); err != nil {
		return err
	}
	enc, err := ConfigValue(job, cfg)
	if err != nil {
		return err
	}
	err = b.update(func(tx *bbolt.Tx) error {
		var stored []byte
		if jobs := tx.Bucket(bucketJobs); jobs != nil {
			if jb := jobs.Bucket([]byte(job)); jb != nil {
				stored = jb.Get(keyConfig)
			}
		}
		have, err := ConfigVersionOf(job, stored)
		if err != nil {
			return err
		}
		if have != version {
			return ConfigChanged(job, have, version)
		}
		return writeConfig(tx, job, enc)
	})
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrCorrupt) {
		return err
	}
	if err != nil {
		return b.opError("set config", job, err)
	}
	return nil
}

// Delete implements Store. bbolt's single writer orders it against every
// Commit and SetConfig.
func (b *Bolt) Delete(ctx context.Context, job string) error {
	if err := b.checkWrite(ctx, "delete", job); err != nil {
		return err
	}
	err := b.update(func(tx *bbolt.Tx) error {
		return deleteJob(tx, job)
	})
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: delete job %q: no assignment or config is stored for it", ErrNotFound, job)
	}
	if err != nil {
		return b.opError("delete", job, err)
	}
	b.log.Debug("deleted", "job", job)
	return nil
}

// Jobs implements Store.
func (b *Bolt) Jobs(ctx context.Context) ([]string, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("%w: list jobs", ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: list jobs: %w", err)
	}
	var names []string
	err := b.view(func(tx *bbolt.Tx) error {
		var err error
		names, err = listJobs(tx)
		return err
	})
	if err != nil {
		return nil, b.opError("list", "", err)
	}
	return names, nil
}

// Close implements Store. It waits for transactions in flight; a second
// Close returns nil.
func (b *Bolt) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("storage: close data file %s: %w", b.path, err)
	}
	b.log.Info("storage closed")
	return nil
}

// check rejects calls on a closed store, with a done context, or for an
// invalid job name.
func (b *Bolt) check(ctx context.Context, op, job string) error {
	if b.closed.Load() {
		return fmt.Errorf("%w: %s job %q", ErrClosed, op, job)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: %s job %q: %w", op, job, err)
	}
	if err := assign.ValidateJobName(job); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
	}
	return nil
}

func (b *Bolt) checkWrite(ctx context.Context, op, job string) error {
	if err := b.check(ctx, op, job); err != nil {
		return err
	}
	if b.readOnly {
		return fmt.Errorf("%w: %s job %q: data file %s was opened read-only", ErrReadOnly, op, job, b.path)
	}
	return nil
}

// view and update run a transaction, turning a bbolt panic or a memory
// fault (a file damaged or truncated while open) into an error.
func (b *Bolt) view(fn func(*bbolt.Tx) error) (err error) {
	defer recoverPanic(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return b.db.View(fn)
}

func (b *Bolt) update(fn func(*bbolt.Tx) error) (err error) {
	defer recoverPanic(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return b.db.Update(fn)
}

// errPanicked marks an error recovered from a panic.
type errPanicked struct{ v any }

func (e errPanicked) Error() string { return fmt.Sprintf("bbolt panicked reading it: %v", e.v) }

func recoverPanic(err *error) {
	if r := recover(); r != nil {
		*err = errPanicked{r}
	}
}

// fileError wraps an error of the whole file.
func (b *Bolt) fileError(err error) error {
	var (
		cv errCorruptValue
		pv errPanicked
	)
	switch {
	case errors.As(err, &cv), errors.As(err, &pv):
		return corruptFile(b.path, err)
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return ErrClosed
	}
	return fmt.Errorf("storage: data file %s: %w; check the disk and the file's permissions", b.path, err)
}

// opError wraps an error of an operation on one job ("" for all jobs).
func (b *Bolt) opError(op, job string, err error) error {
	subject := "jobs"
	if job != "" {
		subject = fmt.Sprintf("job %q", job)
	}
	var (
		cv errCorruptValue
		pv errPanicked
	)
	switch {
	case errors.As(err, &cv), errors.As(err, &pv):
		return fmt.Errorf("%w: %s %s: in data file %s, %w; slicerd will not overwrite it: restore the file from a backup, or move it aside to start with an empty store",
			ErrCorrupt, op, subject, b.path, err)
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return fmt.Errorf("%w: %s %s", ErrClosed, op, subject)
	case errors.Is(err, berrors.ErrDatabaseReadOnly):
		return fmt.Errorf("%w: %s %s: data file %s was opened read-only", ErrReadOnly, op, subject, b.path)
	}
	return fmt.Errorf("storage: %s %s: data file %s: %w; check the disk (space, permissions)", op, subject, b.path, err)
}
