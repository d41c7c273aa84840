package etcdstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/storage"
)

// Large assignments are stored in chunks. An etcd request is limited to
// --max-request-bytes (1.5 MiB by default), and an assignment takes about
// 10 bytes per slice, so a job of a million slices cannot be one value.
// An encoded assignment of at most inlineMax bytes is stored as the
// current (or previous) value itself, as in format 2; a larger one is cut
// into pieces of at most chunkBytes, each its own key under
//
//	<prefix>chunks/<job>/<set>/<index>
//
// where <set> is a random ID chosen by the commit that writes them (16 hex
// digits) and <index> is the piece's position (8 hex digits), and the
// current value is a head naming the set (encodeHead). A commit writes
// its set first, a piece per request, each put applied only while the job
// lease and the job's current (or deleted) key are as the commit read
// them, then switches the head in the one transaction that
// checks the generation and the fence and moves the old head to previous:
// a reader sees the old assignment or the new one, never a mix. The same
// transaction deletes the set of the previous head it replaces, so a job
// keeps at most two sets. A set no head names is an orphan: left by a
// commit that lost (it deletes its own set then), by a committer that died
// between its pieces and its switch, or being written by a commit that
// cannot succeed any more. Every commit deletes the orphans it finds in its
// switch (see orphans for why that is safe). A Delete removes every set of
// the job with it; because a piece's put checks the job's keys, no piece of
// a commit the Delete overtook lands after it, so a deleted job leaves no
// piece behind even when its committer dies. (A job's first commit whose
// committer dies before its switch, and that no commit of the job ever
// follows, does leave its set.)
//
// Sets live outside jobs/ so that writing one does not wake a watch of
// the job, and so that listing jobs reads heads only.
const (
	// inlineMax is the largest encoded assignment stored as a value:
	// a switch moving an inline current to previous and putting an inline
	// new one then carries at most 1 MiB, under etcd's default limit.
	inlineMax = 512 << 10
	// chunkBytes is the size of a piece; one piece is one put.
	chunkBytes = 512 << 10
	// chunkWriters bounds the pieces a commit has in flight at once.
	chunkWriters = 4
	// maxOrphanSets bounds the orphan sets one commit deletes, keeping
	// its transaction well under etcd's --max-txn-ops (128 by default);
	// the rest go at later commits.
	maxOrphanSets = 32
	// maxChunks bounds a head's piece count (8 GiB of assignment), so
	// that a corrupt head cannot make a reader allocate without bound.
	maxChunks = 1 << 14
)

// headMagic starts a head value; an inline assignment starts with the
// assignment codec's "SLCA" instead.
const (
	headMagic   = "SLCH"
	headVersion = 1
)

// head is a chunked assignment's current or previous value.
type head struct {
	generation uint64
	set        string // 16 hex digits
	chunks     int
	size       int    // bytes of the encoded assignment
	sum        uint64 // xxhash64 of the encoded assignment
}

// isHead reports whether a stored current or previous value is a head
// rather than an inline assignment.
func isHead(v []byte) bool { return bytes.HasPrefix(v, []byte(headMagic)) }

// encodeHead encodes h: the magic, then uvarints for the version, the
// generation, the set's length and bytes, the piece count and the size,
// then the checksum as 8 bytes big-endian.
func encodeHead(h head) []byte {
	b := make([]byte, 0, 64)
	b = append(b, headMagic...)
	b = binary.AppendUvarint(b, headVersion)
	b = binary.AppendUvarint(b, h.generation)
	b = binary.AppendUvarint(b, uint64(len(h.set)))
	b = append(b, h.set...)
	b = binary.AppendUvarint(b, uint64(h.chunks))
	b = binary.AppendUvarint(b, uint64(h.size))
	return binary.BigEndian.AppendUint64(b, h.sum)
}

// decodeHead decodes and checks a head value.
func decodeHead(b []byte) (head, error) {
	if !isHead(b) {
		return head{}, fmt.Errorf("missing the %q header", headMagic)
	}
	rest := b[len(headMagic):]
	next := func(what string) (uint64, error) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, fmt.Errorf("truncated or overlong %s", what)
		}
		rest = rest[n:]
		return v, nil
	}
	var h head
	v, err := next("version")
	if err != nil {
		return head{}, err
	}
	if v != headVersion {
		return head{}, fmt.Errorf("head version %d; this binary reads version %d: upgrade slicerd", v, headVersion)
	}
	if h.generation, err = next("generation"); err != nil {
		return head{}, err
	}
	if h.generation == 0 {
		return head{}, errors.New("generation 0")
	}
	n, err := next("set length")
	if err != nil {
		return head{}, err
	}
	if n != 16 || uint64(len(rest)) < n {
		return head{}, fmt.Errorf("a set ID of %d bytes, want 16", n)
	}
	h.set, rest = string(rest[:n]), rest[n:]
	if !validSet(h.set) {
		return head{}, fmt.Errorf("set ID %q is not 16 lowercase hex digits", h.set)
	}
	c, err := next("piece count")
	if err != nil {
		return head{}, err
	}
	size, err := next("size")
	if err != nil {
		return head{}, err
	}
	// Only a value too large to be inline is chunked, and every piece but
	// the last is full.
	if size <= inlineMax || size > maxChunks*chunkBytes || c != (size+chunkBytes-1)/chunkBytes {
		return head{}, fmt.Errorf("%d pieces holding %d bytes: want more than %d bytes in pieces of %d", c, size, inlineMax, chunkBytes)
	}
	h.chunks, h.size = int(c), int(size)
	if len(rest) != 8 {
		return head{}, fmt.Errorf("%d bytes after the size, want an 8-byte checksum", len(rest))
	}
	h.sum = binary.BigEndian.Uint64(rest)
	return h, nil
}

// newSet returns a new random set ID.
func newSet() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b)
}

func validSet(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (k keys) chunksDir() string               { return k.prefix + "chunks/" }
func (k keys) chunks(job string) string        { return k.chunksDir() + job + "/" }
func (k keys) chunkSet(job, set string) string { return k.chunks(job) + set + "/" }
func (k keys) chunk(job, set string, i int) string {
	return fmt.Sprintf("%s%08x", k.chunkSet(job, set), i)
}

// setOf returns the set a key under chunks(job) belongs to.
func (k keys) setOf(job string, key []byte) (string, bool) {
	rest, ok := strings.CutPrefix(string(key), k.chunks(job))
	if !ok {
		return "", false
	}
	set, _, ok := strings.Cut(rest, "/")
	return set, ok && validSet(set)
}

// writeSet writes enc's pieces as a new set of job, each put applied only
// while every one of guards holds (the commit's fence, and its job's keys
// as it read them), and returns the head naming it. refused reports a put
// a guard refused: the lease passed on, or the job changed (another commit
// switched, or a Delete removed it and every set it had).
func (s *Store) writeSet(ctx context.Context, job string, guards []clientv3.Cmp, generation uint64, enc []byte) (h head, refused bool, err error) {
	h = head{
		generation: generation,
		set:        newSet(),
		chunks:     (len(enc) + chunkBytes - 1) / chunkBytes,
		size:       len(enc),
		sum:        xxhash.Sum64(enc),
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(chunkWriters)
	var refusedAny atomic.Bool
	for i := range h.chunks {
		piece := enc[i*chunkBytes : min((i+1)*chunkBytes, len(enc))]
		key := s.keys.chunk(job, h.set, i)
		g.Go(func() error {
			if err := hook(job, "piece", i); err != nil {
				return err
			}
			resp, err := s.cli.Txn(gctx).If(guards...).Then(clientv3.OpPut(key, string(piece))).Commit()
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				refusedAny.Store(true)
				return errRefusedPiece
			}
			return nil
		})
	}
	err = g.Wait()
	if refusedAny.Load() {
		return h, true, nil
	}
	return h, false, err
}

var errRefusedPiece = errors.New("a piece's put was refused: the lease or the job changed")

// commitHook, set by tests only, is called at each step of a commit of
// job: after its reads ("read"), before each piece's put ("piece", with
// the piece's index), before the switch ("switch") and after it
// ("switched"). It may block, pausing the commit there, or return
// errCrashed, which ends the commit at once as its process's death would:
// nothing more is sent, not even the deletion of its pieces.
var commitHook func(job, step string, piece int) error

// errCrashed is what a commit ended by commitHook returns.
var errCrashed = errors.New("etcdstore: the committing process died (test hook)")

func hook(job, step string, piece int) error {
	if commitHook == nil {
		return nil
	}
	return commitHook(job, step, piece)
}

// dropSet deletes a set this commit wrote and no head names, with a
// context of its own: the commit's may be what ended. A set it fails to
// delete is an orphan a later commit collects.
func (s *Store) dropSet(job, set string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.reqTimeout)
	defer cancel()
	if _, err := s.cli.Delete(ctx, s.keys.chunkSet(job, set), clientv3.WithPrefix()); err != nil {
		s.log.Warn("could not delete the pieces of an assignment that was not committed; a later commit collects them",
			"job", job, "set", set, "err", err)
	}
}

// orphans returns up to maxOrphanSets sets of job, among the keys listed
// (chunks(job), keys only), that are neither own nor named. The switch
// that deletes them is safe whoever is still writing them: it succeeds
// only if the head is still at the revision this commit read, and it
// changes the current generation, so every other commit then in flight
// (having read the head, and a generation, before this switch) fails its
// own switch, which compares both, and can never name its set.
func (s *Store) orphans(job string, listed []*mvccpb.KeyValue, own string, named ...string) []string {
	var out []string
	for _, kv := range listed {
		set, ok := s.keys.setOf(job, kv.Key)
		if ok && set != own && !slices.Contains(named, set) && !slices.Contains(out, set) {
			out = append(out, set)
		}
	}
	slices.Sort(out)
	if len(out) > maxOrphanSets {
		out = out[:maxOrphanSets]
	}
	return out
}

// checkPieces checks that the sets the heads in st name have as many
// pieces among the keys listed (chunks(job), keys only) as the heads say:
// a commit does not read the pieces it moves to previous or replaces, but
// it does not bury a set it can tell is incomplete. Errors match
// storage.ErrCorrupt.
func (s *Store) checkPieces(job string, st stored, listed []*mvccpb.KeyValue) error {
	for _, h := range []*head{st.curHead, st.prevHead} {
		if h != nil && !s.whole(job, *h, listed) {
			return fmt.Errorf("%w: the head of generation %d names %d pieces under %s, and fewer are stored",
				storage.ErrCorrupt, h.generation, h.chunks, s.keys.chunkSet(job, h.set))
		}
	}
	return nil
}

// whole reports whether the keys listed (chunks(job), keys only) hold
// every piece of h's set.
func (s *Store) whole(job string, h head, listed []*mvccpb.KeyValue) bool {
	n := 0
	for _, kv := range listed {
		if set, ok := s.keys.setOf(job, kv.Key); ok && set == h.set {
			n++
		}
	}
	return n == h.chunks
}

// StoredGeneration returns the generation of v, a value a Store wrote at
// a job's current or previous key: an assignment stored inline, or the
// head of one stored in pieces. It is for programs that read a store's
// history through etcd's revisions (bench/partition's checker); a Load
// reads a job whole.
func StoredGeneration(job string, v []byte) (uint64, error) {
	h, err := headOf(leafCurrent, v)
	switch {
	case err != nil:
		return 0, err
	case h != nil:
		return h.generation, nil
	}
	rec, err := storage.DecodeRecord(job, v, nil, nil)
	if err != nil {
		return 0, err
	}
	if rec.Current == nil {
		return 0, fmt.Errorf("%w: job %q: no assignment in the value", storage.ErrCorrupt, job)
	}
	return rec.Current.Generation, nil
}

// headOf decodes v, the value of a job's current or previous key (leaf
// says which), as a head: nil when v is an inline assignment or absent.
// Errors match storage.ErrCorrupt.
func headOf(leaf string, v []byte) (*head, error) {
	if !isHead(v) {
		return nil, nil
	}
	h, err := decodeHead(v)
	if err != nil {
		return nil, fmt.Errorf("%w: the %s assignment's head: %w", storage.ErrCorrupt, leaf, err)
	}
	return &h, nil
}

// piecesTimeout is what a commit or a Load has, besides the request
// timeout of its other requests, for the pieces of an encoded assignment
// of size bytes: the request timeout again for every chunkWriters pieces
// (2 MiB); nothing for one stored inline.
func (s *Store) piecesTimeout(size int) time.Duration {
	if size <= inlineMax {
		return 0
	}
	pieces := (size + chunkBytes - 1) / chunkBytes
	return s.reqTimeout * time.Duration((pieces+chunkWriters-1)/chunkWriters)
}

// readSet reads the pieces of h's set of job at revision rev (at which
// the head naming it was read, so they are all there) and returns the
// assignment they encode, checked against h.
func (s *Store) readSet(ctx context.Context, job string, h head, rev int64) ([]byte, error) {
	resp, err := s.cli.Get(ctx, s.keys.chunkSet(job, h.set), clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) != h.chunks {
		return nil, errCorruptSet{fmt.Errorf("the head of generation %d names %d pieces under %s, and %d are stored",
			h.generation, h.chunks, s.keys.chunkSet(job, h.set), len(resp.Kvs))}
	}
	enc := make([]byte, 0, h.size)
	for i, kv := range resp.Kvs {
		if string(kv.Key) != s.keys.chunk(job, h.set, i) {
			return nil, errCorruptSet{fmt.Errorf("piece %d of generation %d is stored as %s", i, h.generation, kv.Key)}
		}
		if len(enc)+len(kv.Value) > h.size {
			return nil, errCorruptSet{fmt.Errorf("the pieces under %s hold more than the %d bytes the head of generation %d names",
				s.keys.chunkSet(job, h.set), h.size, h.generation)}
		}
		enc = append(enc, kv.Value...)
	}
	if len(enc) != h.size || xxhash.Sum64(enc) != h.sum {
		return nil, errCorruptSet{fmt.Errorf("the pieces under %s do not add up to the assignment the head of generation %d names (%d bytes, checksum %016x)",
			s.keys.chunkSet(job, h.set), h.generation, h.size, h.sum)}
	}
	return enc, nil
}

// errCorruptSet marks a set that does not match its head.
type errCorruptSet struct{ err error }

func (e errCorruptSet) Error() string { return e.err.Error() }
func (e errCorruptSet) Unwrap() error { return e.err }
