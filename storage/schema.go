package storage

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/slicerd/slicerd/assign"
)

// The bbolt data file's schema, in one place:
//
//	meta/                      bucket
//	    format_version         uint64, 8 bytes big-endian
//	    incarnation            the store's incarnation ID, ASCII (format 2 on)
//	jobs/                      bucket
//	    <job name>/            bucket, one per job
//	        current            assignment, assign's binary codec
//	        previous           assignment Current replaced, same codec
//	        config             assign.Config as JSON
//	deleted/                   bucket, created by the first Delete
//	    <job name>             the generation the job was deleted at,
//	                           uint64, 8 bytes big-endian
//	history/                   bucket, created by the first recorded decision
//	    <job name>/            bucket, one per job with history
//	        <generation>       the decision that committed it (HistoryEntry
//	                           as JSON), keyed by generation, uint64, 8 bytes
//	                           big-endian; the newest HistoryLimit kept
//	leases/                    bucket, created by the first lease write
//	    <job name>             the embedded lease manager's state of the
//	                           job (package lease): the job lease's epoch,
//	                           uint64, 8 bytes big-endian, then the rest
//	                           of that package's encoding
//
// Both top-level buckets are created with the format version and a new
// incarnation ID when the file is created, in one transaction. A job bucket
// exists once a config or an assignment was stored.
//
// The incarnation tells this store apart from any other, in particular from
// a store created again in the same place after the old one was deleted:
// generations start again at 1 there, and subscribers that still hold a
// generation of the old store must not take the new ones for old news.
// Every assignment the store returns carries it.
//
// A deleted job leaves its generation under deleted/, so that the job
// created again under the same name continues above it (see writeAssignment):
// generations of one name only grow, within one incarnation, across
// deletions. The bucket needs no format change: a binary that does not know
// it ignores it.
//
// The leases bucket is what makes a fenced commit (CommitFenced) checkable
// in the commit's own transaction: the epoch a lease write stored is the
// one the commit must carry. Like deleted/, it needs no format change, and
// it outlives a job's deletion, so that epochs of one name only grow.
//
// Format history: 1 had no incarnation; 2 adds meta/incarnation (and
// assignments in codec version 2, which carry it). Opening a format 1 file
// writable upgrades it by giving it an incarnation; its stored
// assignments, in codec version 1, are given the store's incarnation as
// they are read.

// DataFileName is the name of the data file inside a data directory.
const DataFileName = "slicerd.db"

// FormatVersion is the schema version this binary writes and the newest it
// reads. Bump it when the layout or an encoding changes incompatibly, and
// teach migrate to upgrade older files.
const FormatVersion uint64 = 2

var (
	bucketMeta       = []byte("meta")
	keyFormatVersion = []byte("format_version")
	keyIncarnation   = []byte("incarnation")

	bucketJobs    = []byte("jobs")
	bucketDeleted = []byte("deleted")
	bucketLeases  = []byte("leases")
	bucketHistory = []byte("history")
	keyCurrent    = []byte("current")
	keyPrevious   = []byte("previous")
	keyConfig     = []byte("config")
)

// encodeFormatVersion and decodeFormatVersion are the meta/format_version
// value encoding.
func encodeFormatVersion(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

func decodeFormatVersion(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("format version is %d bytes long, want 8", len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// newIncarnation returns a new random incarnation ID: 128 bits as 32
// lower-case hex digits.
func newIncarnation() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b)
}

// decodeIncarnation is the meta/incarnation value decoding.
func decodeIncarnation(b []byte) (string, error) {
	if b == nil {
		return "", errors.New("the store has no incarnation")
	}
	if err := assign.ValidateIncarnation(string(b)); err != nil {
		return "", fmt.Errorf("the store's incarnation is invalid: %w", err)
	}
	return string(b), nil
}

// encodeAssignment is the current/previous value encoding.
func encodeAssignment(a *assign.Assignment) ([]byte, error) {
	return a.MarshalBinary()
}

// decodeAssignment decodes a current/previous value of job and checks it
// belongs to that job. UnmarshalAssignment validates what it decodes.
func decodeAssignment(job, key string, b []byte) (*assign.Assignment, error) {
	a, err := assign.UnmarshalAssignment(b)
	if err != nil {
		return nil, fmt.Errorf("the %s assignment does not decode: %w", key, err)
	}
	if a.Job != job {
		return nil, fmt.Errorf("the %s assignment belongs to job %q", key, a.Job)
	}
	return a, nil
}

// encodeConfig is the config value encoding.
func encodeConfig(cfg assign.Config) ([]byte, error) {
	return json.Marshal(cfg)
}

// decodeConfig decodes a config value and validates it. Unknown fields are
// ignored; trailing data is not.
func decodeConfig(b []byte) (assign.Config, error) {
	var cfg assign.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return assign.Config{}, fmt.Errorf("the config does not decode: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return assign.Config{}, fmt.Errorf("the config is invalid: %w", err)
	}
	return cfg, nil
}

// decodeRecord builds a job's Record from its stored values, any of which
// may be nil. It reports ErrNotFound when there is neither an assignment
// nor a config, and an unwrapped description of the first undecodable
// value otherwise (callers wrap it in ErrCorrupt).
func decodeRecord(job string, cur, prev, cfg []byte) (Record, error) {
	rec := Record{Job: job, Config: assign.DefaultConfig()}
	if cur == nil && cfg == nil {
		if prev != nil {
			return Record{}, errCorruptValue{errors.New("a previous assignment is stored without a current one")}
		}
		return Record{}, ErrNotFound
	}
	var err error
	if cur != nil {
		if rec.Current, err = decodeAssignment(job, "current", cur); err != nil {
			return Record{}, errCorruptValue{err}
		}
	}
	if prev != nil {
		if cur == nil {
			return Record{}, errCorruptValue{errors.New("a previous assignment is stored without a current one")}
		}
		if rec.Previous, err = decodeAssignment(job, "previous", prev); err != nil {
			return Record{}, errCorruptValue{err}
		}
		if rec.Previous.Generation >= rec.Current.Generation {
			return Record{}, errCorruptValue{fmt.Errorf("the previous generation %d is not below the current generation %d",
				rec.Previous.Generation, rec.Current.Generation)}
		}
	}
	if cfg != nil {
		if rec.Config, err = decodeConfig(cfg); err != nil {
			return Record{}, errCorruptValue{err}
		}
		rec.Configured = true
	}
	return rec, nil
}

// errCorruptValue marks a decoding failure so the caller can add the file
// name and advice.
type errCorruptValue struct{ err error }

func (e errCorruptValue) Error() string { return e.err.Error() }
func (e errCorruptValue) Unwrap() error { return e.err }

// Transaction helpers. They see the raw schema; the Bolt methods add
// locking, error wrapping and panic recovery.

// readFormat reports the file's format version and incarnation (empty
// before format 2), or fresh when the file has no slicerd data yet (a new
// bbolt file: no buckets at all).
func readFormat(tx *bbolt.Tx) (version uint64, incarnation string, fresh bool, err error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		k, _ := tx.Cursor().First()
		if k == nil {
			return 0, "", true, nil
		}
		return 0, "", false, fmt.Errorf("it has no %q bucket but holds %q: it is not a slicerd data file", bucketMeta, k)
	}
	v, err := decodeFormatVersion(meta.Get(keyFormatVersion))
	if err != nil {
		return 0, "", false, err
	}
	if v == 0 {
		return 0, "", false, fmt.Errorf("format version 0 is not a valid version")
	}
	if v <= FormatVersion && tx.Bucket(bucketJobs) == nil {
		return 0, "", false, fmt.Errorf("the %q bucket is missing", bucketJobs)
	}
	if v >= 2 && v <= FormatVersion {
		if incarnation, err = decodeIncarnation(meta.Get(keyIncarnation)); err != nil {
			return 0, "", false, err
		}
	}
	return v, incarnation, false, nil
}

// createSchema writes the buckets, format version and incarnation of a
// fresh file.
func createSchema(tx *bbolt.Tx, incarnation string) error {
	meta, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	if err := meta.Put(keyFormatVersion, encodeFormatVersion(FormatVersion)); err != nil {
		return err
	}
	if err := meta.Put(keyIncarnation, []byte(incarnation)); err != nil {
		return err
	}
	_, err = tx.CreateBucket(bucketJobs)
	return err
}

// migrate upgrades a file of an older format version to FormatVersion,
// giving a format 1 file the incarnation.
func migrate(tx *bbolt.Tx, from uint64, incarnation string) error {
	if from != 1 {
		return fmt.Errorf("no migration from format version %d", from)
	}
	meta := tx.Bucket(bucketMeta)
	if err := meta.Put(keyIncarnation, []byte(incarnation)); err != nil {
		return err
	}
	return meta.Put(keyFormatVersion, encodeFormatVersion(FormatVersion))
}

// jobBucket returns the job's bucket, nil if the job has none. The jobs
// bucket may be missing in a fresh file opened read-only.
func jobBucket(tx *bbolt.Tx, job string) *bbolt.Bucket {
	jobs := tx.Bucket(bucketJobs)
	if jobs == nil {
		return nil
	}
	return jobs.Bucket([]byte(job))
}

// readRecord decodes the job's record.
func readRecord(tx *bbolt.Tx, job string) (Record, error) {
	b := jobBucket(tx, job)
	if b == nil {
		return Record{}, ErrNotFound
	}
	return decodeRecord(job, b.Get(keyCurrent), b.Get(keyPrevious), b.Get(keyConfig))
}

// stampRecord gives rec's assignments that have no incarnation (codec
// version 1, written before the store had one) the store's incarnation,
// and reports one that names another as corrupt.
func stampRecord(rec *Record, incarnation string) error {
	if incarnation == "" {
		return nil
	}
	for _, a := range []*assign.Assignment{rec.Current, rec.Previous} {
		switch {
		case a == nil:
		case a.Incarnation == "":
			a.Incarnation = incarnation
		case a.Incarnation != incarnation:
			return errCorruptValue{fmt.Errorf("generation %d is of store incarnation %s, but the store is incarnation %s",
				a.Generation, a.Incarnation, incarnation)}
		}
	}
	return nil
}

// rawRecord is a job's stored values, copied out of a transaction so they
// can be decoded after it ends.
type rawRecord struct {
	found          bool
	cur, prev, cfg []byte
}

func readRaw(tx *bbolt.Tx, job string) rawRecord {
	b := jobBucket(tx, job)
	if b == nil {
		return rawRecord{}
	}
	return rawRecord{
		found: true,
		cur:   bytes.Clone(b.Get(keyCurrent)),
		prev:  bytes.Clone(b.Get(keyPrevious)),
		cfg:   bytes.Clone(b.Get(keyConfig)),
	}
}

// writeAssignment makes a, encoded as enc, the job's current assignment if
// the stored current generation is prevGen. It decodes what it is about to
// move or overwrite first, so it never replaces a value it cannot read. It
// returns what it stored: a itself, or, when it creates a job that was
// deleted at generation g, a copy with g added to its generation.
func writeAssignment(tx *bbolt.Tx, job string, prevGen uint64, a *assign.Assignment, next []byte) (*assign.Assignment, error) {
	var cur []byte
	if b := jobBucket(tx, job); b != nil {
		// Decoding the whole record checks current and previous alike.
		rec, err := readRecord(tx, job)
		if err != nil && err != ErrNotFound {
			return nil, err
		}
		if stored := rec.Generation(); stored != prevGen {
			return nil, conflictError{stored: stored, expected: prevGen}
		}
		cur = b.Get(keyCurrent)
	} else if prevGen != 0 {
		return nil, conflictError{stored: 0, expected: prevGen}
	}
	if cur == nil {
		floor, err := deletedAt(tx, job)
		if err != nil {
			return nil, err
		}
		if floor > 0 {
			a = Renumber(floor, a)
			if next, err = encodeAssignment(a); err != nil {
				return nil, err
			}
		}
	}
	jobs := tx.Bucket(bucketJobs)
	b, err := jobs.CreateBucketIfNotExists([]byte(job))
	if err != nil {
		return nil, err
	}
	if cur != nil {
		// Copy: cur may point into the memory map, which the commit can remap.
		if err := b.Put(keyPrevious, bytes.Clone(cur)); err != nil {
			return nil, err
		}
	}
	return a, b.Put(keyCurrent, next)
}

// conflictError carries the generations of a lost Commit.
type conflictError struct{ stored, expected uint64 }

func (e conflictError) Error() string {
	return fmt.Sprintf("stored generation is %d, expected %d", e.stored, e.expected)
}

// writeConfig stores the job's encoded config, creating the job.
func writeConfig(tx *bbolt.Tx, job string, cfg []byte) error {
	b, err := tx.Bucket(bucketJobs).CreateBucketIfNotExists([]byte(job))
	if err != nil {
		return err
	}
	return b.Put(keyConfig, cfg)
}

// deleteJob removes the job's bucket with everything in it, and records
// the generation it was deleted at; ErrNotFound if there is no bucket. An
// unreadable current assignment does not stop it: the recorded generation
// then stays what an earlier deletion left.
func deleteJob(tx *bbolt.Tx, job string) error {
	jobs := tx.Bucket(bucketJobs)
	if jobs == nil || jobs.Bucket([]byte(job)) == nil {
		if jobs != nil && jobs.Get([]byte(job)) != nil {
			return errCorruptValue{fmt.Errorf("key %q under %q is not a job bucket", job, bucketJobs)}
		}
		return ErrNotFound
	}
	floor, _ := deletedAt(tx, job) // an unreadable value is replaced
	if rec, err := readRecord(tx, job); err == nil {
		floor = max(floor, rec.Generation())
	}
	del, err := tx.CreateBucketIfNotExists(bucketDeleted)
	if err != nil {
		return err
	}
	if err := del.Put([]byte(job), EncodeGeneration(floor)); err != nil {
		return err
	}
	if h := tx.Bucket(bucketHistory); h != nil && h.Bucket([]byte(job)) != nil {
		if err := h.DeleteBucket([]byte(job)); err != nil {
			return err
		}
	}
	return jobs.DeleteBucket([]byte(job))
}

// writeHistory records e under its generation in the job's history and
// drops the entries below HistoryFloor.
func writeHistory(tx *bbolt.Tx, job string, e HistoryEntry) error {
	v, err := EncodeHistoryEntry(e)
	if err != nil {
		return err
	}
	h, err := tx.CreateBucketIfNotExists(bucketHistory)
	if err != nil {
		return err
	}
	jh, err := h.CreateBucketIfNotExists([]byte(job))
	if err != nil {
		return err
	}
	if err := jh.Put(historyKey(e.Generation), v); err != nil {
		return err
	}
	floor := historyKey(HistoryFloor(e.Generation))
	c := jh.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k, floor) < 0; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// readHistory copies out the job's newest limit history values, newest
// first.
func readHistory(tx *bbolt.Tx, job string, limit int) [][]byte {
	h := tx.Bucket(bucketHistory)
	if h == nil {
		return nil
	}
	jh := h.Bucket([]byte(job))
	if jh == nil {
		return nil
	}
	var out [][]byte
	c := jh.Cursor()
	for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
		if v != nil {
			out = append(out, bytes.Clone(v))
		}
	}
	return out
}

// deletedAt is the generation the job was last deleted at, 0 if never.
func deletedAt(tx *bbolt.Tx, job string) (uint64, error) {
	del := tx.Bucket(bucketDeleted)
	if del == nil {
		return 0, nil
	}
	v := del.Get([]byte(job))
	if v == nil {
		return 0, nil
	}
	g, err := DecodeGeneration(v)
	if err != nil {
		return 0, errCorruptValue{fmt.Errorf("the generation job %q was deleted at: %w", job, err)}
	}
	return g, nil
}

// listJobs returns the job bucket names in key order, which for job names
// (ASCII) is sorted order. A non-bucket key under jobs is corruption.
func listJobs(tx *bbolt.Tx) ([]string, error) {
	jobs := tx.Bucket(bucketJobs)
	if jobs == nil {
		return nil, nil
	}
	var names []string
	err := jobs.ForEach(func(k, v []byte) error {
		if v != nil {
			return errCorruptValue{fmt.Errorf("key %q under %q is not a job bucket", k, bucketJobs)}
		}
		names = append(names, string(k))
		return nil
	})
	return names, err
}

// readFence is the job lease epoch stored for job, 0 if none.
func readFence(tx *bbolt.Tx, job string) (uint64, error) {
	leases := tx.Bucket(bucketLeases)
	if leases == nil {
		return 0, nil
	}
	v := leases.Get([]byte(job))
	if v == nil {
		return 0, nil
	}
	if len(v) < 8 {
		return 0, errCorruptValue{fmt.Errorf("the lease state of job %q is %d bytes long, want at least 8", job, len(v))}
	}
	return binary.BigEndian.Uint64(v), nil
}

// writeLeaseState stores job's lease state, whose first 8 bytes are the
// job lease epoch, refusing an epoch below the stored one.
func writeLeaseState(tx *bbolt.Tx, job string, state []byte) error {
	stored, err := readFence(tx, job)
	if err != nil {
		return err
	}
	if epoch := binary.BigEndian.Uint64(state); epoch < stored {
		return fencedError{stored: stored, held: epoch}
	}
	leases, err := tx.CreateBucketIfNotExists(bucketLeases)
	if err != nil {
		return err
	}
	return leases.Put([]byte(job), state)
}

// readLeaseStates copies every job's lease state out of the transaction.
func readLeaseStates(tx *bbolt.Tx) (map[string][]byte, error) {
	out := make(map[string][]byte)
	leases := tx.Bucket(bucketLeases)
	if leases == nil {
		return out, nil
	}
	err := leases.ForEach(func(k, v []byte) error {
		if v == nil || len(v) < 8 {
			return errCorruptValue{fmt.Errorf("the lease state of job %q is not a value of at least 8 bytes", k)}
		}
		out[string(k)] = bytes.Clone(v)
		return nil
	})
	return out, err
}
