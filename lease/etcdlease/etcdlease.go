// Package etcdlease is the lease manager (package lease) of slicerd nodes
// that share an etcd store: its leases are etcd leases, with TTL and
// keep-alive, and its conditions are etcd transactions, so any slicerd
// node on the store may serve any job's leases and they outlive every one
// of them.
//
// The keys live under the store's prefix, beside the records they fence
// (see etcdstore's schema):
//
//	leases/<job>/job               the job lease: the holder's name, put
//	                               with the holder's session lease (one
//	                               etcd lease per holder, carrying all its
//	                               job keys); its create revision is the
//	                               epoch
//	leases/<job>/guard             flags (1 set, 2 recalled), from, to:
//	leases/<job>/bridge            1 + 8 + 8 bytes, big-endian
//	leases/<job>/guard-r/<reader>  a reader's value (from, to), put with
//	leases/<job>/bridge-r/<reader> the reader's own etcd lease
//
// A holder's job leases share its session (session.go): renewing them is
// one keep-alive, whatever their number, and they expire together.
//
// Every write of the job lease's holder compares the job key's create
// revision with the lease's epoch in its transaction, as the store's
// fenced commit does. A read is an etcd lease granted for it and a
// transaction that puts the reader's key only if the guard or bridge is
// open at the value read; renewing it grants a new etcd lease and moves the
// key to it, so a recalled lease cannot be kept alive by keep-alives. A
// read moves the key only if nothing wrote it since its etcd lease was
// granted, so a read that comes late never puts the key on a lease that
// ends before a later read's. A reader key's value is the value read and
// the reader's instance; a read first looks at the reader's keys of both
// kinds, is refused if either holds another instance's read, and moves the
// key only if neither changed since. Set compares that no reader key
// exists, in the same transaction.
package etcdlease

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/storage/etcdstore"
)

// Options configures New.
type Options struct {
	// RequestTimeout bounds each etcd call that has no earlier deadline;
	// default 5s.
	RequestTimeout time.Duration
	// Logger receives grants and recalls; nil discards them.
	Logger *slog.Logger
	// ScrubEvery is how often a holder's renewal lists the job keys its
	// session lease carries, to find one deleted by hand (default 10s).
	ScrubEvery time.Duration
}

// Manager is a lease.Manager in etcd.
type Manager struct {
	cli        *clientv3.Client
	store      *etcdstore.Store
	reqTimeout time.Duration
	scrubEvery time.Duration
	log        *slog.Logger
	closed     atomic.Bool

	sessMu   sync.Mutex
	sessions map[sessionKey]*session // each holder's live session
	byID     map[clientv3.LeaseID]*session

	// stop ends, and sends waits for, the goroutines sending keep-alives
	// (keepAlive): Close cancels and waits.
	stop    context.Context
	stopped context.CancelFunc
	sends   sync.WaitGroup
}

var _ lease.Manager = (*Manager)(nil)

// New returns a manager keeping its leases in store's etcd, under its
// prefix. It shares the store's client: close it before the store.
func New(store *etcdstore.Store, opts Options) *Manager {
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ScrubEvery <= 0 {
		opts.ScrubEvery = DefaultScrubEvery
	}
	stop, stopped := context.WithCancel(context.Background())
	return &Manager{cli: store.Client(), store: store, reqTimeout: opts.RequestTimeout, scrubEvery: opts.ScrubEvery, log: opts.Logger,
		sessions: map[sessionKey]*session{}, byID: map[clientv3.LeaseID]*session{}, stop: stop, stopped: stopped}
}

func (m *Manager) jobKey(job string) string { return m.store.JobLeaseKey(job) }

func (m *Manager) stateKey(job string, kind lease.Kind) string {
	return m.store.LeaseKeys(job) + kind.String()
}

func (m *Manager) readersPrefix(job string, kind lease.Kind) string {
	return m.store.LeaseKeys(job) + kind.String() + "-r/"
}

// fence is the condition of every write of the job lease's holder.
func (m *Manager) fence(l lease.Job) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(m.jobKey(l.Job)), "=", int64(l.Epoch))
}

// Acquire implements lease.Manager: the job key put, if absent, with the
// holder's session lease (granted on its first Acquire; see session), then
// a keep-alive of that lease, so that the job lease lasts a TTL from a
// request sent after the call began. The epoch is the revision of the put.
// An Acquire that finds the lease held costs one request.
func (m *Manager) Acquire(ctx context.Context, job, holder string, ttl time.Duration) (lease.Job, error) {
	const op = "acquire job lease"
	if err := m.check(ctx, op, job); err != nil {
		return lease.Job{}, err
	}
	if err := lease.CheckName(op, "holder", holder); err != nil {
		return lease.Job{}, err
	}
	if err := lease.CheckTTL(op, ttl); err != nil {
		return lease.Job{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	key := m.jobKey(job)
	orphanDeleted := false
	for attempt := 0; ; attempt++ {
		s, err := m.session(rctx, holder, seconds(ttl))
		if err != nil {
			return lease.Job{}, m.opError(ctx, op, job, err)
		}
		end := s.begin(job)
		t, err := m.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, holder, clientv3.WithLease(s.id))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err == nil && !t.Succeeded && !orphanDeleted {
			if kvs := t.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].Lease == int64(s.id) &&
				s.ownOrphan(job, uint64(kvs[0].CreateRevision)) {
				orphanDeleted = true
				derr := m.dropOrphan(rctx, s, key, kvs[0])
				end()
				if derr != nil {
					return lease.Job{}, m.opError(ctx, op, job, derr)
				}
				m.log.Warn("deleted this holder's own job key that no lease of it held (an Acquire whose answer was lost); acquiring the job afresh",
					"job", job, "holder", holder, "epoch", kvs[0].CreateRevision)
				attempt--
				continue
			}
		}
		if err != nil || !t.Succeeded {
			end()
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0 {
			m.expired(s) // it expired unnoticed: the holder held no job for a TTL
			continue
		}
		if err != nil {
			return lease.Job{}, m.opError(ctx, op, job, err)
		}
		if !t.Succeeded {
			kvs := t.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return lease.Job{}, fmt.Errorf("%w: job %q: its lease was held a moment ago; retry", lease.ErrHeld, job)
			}
			return lease.Job{}, &lease.HeldError{Job: job, Holder: string(kvs[0].Value), Epoch: uint64(kvs[0].CreateRevision)}
		}
		l := lease.Job{Job: job, Holder: holder, Epoch: uint64(t.Header.Revision), ID: int64(s.id)}
		// The put is known done from now: a scrub sent earlier may not
		// list the key, and must not take it for deleted.
		s.mu.Lock()
		s.held[job] = heldKey{epoch: l.Epoch, put: time.Now()}
		s.mu.Unlock()
		end()
		secs, err := m.keepAlive(rctx, s)
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				// The etcd lease expired between the put and the
				// keep-alive (it had carried nothing for a TTL, so
				// nothing renewed it), and the key went with it: try
				// once more, on a new one.
				m.expired(s)
				if attempt == 0 {
					continue
				}
			} else {
				s.forget(job, l.Epoch, true)
			}
			return lease.Job{}, m.opError(ctx, op, job, err)
		}
		l.TTL = time.Duration(secs) * time.Second
		m.log.Info("job lease granted", "job", job, "holder", holder, "epoch", l.Epoch, "ttl", l.TTL)
		return l, nil
	}
}

// Renew implements lease.Manager: RenewAll of l alone.
func (m *Manager) Renew(ctx context.Context, l lease.Job) (lease.Job, error) {
	r := m.RenewAll(ctx, []lease.Job{l})[0]
	return r.Job, r.Err
}

// RenewAll implements lease.Manager: one keep-alive for each holder's
// session (shared with any renewal or Acquire of the holder under way),
// however many of its job leases ls holds, and a scrub of the session's
// keys every Options.ScrubEvery. A lease of no live session of this
// manager is lost.
func (m *Manager) RenewAll(ctx context.Context, ls []lease.Job) []lease.Renewal {
	const op = "renew job lease"
	out := make([]lease.Renewal, len(ls))
	groups := map[clientv3.LeaseID][]int{}
	var order []clientv3.LeaseID
	for i, l := range ls {
		if err := m.check(ctx, op, l.Job); err != nil {
			out[i].Err = err
			continue
		}
		id := clientv3.LeaseID(l.ID)
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], i)
	}
	for _, id := range order {
		if s := m.lookup(id); s != nil {
			m.renewSession(ctx, s, ls, groups[id], out)
			continue
		}
		// No live session of this manager: it expired (and took the job
		// keys with it), or the lease is not this manager's to renew.
		for _, i := range groups[id] {
			out[i].Err = fmt.Errorf("%w: job %q: the lease of epoch %d expired with its holder's etcd lease, or was not granted here",
				lease.ErrLost, ls[i].Job, ls[i].Epoch)
		}
	}
	return out
}

// Release implements lease.Manager: it deletes the job key if it is still
// the lease's. The holder's session lease lives on for its other jobs (an
// etcd lease it does not know is left to expire: it may be another
// holder's session). A delete that fails is
// tried again at the holder's next renewal, so that the session does not
// keep the key alive.
func (m *Manager) Release(ctx context.Context, l lease.Job) error {
	const op = "release job lease"
	if err := m.check(ctx, op, l.Job); err != nil {
		return err
	}
	s := m.lookup(clientv3.LeaseID(l.ID))
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	if _, err := m.cli.Txn(rctx).If(m.fence(l)).Then(clientv3.OpDelete(m.jobKey(l.Job))).Commit(); err != nil {
		if s != nil {
			s.forget(l.Job, l.Epoch, true)
		}
		return m.opError(ctx, op, l.Job, err)
	}
	if s != nil {
		s.forget(l.Job, l.Epoch, false)
	}
	m.log.Info("job lease released", "job", l.Job, "holder", l.Holder, "epoch", l.Epoch)
	return nil
}

// Holder implements lease.Manager.
func (m *Manager) Holder(ctx context.Context, job string) (lease.Job, error) {
	const op = "read job lease"
	if err := m.check(ctx, op, job); err != nil {
		return lease.Job{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	resp, err := m.cli.Get(rctx, m.jobKey(job))
	if err != nil {
		return lease.Job{}, m.opError(ctx, op, job, err)
	}
	if len(resp.Kvs) == 0 {
		return lease.Job{}, fmt.Errorf("%w: job %q", lease.ErrNotHeld, job)
	}
	kv := resp.Kvs[0]
	l := lease.Job{Job: job, Holder: string(kv.Value), Epoch: uint64(kv.CreateRevision), ID: kv.Lease}
	if ttl, err := m.cli.TimeToLive(rctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
		l.TTL = time.Duration(ttl.TTL) * time.Second
	}
	return l, nil
}

// State implements lease.Manager.
func (m *Manager) State(ctx context.Context, job string, kind lease.Kind) (lease.State, error) {
	op := "read " + kind.String()
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return lease.State{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	resp, err := m.cli.Get(rctx, m.stateKey(job, kind))
	if err != nil {
		return lease.State{}, m.opError(ctx, op, job, err)
	}
	return m.decodeState(job, kind, resp.Kvs)
}

// Set implements lease.Manager in one transaction: fenced, with no reader
// key under the lease.
func (m *Manager) Set(ctx context.Context, l lease.Job, kind lease.Kind, v lease.Value) error {
	op := "set " + kind.String()
	if err := m.checkShared(ctx, op, l.Job, kind); err != nil {
		return err
	}
	if err := lease.CheckValue(op, kind, v); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	readers := m.readersPrefix(l.Job, kind)
	t, err := m.cli.Txn(rctx).
		If(m.fence(l), clientv3.Compare(clientv3.CreateRevision(readers), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(m.stateKey(l.Job, kind), string(encodeState(lease.State{Set: true, Value: v})))).
		Else(clientv3.OpGet(m.jobKey(l.Job)), clientv3.OpGet(readers, clientv3.WithPrefix(), clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return m.opError(ctx, op, l.Job, err)
	}
	if !t.Succeeded {
		if err := lost(l, t.Responses[0]); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s of job %q: %d readers still hold it; recall it and wait for them",
			lease.ErrBusy, op, l.Job, t.Responses[1].GetResponseRange().Count)
	}
	m.log.Debug("lease set", "job", l.Job, "kind", kind.String(), "value", v.String(), "epoch", l.Epoch)
	return nil
}

// Recall implements lease.Manager: it rewrites the state with the recalled
// flag, fenced and conditional on the state it read.
func (m *Manager) Recall(ctx context.Context, l lease.Job, kind lease.Kind) error {
	op := "recall " + kind.String()
	if err := m.checkShared(ctx, op, l.Job, kind); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	key := m.stateKey(l.Job, kind)
	for attempt := 0; attempt < 5; attempt++ {
		t, err := m.cli.Txn(rctx).If(m.fence(l)).Then(clientv3.OpGet(key)).Else(clientv3.OpGet(m.jobKey(l.Job))).Commit()
		if err != nil {
			return m.opError(ctx, op, l.Job, err)
		}
		if !t.Succeeded {
			return lost(l, t.Responses[0])
		}
		kvs := t.Responses[0].GetResponseRange().Kvs
		st, err := m.decodeState(l.Job, kind, kvs)
		if err != nil {
			return err
		}
		if !st.Set || st.Recalled {
			return nil
		}
		st.Recalled = true
		t, err = m.cli.Txn(rctx).
			If(m.fence(l), clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(encodeState(st)))).
			Else(clientv3.OpGet(m.jobKey(l.Job))).
			Commit()
		if err != nil {
			return m.opError(ctx, op, l.Job, err)
		}
		if t.Succeeded {
			m.log.Debug("lease recalled", "job", l.Job, "kind", kind.String(), "value", st.Value.String())
			return nil
		}
		if err := lost(l, t.Responses[0]); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %s of job %q: its state kept changing; is another process using this holder's lease?", lease.ErrBusy, op, l.Job)
}

// waitRecheck is how often Wait looks again without news from its watch,
// in case the watch was lost with etcd.
const waitRecheck = time.Second

// Wait implements lease.Manager by watching the readers' keys until none
// is left.
func (m *Manager) Wait(ctx context.Context, l lease.Job, kind lease.Kind) error {
	op := "wait for " + kind.String() + " readers"
	if err := m.checkShared(ctx, op, l.Job, kind); err != nil {
		return err
	}
	readers := m.readersPrefix(l.Job, kind)
	for {
		rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
		t, err := m.cli.Txn(rctx).
			Then(clientv3.OpGet(m.jobKey(l.Job)), clientv3.OpGet(readers, clientv3.WithPrefix(), clientv3.WithCountOnly())).
			Commit()
		cancel()
		if err != nil {
			return m.opError(ctx, op, l.Job, err)
		}
		if err := lost(l, t.Responses[0]); err != nil {
			return err
		}
		if t.Responses[1].GetResponseRange().Count == 0 {
			return nil
		}
		wctx, wcancel := context.WithTimeout(ctx, waitRecheck)
		wch := m.cli.Watch(clientv3.WithRequireLeader(wctx), readers, clientv3.WithPrefix(), clientv3.WithRev(t.Header.Revision+1))
		select {
		case <-wch:
		case <-wctx.Done():
		}
		wcancel()
		if ctx.Err() != nil {
			return fmt.Errorf("lease: %s of job %q: %w", op, l.Job, ctx.Err())
		}
		if m.closed.Load() {
			return fmt.Errorf("%w: %s of job %q", lease.ErrClosed, op, l.Job)
		}
	}
}

// Readers implements lease.Manager.
func (m *Manager) Readers(ctx context.Context, job string, kind lease.Kind) ([]lease.Reader, error) {
	const op = "list readers"
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	prefix := m.readersPrefix(job, kind)
	resp, err := m.cli.Get(rctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, m.opError(ctx, op, job, err)
	}
	out := make([]lease.Reader, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		v, _, err := decodeReader(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%w: job %q: reader key %s: %w", lease.ErrCorrupt, job, kv.Key, err)
		}
		out = append(out, lease.Reader{Name: strings.TrimPrefix(string(kv.Key), prefix), Value: v})
	}
	return out, nil
}

// Read implements lease.Manager: a new etcd lease, and the reader's key
// put with it only if the guard or bridge is open at v and the key was not
// written since the lease was granted (a later read of the reader holds
// it: this one is refused). The reader's previous etcd lease, if any, is
// revoked once the key has moved.
func (m *Manager) Read(ctx context.Context, job string, kind lease.Kind, reader, instance string, v lease.Value, ttl time.Duration) (lease.Read, error) {
	op := "read " + kind.String()
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return lease.Read{}, err
	}
	if err := lease.CheckName(op, "reader", reader); err != nil {
		return lease.Read{}, err
	}
	if err := lease.CheckInstance(op, instance); err != nil {
		return lease.Read{}, err
	}
	if err := lease.CheckValue(op, kind, v); err != nil {
		return lease.Read{}, err
	}
	if err := lease.CheckTTL(op, ttl); err != nil {
		return lease.Read{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	key := m.readersPrefix(job, kind) + reader
	state := m.stateKey(job, kind)
	open := string(encodeState(lease.State{Set: true, Value: v}))
	// The reader's keys of both kinds as they are now: the guard and the
	// bridge both give the reader keys. A key exists while its read is
	// live (etcd deletes it with its etcd lease); one that holds another
	// instance's read refuses this one.
	keys := [2]string{m.readersPrefix(job, lease.Guard) + reader, m.readersPrefix(job, lease.Bridge) + reader}
	cur, err := m.cli.Txn(rctx).Then(clientv3.OpGet(keys[0]), clientv3.OpGet(keys[1])).Commit()
	if err != nil {
		return lease.Read{}, m.opError(ctx, op, job, err)
	}
	var revs [2]int64 // each key's ModRevision; 0: no key
	for i, r := range cur.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		_, held, err := decodeReader(kvs[0].Value)
		if err != nil {
			return lease.Read{}, fmt.Errorf("%w: job %q: reader key %s: %w", lease.ErrCorrupt, job, keys[i], err)
		}
		if lease.OtherInstance(held, instance) {
			return lease.Read{}, &lease.OtherProcessError{Job: job, Kind: lease.Kind(i + 1), Reader: reader, Remaining: m.remaining(rctx, kvs[0].Lease)}
		}
		revs[i] = kvs[0].ModRevision
	}
	g, err := m.cli.Grant(rctx, seconds(ttl))
	if err != nil {
		return lease.Read{}, m.opError(ctx, op, job, err)
	}
	// The key moves to g only if neither of the reader's keys was written
	// since they were read above (so no other instance took either
	// meanwhile), nor the key since g was granted: a read of the same
	// reader that did (this one's request came late) holds an etcd lease
	// granted after g, which outlasts it.
	t, err := m.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.Value(state), "=", open),
			clientv3.Compare(clientv3.ModRevision(key), "<", g.GetRevision()+1),
			clientv3.Compare(clientv3.ModRevision(keys[0]), "=", revs[0]),
			clientv3.Compare(clientv3.ModRevision(keys[1]), "=", revs[1])).
		Then(clientv3.OpGet(key), clientv3.OpPut(key, string(encodeReader(v, instance)), clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(state)).
		Commit()
	if err != nil {
		m.revoke(g.ID)
		return lease.Read{}, m.opError(ctx, op, job, err)
	}
	if !t.Succeeded {
		m.revoke(g.ID)
		st, err := m.decodeState(job, kind, t.Responses[0].GetResponseRange().Kvs)
		if err != nil {
			return lease.Read{}, err
		}
		if st.Set && !st.Recalled && st.Value == v {
			return lease.Read{}, fmt.Errorf("%w: %s of job %q by %s: another read of the same reader was granted or released while this one was under way; read again",
				lease.ErrRecalled, op, job, reader)
		}
		return lease.Read{}, lease.RecalledError(job, kind, v, st)
	}
	if old := t.Responses[0].GetResponseRange().Kvs; len(old) > 0 && old[0].Lease != 0 && old[0].Lease != int64(g.ID) {
		m.revoke(clientv3.LeaseID(old[0].Lease))
	}
	return lease.Read{Job: job, Kind: kind, Reader: reader, Value: v, TTL: time.Duration(g.TTL) * time.Second}, nil
}

// Unread implements lease.Manager by revoking the reader's etcd lease,
// which deletes its key, if the key holds v. A read at another value that
// replaces it meanwhile is on another etcd lease, which stays.
func (m *Manager) Unread(ctx context.Context, job string, kind lease.Kind, reader, instance string, v lease.Value) error {
	op := "release " + kind.String()
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return err
	}
	if err := lease.CheckName(op, "reader", reader); err != nil {
		return err
	}
	if err := lease.CheckInstance(op, instance); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	key := m.readersPrefix(job, kind) + reader
	resp, err := m.cli.Get(rctx, key)
	if err != nil {
		return m.opError(ctx, op, job, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	held, heldBy, err := decodeReader(resp.Kvs[0].Value)
	if err != nil {
		return fmt.Errorf("%w: job %q: reader key %s: %w", lease.ErrCorrupt, job, key, err)
	}
	if (v != lease.Value{} && held != v) || lease.OtherInstance(heldBy, instance) {
		return nil
	}
	if _, err := m.cli.Revoke(rctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return m.opError(ctx, op, job, err)
	}
	// A key put without a lease, or whose lease vanished meanwhile.
	if _, err := m.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Commit(); err != nil {
		return m.opError(ctx, op, job, err)
	}
	return nil
}

// Close implements lease.Manager. The client is the store's, closed with it.
func (m *Manager) Close() error {
	m.closed.Store(true)
	m.stopped()
	m.sends.Wait()
	return nil
}

// dropOrphan deletes kv, a job key on s's live etcd lease that no lease of
// this manager holds (ownOrphan), only if it is still that key on that
// lease, so that the job can be acquired afresh.
func (m *Manager) dropOrphan(ctx context.Context, s *session, key string, kv *mvccpb.KeyValue) error {
	_, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.LeaseValue(key), "=", int64(s.id))).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}

// revoke revokes an etcd lease the caller will not use, best effort: one
// left behind only expires.
// remaining is how long etcd lease id has to live, 0 if that is unknown.
func (m *Manager) remaining(ctx context.Context, id int64) time.Duration {
	if id == 0 {
		return 0
	}
	ttl, err := m.cli.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil || ttl.TTL <= 0 {
		return 0
	}
	return time.Duration(ttl.TTL) * time.Second
}

func (m *Manager) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), m.reqTimeout)
	defer cancel()
	if _, err := m.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		m.log.Debug("revoking an unused etcd lease failed; it expires instead", "lease", int64(id), "err", err)
	}
}

func (m *Manager) check(ctx context.Context, op, job string) error {
	if m.closed.Load() {
		return fmt.Errorf("%w: %s %q", lease.ErrClosed, op, job)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease: %s %q: %w", op, job, err)
	}
	return lease.CheckJob(op, job)
}

func (m *Manager) checkShared(ctx context.Context, op, job string, kind lease.Kind) error {
	if m.closed.Load() {
		return fmt.Errorf("%w: %s of job %q", lease.ErrClosed, op, job)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease: %s of job %q: %w", op, job, err)
	}
	return lease.CheckArgs(op, job, kind)
}

// opError classifies an etcd error: the caller retries (ErrUnavailable),
// unless its context ended or the manager was closed. Whether etcd applied
// the request is not known (a request that timed out may have been), and
// every operation is safe to retry: a job key an Acquire put without
// hearing of it is found and taken afresh by the next Acquire.
func (m *Manager) opError(ctx context.Context, op, job string, err error) error {
	switch {
	case m.closed.Load():
		return fmt.Errorf("%w: %s of job %q", lease.ErrClosed, op, job)
	case ctx.Err() != nil:
		return fmt.Errorf("lease: %s of job %q: %w", op, job, ctx.Err())
	}
	return fmt.Errorf("%w: %s of job %q: no answer from etcd, so whether it was done is not known: %w; check that etcd is running and reachable", lease.ErrUnavailable, op, job, err)
}

// lost reports ErrLost unless resp, a read of the job key, shows l's epoch.
func lost(l lease.Job, resp *etcdserverpb.ResponseOp) error {
	kvs := resp.GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("%w: job %q: the lease of epoch %d expired or was released", lease.ErrLost, l.Job, l.Epoch)
	}
	if uint64(kvs[0].CreateRevision) != l.Epoch {
		return fmt.Errorf("%w: job %q: %s holds its lease now, at epoch %d, not epoch %d", lease.ErrLost, l.Job, kvs[0].Value, kvs[0].CreateRevision, l.Epoch)
	}
	return nil
}

func (m *Manager) decodeState(job string, kind lease.Kind, kvs []*mvccpb.KeyValue) (lease.State, error) {
	if len(kvs) == 0 {
		return lease.State{}, nil
	}
	st, err := DecodeState(kvs[0].Value)
	if err != nil {
		return lease.State{}, fmt.Errorf("%w: job %q's %s at %s: %w; delete the job's lease keys (etcdctl del --prefix %s) to reset them",
			lease.ErrCorrupt, job, kind, kvs[0].Key, err, m.store.LeaseKeys(job))
	}
	if st.Set && lease.CheckValue("decode", kind, st.Value) != nil {
		return lease.State{}, fmt.Errorf("%w: job %q's %s at %s has the invalid value %v", lease.ErrCorrupt, job, kind, kvs[0].Key, st.Value)
	}
	return st, nil
}

// seconds is a TTL in etcd's whole seconds, rounded up.
func seconds(ttl time.Duration) int64 {
	return int64(math.Ceil(ttl.Seconds()))
}

// encodeState and DecodeState are the guard and bridge keys' encoding.
func encodeState(st lease.State) []byte {
	var flags byte
	if st.Set {
		flags |= 1
	}
	if st.Recalled {
		flags |= 2
	}
	b := []byte{flags}
	b = binary.BigEndian.AppendUint64(b, st.Value.From)
	return binary.BigEndian.AppendUint64(b, st.Value.To)
}

// DecodeState decodes a guard or bridge key's value.
func DecodeState(b []byte) (lease.State, error) {
	if len(b) != 17 {
		return lease.State{}, fmt.Errorf("it is %d bytes long, want 17", len(b))
	}
	if b[0]&^3 != 0 || b[0]&1 == 0 {
		return lease.State{}, fmt.Errorf("it has flags %#x", b[0])
	}
	return lease.State{
		Set:      true,
		Recalled: b[0]&2 != 0,
		Value:    lease.Value{From: binary.BigEndian.Uint64(b[1:]), To: binary.BigEndian.Uint64(b[9:])},
	}, nil
}

// encodeReader and decodeReader are the reader keys' encoding: the value
// read, 16 bytes, then the reader's instance ID, if any.
func encodeReader(v lease.Value, instance string) []byte {
	b := binary.BigEndian.AppendUint64(nil, v.From)
	b = binary.BigEndian.AppendUint64(b, v.To)
	return append(b, instance...)
}

func decodeReader(b []byte) (lease.Value, string, error) {
	if len(b) < 16 || len(b) > 16+lease.MaxInstanceLen {
		return lease.Value{}, "", fmt.Errorf("it is %d bytes long, want 16 to %d", len(b), 16+lease.MaxInstanceLen)
	}
	return lease.Value{From: binary.BigEndian.Uint64(b), To: binary.BigEndian.Uint64(b[8:])}, string(b[16:]), nil
}
