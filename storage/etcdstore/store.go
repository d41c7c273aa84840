package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

// Options configures Open.
type Options struct {
	// Endpoints are etcd client addresses: host:port, http://host:port, or
	// https://host:port for TLS. With TLS set, host:port means https.
	Endpoints []string
	// Prefix namespaces every key; default DefaultPrefix. Stores with
	// different prefixes share an etcd cluster without seeing each other.
	Prefix string
	// DialTimeout bounds Open's first round trip to etcd; default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each call that has no earlier deadline, so a
	// call fails with storage.ErrUnavailable rather than hang while etcd
	// is down; default 5s. A commit or a Load of an assignment stored in
	// pieces has it once more for every four pieces (2 MiB).
	RequestTimeout time.Duration
	// Logger receives open, close and watch events; nil discards them.
	Logger *slog.Logger
	// ReadOnly refuses writes with storage.ErrReadOnly.
	ReadOnly bool
	// TLS, if not nil, connects to etcd over TLS, with the CA and client
	// certificate files it names (see TLS). https:// endpoints without it
	// use TLS with the system's roots.
	TLS *TLS
	// Username and Password authenticate to an etcd with authentication
	// on (etcdctl's --user); both or neither. Without them, and with a
	// client certificate, etcd takes the certificate's common name as the
	// user.
	Username, Password string
	// Dial, if not nil, opens the connections to the endpoints, for
	// programs that reach etcd through a network of their own (a test
	// bed's namespaces); nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

const (
	defaultDialTimeout    = 5 * time.Second
	defaultRequestTimeout = 5 * time.Second
	// maxCallBytes lifts the client's own message limits so that etcd's
	// --max-request-bytes is the one that applies, with its clear error.
	maxCallBytes = 256 << 20
	// maxCommitAttempts bounds Commit's retries when its transaction lost
	// to a change that left the stored generation as it was.
	maxCommitAttempts = 3
	// maxDeleteAttempts bounds Delete's retries when a commit changed the
	// job between its read and its transaction.
	maxDeleteAttempts = 10
)

// Store is a storage.Store in etcd. Several Stores, in one process or
// many, may share a prefix: every Commit is one etcd transaction that
// applies only if the job's current and previous keys are still the ones
// it read, so the contract's conditional commit holds across them.
type Store struct {
	cli        *clientv3.Client
	keys       keys
	endpoints  string
	readOnly   bool
	reqTimeout time.Duration
	log        *slog.Logger
	// incarnation is the store's incarnation ID; "" only for a read-only
	// store opened under a prefix no writer had created.
	incarnation string
	// sec is how the store authenticates to etcd, for error messages.
	sec security

	closed   atomic.Bool
	mu       sync.Mutex // orders closing against watchers.Add
	closing  chan struct{}
	watchers sync.WaitGroup
}

var (
	_ storage.Store         = (*Store)(nil)
	_ storage.Watcher       = (*Store)(nil)
	_ storage.Fencer        = (*Store)(nil)
	_ storage.CurrentLoader = (*Store)(nil)
)

// Open connects to etcd and checks the store's format version, creating it
// under an empty prefix unless opts.ReadOnly. It fails within
// opts.DialTimeout when etcd cannot be reached, naming the endpoints.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if len(opts.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no etcd endpoints; give them as --store etcd://host:2379[,host2:2379][/prefix]", storage.ErrInvalid)
	}
	for _, e := range opts.Endpoints {
		if strings.TrimSpace(e) == "" {
			return nil, fmt.Errorf("%w: empty etcd endpoint in %q; give them as --store etcd://host:2379[,host2:2379][/prefix]", storage.ErrInvalid, opts.Endpoints)
		}
	}
	prefix, err := normalizePrefix(opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd key %v", storage.ErrInvalid, err)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = defaultDialTimeout
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = defaultRequestTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	endpoints := strings.Join(opts.Endpoints, ",")
	log = log.With("etcd", endpoints, "prefix", prefix)

	cfg := clientv3.Config{
		DialTimeout:        opts.DialTimeout,
		MaxCallSendMsgSize: maxCallBytes,
		MaxCallRecvMsgSize: maxCallBytes,
		Logger:             zap.NewNop(),
		// gRPC's default reconnect backoff grows from 1 s to 2 min: an
		// etcd restarted after a second would be found only seconds
		// later, and until then every lease renewal fails. Retry every
		// 100 ms growing to 2 s instead; a reconnect attempt costs one
		// TCP dial.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		})},
	}
	if opts.Dial != nil {
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(opts.Dial))
	}
	sec, err := secure(&cfg, opts, log)
	if err != nil {
		return nil, err
	}
	s := &Store{
		keys:       keys{prefix: prefix},
		endpoints:  endpoints,
		readOnly:   opts.ReadOnly,
		reqTimeout: opts.RequestTimeout,
		log:        log,
		closing:    make(chan struct{}),
		sec:        sec,
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		if opts.Username == "" {
			return nil, fmt.Errorf("%w: etcd endpoints %s: %w; check --store", storage.ErrInvalid, endpoints, err)
		}
		// The client authenticated, which is its first round trip.
		return nil, s.openError(ctx, err, opts.DialTimeout)
	}
	s.cli = cli
	version, err := s.prepare(ctx, opts.DialTimeout)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	log.Info("storage opened", "format_version", version, "incarnation", s.incarnation, "read_only", opts.ReadOnly,
		"tls", sec.creds != nil, "user", sec.user)
	return s, nil
}

// prepare reads the format version and incarnation, creating both if the
// prefix is new, or adding the incarnation to a format 1 store, when the
// store is writable. It sets s.incarnation and returns the format version.
// The first read doubles as the reachability check.
func (s *Store) prepare(ctx context.Context, dialTimeout time.Duration) (uint64, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	resp, err := s.cli.Get(dctx, s.keys.metaDir(), clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("storage: open etcd at %s: %w", s.endpoints, ctx.Err())
		}
		return 0, s.openError(ctx, err, dialTimeout)
	}
	kvs := resp.Kvs
	// A lost transaction means a concurrent opener created or upgraded the
	// store: the next pass reads what it wrote.
	for attempt := 1; ; attempt++ {
		m, err := s.readMeta(kvs)
		switch {
		case err != nil:
			return 0, fmt.Errorf("%w: etcd keys under %s at %s: %w; slicerd left them untouched: fix or delete them (etcdctl), or choose another prefix in --store",
				storage.ErrCorrupt, s.keys.metaDir(), s.endpoints, err)
		case m.version > FormatVersion:
			return 0, fmt.Errorf("%w: the store under %s at %s was written by a newer slicerd (format %d, this binary reads up to %d); upgrade slicerd",
				storage.ErrNewerFormat, s.keys.prefix, s.endpoints, m.version, FormatVersion)
		case m.version == FormatVersion, s.readOnly:
			// Nothing to write; a read-only store under a new prefix
			// reads nothing.
			if !s.readOnly {
				if err := s.checkWritable(dctx); err != nil {
					return 0, s.openOpError(ctx, err)
				}
			}
			s.incarnation = m.incarnation
			return m.version, nil
		case attempt > 3:
			return 0, fmt.Errorf("%w: open etcd store under %s at %s: its format keys kept changing; retry", storage.ErrUnavailable, s.keys.prefix, s.endpoints)
		}
		// Format 3 adds chunked assignments (chunks.go), which need
		// nothing written but the version; a store before format 2 is
		// given its incarnation.
		inc := m.incarnation
		ops := []clientv3.Op{clientv3.OpPut(s.keys.meta(), string(storage.EncodeFormatVersion(FormatVersion)))}
		var cond []clientv3.Cmp
		if m.version < 2 {
			inc = storage.NewIncarnation()
			ops = append(ops, clientv3.OpPut(s.keys.incarnation(), inc))
			cond = append(cond, clientv3.Compare(clientv3.CreateRevision(s.keys.incarnation()), "=", 0))
		}
		if m.version == 0 {
			cond = append(cond, clientv3.Compare(clientv3.CreateRevision(s.keys.meta()), "=", 0))
		} else {
			cond = append(cond, clientv3.Compare(clientv3.ModRevision(s.keys.meta()), "=", m.rev))
		}
		tresp, err := s.cli.Txn(dctx).
			If(cond...).
			Then(ops...).
			Else(clientv3.OpGet(s.keys.metaDir(), clientv3.WithPrefix())).
			Commit()
		if err != nil {
			return 0, s.openOpError(ctx, err)
		}
		if tresp.Succeeded {
			if m.version == 0 {
				s.log.Info("created a new store under the prefix", "format_version", FormatVersion, "incarnation", inc)
			} else {
				s.log.Info("upgraded the store under the prefix", "from", m.version, "to", FormatVersion, "incarnation", inc)
			}
			s.incarnation = inc
			return FormatVersion, nil
		}
		kvs = tresp.Responses[0].GetResponseRange().Kvs
	}
}

// openOpError classifies an error of Open's writes, as opError does.
func (s *Store) openOpError(ctx context.Context, err error) error {
	if aerr := s.authError("open", "the store under "+s.keys.prefix, err); aerr != nil {
		return aerr
	}
	return s.opError(ctx, "open", "", err)
}

// checkWritable asks etcd whether this client may write under the prefix,
// so that a user with read access only fails at Open rather than at its
// first commit. The transaction's condition never holds: etcd checks the
// permissions of its operations without applying them.
func (s *Store) checkWritable(ctx context.Context) error {
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(s.keys.meta()), "<", 0)).
		Then(clientv3.OpDelete(s.keys.prefix, clientv3.WithPrefix())).
		Commit()
	return err
}

// meta is what the meta keys hold: version 0 when there are none.
type meta struct {
	version     uint64
	rev         int64 // mod revision of the format version key
	incarnation string
}

// readMeta decodes the meta keys.
func (s *Store) readMeta(kvs []*mvccpb.KeyValue) (meta, error) {
	var (
		m             meta
		version, inc  []byte
		found, hasInc bool
	)
	for _, kv := range kvs {
		switch string(kv.Key) {
		case s.keys.meta():
			version, m.rev, found = kv.Value, kv.ModRevision, true
		case s.keys.incarnation():
			inc, hasInc = kv.Value, true
		}
	}
	if !found {
		if hasInc {
			return meta{}, fmt.Errorf("%s is set but %s is missing", s.keys.incarnation(), s.keys.meta())
		}
		return meta{}, nil
	}
	v, err := storage.DecodeFormatVersion(version)
	if err == nil && v == 0 {
		err = errors.New("format version 0 is not a valid version")
	}
	if err != nil {
		return meta{}, fmt.Errorf("%s: %w", s.keys.meta(), err)
	}
	m.version = v
	if v >= 2 && v <= FormatVersion {
		if !hasInc {
			inc = nil
		}
		if m.incarnation, err = storage.DecodeIncarnation(inc); err != nil {
			return meta{}, fmt.Errorf("%s: %w", s.keys.incarnation(), err)
		}
	}
	return m, nil
}

// Prefix returns the store's key prefix, ending in '/'.
func (s *Store) Prefix() string { return s.keys.prefix }

// Client is the store's etcd client, which the etcd lease manager (package
// lease) shares so that its leases live beside the records they fence.
func (s *Store) Client() *clientv3.Client { return s.cli }

// JobLeaseKey is the key of job's lease, which CommitFenced compares: the
// lease manager creates it when it grants the lease, and its create
// revision is the lease's epoch.
func (s *Store) JobLeaseKey(job string) string { return s.keys.jobLease(job) }

// LeaseKeys is the prefix of every lease key of job: the job lease and the
// guard and bridge leases with their readers.
func (s *Store) LeaseKeys(job string) string { return s.keys.leases(job) }

// AllLeaseKeys is the prefix of every job's lease keys: LeaseKeys(job) is
// AllLeaseKeys() + job + "/".
func (s *Store) AllLeaseKeys() string { return s.keys.allLeases() }

// Incarnation implements storage.Store.
func (s *Store) Incarnation() string { return s.incarnation }

// Load implements storage.Store. It reads the job's keys with one range
// request, so current, previous and config come from one revision; the
// pieces of a chunked assignment are read at that same revision.
func (s *Store) Load(ctx context.Context, job string) (storage.Record, error) {
	return s.loadRecord(ctx, job, true)
}

// LoadCurrent implements storage.CurrentLoader: the previous assignment's
// value is read with the others (it is small, or a head) but its pieces
// are not, and it is not decoded.
func (s *Store) LoadCurrent(ctx context.Context, job string) (storage.Record, error) {
	return s.loadRecord(ctx, job, false)
}

// loadRecord is Load, leaving the previous assignment out unless
// withPrevious.
func (s *Store) loadRecord(ctx context.Context, job string, withPrevious bool) (storage.Record, error) {
	if err := s.check(ctx, "load", job); err != nil {
		return storage.Record{}, err
	}
	for attempt := 1; ; attempt++ {
		rec, err := s.load(ctx, job, withPrevious)
		// A compaction between the heads' read and their pieces' read
		// took that revision away: read again at the newest.
		if err != nil && errors.Is(err, rpctypes.ErrCompacted) && attempt < 3 {
			continue
		}
		switch {
		case err == nil:
			return rec, nil
		case errors.Is(err, storage.ErrNotFound):
			return storage.Record{}, fmt.Errorf("%w: load job %q: no assignment or config is stored for it", storage.ErrNotFound, job)
		case errors.Is(err, storage.ErrCorrupt):
			return storage.Record{}, s.corrupt("load", job, err)
		}
		return storage.Record{}, s.opError(ctx, "load", job, err)
	}
}

// load is one attempt of Load; its errors are etcd's or match
// storage.ErrNotFound or storage.ErrCorrupt. The read of the job's keys
// has the request timeout, and each read of pieces as long again as a
// commit of them has (piecesTimeout).
func (s *Store) load(ctx context.Context, job string, withPrevious bool) (storage.Record, error) {
	rctx, cancel := s.withTimeout(ctx)
	resp, err := s.cli.Get(rctx, s.keys.job(job), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return storage.Record{}, err
	}
	raw := s.split(job, resp.Kvs)
	if !withPrevious {
		raw.prev = nil
	}
	var (
		vals  [2][]byte
		heads [2]*head
	)
	g, gctx := errgroup.WithContext(ctx)
	for i, kv := range []*mvccpb.KeyValue{raw.cur, raw.prev} {
		vals[i] = raw.value(kv)
		h, err := headOf([]string{leafCurrent, leafPrevious}[i], vals[i])
		if err != nil {
			return storage.Record{}, err
		}
		if h == nil {
			continue
		}
		heads[i] = h
		g.Go(func() error {
			rctx, cancel := context.WithTimeout(gctx, s.reqTimeout+s.piecesTimeout(h.size))
			defer cancel()
			enc, err := s.readSet(rctx, job, *h, resp.Header.Revision)
			vals[i] = enc
			return err
		})
	}
	if err := g.Wait(); err != nil {
		var cs errCorruptSet
		if errors.As(err, &cs) {
			return storage.Record{}, fmt.Errorf("%w: %w", storage.ErrCorrupt, err)
		}
		return storage.Record{}, err
	}
	rec, err := storage.DecodeRecord(job, vals[0], vals[1], raw.value(raw.cfg))
	if err != nil {
		return storage.Record{}, err
	}
	for i, a := range []*assign.Assignment{rec.Current, rec.Previous} {
		if h := heads[i]; h != nil && a.Generation != h.generation {
			return storage.Record{}, fmt.Errorf("%w: the head of generation %d names an assignment of generation %d", storage.ErrCorrupt, h.generation, a.Generation)
		}
	}
	if err := storage.StampRecord(&rec, s.incarnation); err != nil {
		return storage.Record{}, err
	}
	return rec, nil
}

// Commit implements storage.Store. It reads the job's keys, checks the
// stored generation and that the record decodes, then writes with one
// transaction that applies only if the current and previous keys are still
// at the revisions it read, moving current to previous.
func (s *Store) Commit(ctx context.Context, job string, prevGen uint64, next *assign.Assignment) error {
	return s.commit(ctx, job, 0, prevGen, next, nil)
}

// CommitFenced implements storage.Fencer. The job lease is the key
// JobLeaseKey(job), which the etcd lease manager (package lease) creates
// when it grants the lease, with the lease's epoch as its create revision
// and attached to an etcd lease: the commit's transaction also compares
// that create revision, so it fails once the lease expired or passed to
// another holder.
func (s *Store) CommitFenced(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment) error {
	if epoch == 0 || epoch > math.MaxInt64 {
		return fmt.Errorf("%w: commit job %q: a fenced commit needs the job lease's epoch (an etcd revision), not %d", storage.ErrInvalid, job, epoch)
	}
	return s.commit(ctx, job, epoch, prevGen, next, nil)
}

// CommitRecorded implements storage.Historian: the history entry is put,
// and entries below storage.HistoryFloor deleted, in the commit's
// transaction.
func (s *Store) CommitRecorded(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	if epoch == 0 || epoch > math.MaxInt64 {
		return fmt.Errorf("%w: commit job %q: a fenced commit needs the job lease's epoch (an etcd revision), not %d", storage.ErrInvalid, job, epoch)
	}
	if _, err := storage.EncodeHistoryEntry(e); err != nil {
		return fmt.Errorf("%w: commit job %q: history entry: %w", storage.ErrInvalid, job, err)
	}
	return s.commit(ctx, job, epoch, prevGen, next, &e)
}

// History implements storage.Historian with one range read, newest first.
func (s *Store) History(ctx context.Context, job string, limit int) ([]storage.HistoryEntry, error) {
	if err := s.check(ctx, "read history of", job); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > storage.HistoryLimit {
		limit = storage.HistoryLimit
	}
	rctx, cancel := s.withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.keys.history(job), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, s.opError(ctx, "read history of", job, err)
	}
	out := make([]storage.HistoryEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := storage.DecodeHistoryEntry(kv.Value)
		if err != nil {
			s.log.Warn("history entry left out", "job", job, "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// commit is Commit, fenced by epoch unless it is 0, recording e in the
// job's history unless it is nil. An assignment too large to be one value
// has its pieces written first (chunks.go); the switch to it is the one
// transaction below either way.
func (s *Store) commit(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e *storage.HistoryEntry) (err error) {
	if err := s.checkWrite(ctx, "commit", job); err != nil {
		return err
	}
	if err := storage.CheckCommit(job, prevGen, next); err != nil {
		return err
	}
	stamped := storage.Stamp(s.incarnation, next)
	enc, err := storage.EncodeAssignment(stamped)
	if err != nil {
		return fmt.Errorf("%w: commit job %q: %w", storage.ErrInvalid, job, err)
	}
	rctx, cancel := context.WithTimeout(ctx, s.reqTimeout+s.piecesTimeout(len(enc)))
	defer cancel()
	leaseKey := s.keys.jobLease(job)
	reads := []clientv3.Op{
		clientv3.OpGet(s.keys.job(job), clientv3.WithPrefix()),
		clientv3.OpGet(leaseKey),
		clientv3.OpGet(s.keys.chunks(job), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	}
	resp, err := s.cli.Txn(rctx).Then(reads...).Commit()
	if err != nil {
		return s.opError(ctx, "commit", job, err)
	}
	// written is the set of pieces this commit wrote, if any. Unless the
	// switch to it may have applied (its transaction's outcome is
	// unknown), it is deleted when the commit fails.
	var (
		written  *head
		mayApply bool
	)
	defer func() {
		if written != nil && err != nil && !mayApply && !errors.Is(err, errCrashed) {
			s.dropSet(job, written.set)
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := hook(job, "read", -1); err != nil {
			return err
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		lease := resp.Responses[1].GetResponseRange().Kvs
		listed := resp.Responses[2].GetResponseRange().Kvs
		if epoch != 0 {
			var fence uint64
			if len(lease) > 0 {
				fence = uint64(lease[0].CreateRevision)
			}
			if fence != epoch {
				s.log.Debug("commit fenced", "job", job, "stored_epoch", fence, "epoch", epoch)
				return storage.Fenced(job, next.Generation, fence, epoch)
			}
		}
		raw := s.split(job, kvs)
		st, err := s.decodeStored(job, raw)
		if err == nil {
			err = s.checkPieces(job, st, listed)
		}
		if err == nil && raw.cfg != nil {
			_, err = storage.DecodeRecord(job, nil, nil, raw.value(raw.cfg))
		}
		if err != nil {
			return s.corrupt("commit", job, err)
		}
		if st.generation != prevGen {
			s.log.Debug("commit conflict", "job", job, "stored", st.generation, "expected", prevGen)
			return storage.Conflict(job, next.Generation, st.generation, prevGen)
		}
		if attempt > maxCommitAttempts {
			return fmt.Errorf("%w: commit job %q generation %d: its stored keys kept changing while generation %d stayed; load the job again and retry",
				storage.ErrConflict, job, next.Generation, prevGen)
		}
		// A job created again continues above the generation it was
		// deleted at; the transaction checks that is still the one read.
		stored, value := stamped, enc
		var tomb *mvccpb.KeyValue
		if raw.cur == nil {
			dresp, err := s.cli.Get(rctx, s.keys.deleted(job))
			if err != nil {
				return s.opError(ctx, "commit", job, err)
			}
			var floor uint64
			if floor, tomb, err = s.deletedAt(dresp.Kvs); err != nil {
				return s.corrupt("commit", job, err)
			}
			if stored = storage.Renumber(floor, stamped); stored != stamped {
				if value, err = storage.EncodeAssignment(stored); err != nil {
					return fmt.Errorf("%w: commit job %q: %w", storage.ErrInvalid, job, err)
				}
			}
		}
		if len(value) > inlineMax {
			// A set written by an earlier attempt is used again if it
			// still holds this value and is still whole: a Delete since
			// (which is what let this attempt on) removed every piece of
			// the job.
			if written != nil && (written.generation != stored.Generation || !s.whole(job, *written, listed)) {
				s.dropSet(job, written.set)
				written = nil
			}
			if written == nil {
				// A piece lands only while the job is as read: a Delete
				// that overtakes this commit removes every piece put
				// before it, and refuses every one after.
				guards := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.keys.current(job)), "=", raw.rev(raw.cur))}
				if raw.cur == nil {
					guards = append(guards, clientv3.Compare(clientv3.ModRevision(s.keys.deleted(job)), "=", raw.rev(tomb)))
				}
				if epoch != 0 {
					guards = append(guards, clientv3.Compare(clientv3.CreateRevision(leaseKey), "=", int64(epoch)))
				}
				h, refused, err := s.writeSet(rctx, job, guards, stored.Generation, value)
				written = &h
				if refused {
					// The lease passed on, or the job changed: read
					// again, and judge (and report) from what changed.
					if resp, err = s.cli.Txn(rctx).Then(reads...).Commit(); err != nil {
						return s.opError(ctx, "commit", job, err)
					}
					continue
				}
				if errors.Is(err, errCrashed) {
					return err
				}
				if err != nil {
					return s.opError(ctx, "commit", job, err)
				}
			}
			value = encodeHead(*written)
		}
		ops := make([]clientv3.Op, 0, 8)
		if raw.cur != nil {
			ops = append(ops, clientv3.OpPut(s.keys.previous(job), string(raw.cur.Value)))
		}
		ops = append(ops, clientv3.OpPut(s.keys.current(job), string(value)))
		// The set of the previous assignment this one pushes out, and
		// the orphans, go with the switch.
		var own string
		if written != nil {
			own = written.set
		}
		if st.prevHead != nil {
			ops = append(ops, clientv3.OpDelete(s.keys.chunkSet(job, st.prevHead.set), clientv3.WithPrefix()))
		}
		for _, set := range s.orphans(job, listed, own, st.sets()...) {
			ops = append(ops, clientv3.OpDelete(s.keys.chunkSet(job, set), clientv3.WithPrefix()))
		}
		if e != nil {
			e.Generation = stored.Generation
			h, err := storage.EncodeHistoryEntry(*e)
			if err != nil {
				return fmt.Errorf("%w: commit job %q: history entry: %w", storage.ErrInvalid, job, err)
			}
			ops = append(ops,
				clientv3.OpPut(s.keys.historyAt(job, stored.Generation), string(h)),
				clientv3.OpDelete(s.keys.history(job), clientv3.WithRange(s.keys.historyAt(job, storage.HistoryFloor(stored.Generation)))))
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(s.keys.current(job)), "=", raw.rev(raw.cur)),
			clientv3.Compare(clientv3.ModRevision(s.keys.previous(job)), "=", raw.rev(raw.prev)),
		}
		if raw.cur == nil {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.keys.deleted(job)), "=", raw.rev(tomb)))
		}
		if epoch != 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(leaseKey), "=", int64(epoch)))
		}
		if err := hook(job, "switch", -1); err != nil {
			return err
		}
		tresp, err := s.cli.Txn(rctx).
			If(cmps...).
			Then(ops...).
			Else(reads...).
			Commit()
		if err != nil {
			mayApply = true
			return s.opError(ctx, "commit", job, err)
		}
		if tresp.Succeeded {
			if err := hook(job, "switched", -1); err != nil {
				return err
			}
			next.Incarnation, next.Generation = stored.Incarnation, stored.Generation
			s.log.Debug("committed", "job", job, "generation", next.Generation, "replaced", prevGen, "revision", tresp.Header.Revision,
				"epoch", epoch, "bytes", len(value), "pieces", written != nil)
			return nil
		}
		// Another writer changed the keys between the read and the
		// transaction: judge again against what it wrote.
		resp = tresp
	}
}

// stored is what a commit needs of the assignments a job holds.
type stored struct {
	generation uint64 // the current generation; 0 when none
	// curHead and prevHead are the heads of chunked current and previous
	// assignments; nil when inline or absent.
	curHead, prevHead *head
}

// sets lists the sets the heads name.
func (st stored) sets() []string {
	var out []string
	for _, h := range []*head{st.curHead, st.prevHead} {
		if h != nil {
			out = append(out, h.set)
		}
	}
	return out
}

// decodeStored decodes a job's current and previous values as far as a
// commit or a delete needs: an inline assignment whole, as before it is
// moved or replaced, a chunked one by its head alone. Errors match
// storage.ErrCorrupt.
func (s *Store) decodeStored(job string, raw rawRecord) (stored, error) {
	var (
		st   stored
		gens [2]uint64
	)
	for i, kv := range []*mvccpb.KeyValue{raw.cur, raw.prev} {
		if kv == nil {
			continue
		}
		leaf := []string{leafCurrent, leafPrevious}[i]
		h, err := headOf(leaf, kv.Value)
		if err != nil {
			return stored{}, err
		}
		if h != nil {
			gens[i] = h.generation
			if i == 0 {
				st.curHead = h
			} else {
				st.prevHead = h
			}
			continue
		}
		a, err := storage.DecodeAssignment(job, leaf, kv.Value)
		if err != nil {
			return stored{}, err
		}
		gens[i] = a.Generation
	}
	switch {
	case raw.prev != nil && raw.cur == nil:
		return stored{}, fmt.Errorf("%w: a previous assignment is stored without a current one", storage.ErrCorrupt)
	case raw.prev != nil && gens[1] >= gens[0]:
		return stored{}, fmt.Errorf("%w: the previous generation %d is not below the current generation %d", storage.ErrCorrupt, gens[1], gens[0])
	case st.curHead != nil && st.prevHead != nil && st.curHead.set == st.prevHead.set:
		// A commit would delete the set with the previous head while it
		// makes the current one previous.
		return stored{}, fmt.Errorf("%w: the current and previous heads name the same pieces (%s)", storage.ErrCorrupt, st.curHead.set)
	}
	st.generation = gens[0]
	return st, nil
}

// SetConfig implements storage.Store: an unconditional put (SetConfigIf is
// the conditional one).
func (s *Store) SetConfig(ctx context.Context, job string, cfg assign.Config) error {
	if err := s.checkWrite(ctx, "set config", job); err != nil {
		return err
	}
	enc, err := storage.ConfigValue(job, cfg)
	if err != nil {
		return err
	}
	rctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if _, err := s.cli.Put(rctx, s.keys.config(job), string(enc)); err != nil {
		return s.opError(ctx, "set config", job, err)
	}
	return nil
}

// SetConfigIf implements storage.Store: the config is read, its version
// compared, and the new one put only if the key is still at the revision
// read (absent: revision 0), in one transaction.
func (s *Store) SetConfigIf(ctx context.Context, job string, cfg assign.Config, version uint64) error {
	if err := s.checkWrite(ctx, "set config", job); err != nil {
		return err
	}
	enc, err := storage.ConfigValue(job, cfg)
	if err != nil {
		return err
	}
	rctx, cancel := s.withTimeout(ctx)
	defer cancel()
	key := s.keys.config(job)
	resp, err := s.cli.Get(rctx, key)
	for attempt := 1; ; attempt++ {
		if err != nil {
			return s.opError(ctx, "set config", job, err)
		}
		var kv *mvccpb.KeyValue
		if len(resp.Kvs) > 0 {
			kv = resp.Kvs[0]
		}
		have, err := storage.ConfigVersionOf(job, rawRecord{}.value(kv))
		if err != nil {
			return s.corrupt("set config", job, err)
		}
		if have != version {
			return storage.ConfigChanged(job, have, version)
		}
		t, err := s.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rawRecord{}.rev(kv))).
			Then(clientv3.OpPut(key, string(enc))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return s.opError(ctx, "set config", job, err)
		}
		if t.Succeeded {
			return nil
		}
		if attempt == maxCommitAttempts {
			return fmt.Errorf("%w: set config of job %q: it kept changing while being set; read the job again and retry", storage.ErrConflict, job)
		}
		// Written since the read: judge again against what is there
		// (the same config written again still matches).
		resp = (*clientv3.GetResponse)(t.Responses[0].GetResponseRange())
	}
}

// Delete implements storage.Store with one transaction that deletes the
// job's keys (a range delete, applied at a single revision) and records the
// generation they were at, if the current and deleted keys are still at the
// revisions it read: a Commit that read the job before fails its own
// transaction on the current key's revision, and one after finds no job.
func (s *Store) Delete(ctx context.Context, job string) error {
	if err := s.checkWrite(ctx, "delete", job); err != nil {
		return err
	}
	rctx, cancel := s.withTimeout(ctx)
	defer cancel()
	for attempt := 1; attempt <= maxDeleteAttempts; attempt++ {
		read, err := s.cli.Txn(rctx).Then(
			clientv3.OpGet(s.keys.job(job), clientv3.WithPrefix()),
			clientv3.OpGet(s.keys.deleted(job)),
		).Commit()
		if err != nil {
			return s.opError(ctx, "delete", job, err)
		}
		kvs := read.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return fmt.Errorf("%w: delete job %q: no assignment or config is stored for it", storage.ErrNotFound, job)
		}
		raw := s.split(job, kvs)
		floor, tomb, _ := s.deletedAt(read.Responses[1].GetResponseRange().Kvs) // an unreadable value is replaced
		// A job created again continues above the generation it was
		// deleted at, which its subscribers may hold: each of current and
		// previous that can be read counts even when the other cannot,
		// and an unreadable current is above a readable previous.
		if g, err := StoredGeneration(job, raw.value(raw.prev)); raw.prev != nil && err == nil {
			floor = max(floor, g)
			if raw.cur != nil {
				floor = max(floor, g+1)
			}
		}
		if g, err := StoredGeneration(job, raw.value(raw.cur)); raw.cur != nil && err == nil {
			floor = max(floor, g)
		}
		tresp, err := s.cli.Txn(rctx).
			If(
				clientv3.Compare(clientv3.ModRevision(s.keys.current(job)), "=", raw.rev(raw.cur)),
				clientv3.Compare(clientv3.ModRevision(s.keys.deleted(job)), "=", raw.rev(tomb)),
			).
			Then(
				clientv3.OpDelete(s.keys.job(job), clientv3.WithPrefix()),
				clientv3.OpDelete(s.keys.history(job), clientv3.WithPrefix()),
				clientv3.OpDelete(s.keys.chunks(job), clientv3.WithPrefix()),
				clientv3.OpPut(s.keys.deleted(job), string(storage.EncodeGeneration(floor))),
			).
			Commit()
		if err != nil {
			return s.opError(ctx, "delete", job, err)
		}
		if tresp.Succeeded {
			s.log.Debug("deleted", "job", job, "generation", floor, "revision", tresp.Header.Revision)
			return nil
		}
	}
	return fmt.Errorf("%w: delete job %q: it was committed to %d times while being deleted; stop what is deciding it (its tasks) and retry",
		storage.ErrConflict, job, maxDeleteAttempts)
}

// deletedAt decodes the generation a job was deleted at from the result of
// reading its deleted key, and returns the key: 0 and nil when absent.
func (s *Store) deletedAt(kvs []*mvccpb.KeyValue) (uint64, *mvccpb.KeyValue, error) {
	if len(kvs) == 0 {
		return 0, nil, nil
	}
	g, err := storage.DecodeGeneration(kvs[0].Value)
	if err != nil {
		return 0, kvs[0], fmt.Errorf("%w: the generation the job was deleted at, under %s: %w", storage.ErrCorrupt, kvs[0].Key, err)
	}
	return g, kvs[0], nil
}

// Jobs implements storage.Store.
func (s *Store) Jobs(ctx context.Context) ([]string, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("%w: list jobs", storage.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: list jobs: %w", err)
	}
	rctx, cancel := s.withTimeout(ctx)
	defer cancel()
	names, _, err := s.jobs(rctx, s.keys.jobs())
	if err != nil {
		var corrupt errCorruptKey
		if errors.As(err, &corrupt) {
			return nil, s.corrupt("list", "", fmt.Errorf("%w: %w", storage.ErrCorrupt, err))
		}
		return nil, s.opError(ctx, "list", "", err)
	}
	return names, nil
}

// jobs lists the sorted job names under prefix (all jobs, or one job's
// keys) and the revision it read at.
func (s *Store) jobs(ctx context.Context, prefix string) ([]string, int64, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, err
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		job, _, err := s.keys.jobOf(kv.Key)
		if err != nil {
			return nil, 0, errCorruptKey{err}
		}
		names = append(names, job)
	}
	return sortedJobs(names), resp.Header.Revision, nil
}

// deletedJobs lists the sorted names of the jobs ever deleted (a job
// created again since is listed too): those under deleted/. A key there
// that names no job is skipped; nothing else reads it as a name.
func (s *Store) deletedJobs(ctx context.Context) ([]string, error) {
	dir := s.keys.deletedDir()
	resp, err := s.cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if job := strings.TrimPrefix(string(kv.Key), dir); assign.ValidateJobName(job) == nil {
			names = append(names, job)
		}
	}
	return sortedJobs(names), nil
}

// errCorruptKey marks a key in the jobs namespace that names no job.
type errCorruptKey struct{ err error }

func (e errCorruptKey) Error() string { return e.err.Error() }
func (e errCorruptKey) Unwrap() error { return e.err }

// Close implements storage.Store: it ends watches, waits for them and
// closes the client. A second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed.Swap(true) {
		s.mu.Unlock()
		return nil
	}
	close(s.closing)
	s.mu.Unlock()
	s.watchers.Wait()
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("storage: close etcd client for %s: %w", s.endpoints, err)
	}
	s.log.Info("storage closed")
	return nil
}

// rawRecord is a job's keys as read from etcd; nil when absent.
type rawRecord struct{ cur, prev, cfg *mvccpb.KeyValue }

func (rawRecord) value(kv *mvccpb.KeyValue) []byte {
	if kv == nil {
		return nil
	}
	if kv.Value == nil {
		// etcd hands a present 0-byte value back as nil; it is a value
		// (a corrupt one), not an absent key.
		return []byte{}
	}
	return kv.Value
}

// rev is the key's mod revision, 0 when absent: an absent key compares
// equal to 0, so the transaction also catches a key appearing.
func (rawRecord) rev(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

// split sorts a job's keys into a rawRecord. Other leaves are ignored, as
// Bolt ignores other keys in a job's bucket.
func (s *Store) split(job string, kvs []*mvccpb.KeyValue) rawRecord {
	var r rawRecord
	for _, kv := range kvs {
		switch string(kv.Key) {
		case s.keys.current(job):
			r.cur = kv
		case s.keys.previous(job):
			r.prev = kv
		case s.keys.config(job):
			r.cfg = kv
		}
	}
	return r
}

// withTimeout bounds a call by the request timeout.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.reqTimeout)
}

// check rejects calls on a closed store, with a done context, or for an
// invalid job name.
func (s *Store) check(ctx context.Context, op, job string) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %s job %q", storage.ErrClosed, op, job)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: %s job %q: %w", op, job, err)
	}
	if err := assign.ValidateJobName(job); err != nil {
		return fmt.Errorf("%w: %s: %w", storage.ErrInvalid, op, err)
	}
	return nil
}

func (s *Store) checkWrite(ctx context.Context, op, job string) error {
	if err := s.check(ctx, op, job); err != nil {
		return err
	}
	if s.readOnly {
		return fmt.Errorf("%w: %s job %q: the etcd store at %s was opened read-only (a backup-only agent never writes)",
			storage.ErrReadOnly, op, job, s.endpoints)
	}
	return nil
}

func subject(job string) string {
	if job == "" {
		return "jobs"
	}
	return fmt.Sprintf("job %q", job)
}

// corrupt wraps a storage.ErrCorrupt decoding error with where the data is
// and what to do.
func (s *Store) corrupt(op, job string, err error) error {
	where := s.keys.jobs()
	if job != "" {
		where = s.keys.job(job)
	}
	return fmt.Errorf("storage: %s %s: in etcd at %s under %s: %w; slicerd will not overwrite it: fix or delete those keys (etcdctl), or restore etcd from a snapshot",
		op, subject(job), s.endpoints, where, err)
}

// opError classifies an etcd client error. An etcd that does not answer,
// or that refuses the credentials or permissions it accepted at Open, is
// storage.ErrUnavailable, never storage.ErrConflict: nothing is known to
// have changed, so the caller retries rather than rebasing.
func (s *Store) opError(ctx context.Context, op, job string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %s %s", storage.ErrClosed, op, subject(job))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("storage: %s %s: %w", op, subject(job), ctx.Err())
	}
	if aerr := s.authError(op, subject(job), err); aerr != nil {
		// Nothing changed, and the call succeeds again once the user's
		// permissions or password are fixed, with no restart.
		return fmt.Errorf("%w: %w", storage.ErrUnavailable, aerr)
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch {
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return fmt.Errorf("storage: %s %s: etcd at %s is out of space and accepts no writes: %w; compact and defragment etcd and disarm its NOSPACE alarm (etcdctl alarm disarm), and run it with --auto-compaction-retention",
			op, subject(job), s.endpoints, err)
	case errors.Is(err, rpctypes.ErrTooManyRequests), errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests):
		return fmt.Errorf("%w: %s %s: etcd at %s is overloaded: %w; retry later",
			storage.ErrUnavailable, op, subject(job), s.endpoints, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrGRPCRequestTooLarge), code == codes.ResourceExhausted:
		return fmt.Errorf("storage: %s %s: etcd at %s refused the request as too large: %w; raise etcd's --max-request-bytes",
			op, subject(job), s.endpoints, err)
	case errors.Is(err, context.DeadlineExceeded), code == codes.DeadlineExceeded, code == codes.Unavailable:
		return fmt.Errorf("%w: %s %s: etcd at %s did not answer within %v: %w; check that etcd is running and reachable",
			storage.ErrUnavailable, op, subject(job), s.endpoints, s.reqTimeout, err)
	}
	return fmt.Errorf("storage: %s %s: etcd at %s: %w", op, subject(job), s.endpoints, err)
}

// probe says what a plain TCP connection to each endpoint finds, to tell a
// refused or unroutable address from a listener that is not answering as
// etcd.
func probe(endpoints []string, timeout time.Duration) string {
	var found []string
	for _, e := range endpoints {
		host := e
		if i := strings.Index(host, "://"); i >= 0 {
			host = host[i+3:]
		}
		conn, err := net.DialTimeout("tcp", host, min(timeout, time.Second))
		if err != nil {
			found = append(found, err.Error())
			continue
		}
		conn.Close()
		found = append(found, host+" accepts TCP connections but did not answer as etcd (is it etcd's client port? does it need TLS?)")
	}
	return strings.Join(found, "; ")
}
