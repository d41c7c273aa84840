package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/lease"
)

// A session is one holder's etcd lease, which carries the key of every job
// lease the holder acquires through this manager: an Assigner holding
// 10,000 jobs keeps one etcd lease alive, with one keep-alive every third
// of its TTL, rather than 10,000 with 10,000 keep-alives and 10,000 reads.
// The job keys live and die together: when the session's lease expires
// (its holder stopped, or was paused past the TTL) etcd deletes every one
// of them at once, and the holder loses every job. A job key leaves a live
// session only when its holder releases it, or when someone deletes it by
// hand (etcdctl del): the manager finds those with a scrub, a list of the
// session's keys (one request) every Options.ScrubEvery, and a holder
// whose key is gone is in any case fenced at its next write.
type session struct {
	key sessionKey
	id  clientv3.LeaseID

	// send serialises the keep-alives: a batch's request is sent only once
	// the one before it has answered, after every caller that joined it.
	send sync.Mutex

	mu      sync.Mutex
	dead    bool               // the etcd lease expired or was revoked
	held    map[string]heldKey // job → its key, put with this lease and not released
	stray   map[string]uint64  // job → epoch: keys to delete (a Release or an Acquire that did not finish)
	pending *keepAlive         // the batch that callers join; sent by its first caller
	// acquiring counts the Acquires of each job under way on this
	// session: a key of the session's that no Acquire is putting and
	// that is not held is an orphan (see ownOrphan).
	acquiring map[string]int
	scrub     time.Time // when the last scrub was sent
}

// sessionKey names a session: the holder and the TTL in etcd's seconds.
type sessionKey struct {
	holder string
	ttl    int64
}

// heldKey is a job key put with a session's lease.
type heldKey struct {
	epoch uint64
	put   time.Time // when the Acquire that put it had its answer
}

// keepAlive is one keep-alive of a session's lease, shared by the callers
// that joined it before it was sent.
type keepAlive struct {
	done chan struct{}
	ttl  int64 // seconds, when err is nil
	err  error
}

// DefaultScrubEvery is Options.ScrubEvery's default: how often RenewAll
// lists a session's keys, to find a job key deleted by hand. Between
// scrubs the renewals cost one request per session whatever the number of
// jobs; a scrub costs one request whose answer lists every job key of the
// session (about 50 bytes a job).
const DefaultScrubEvery = 10 * time.Second

// session returns holder's live session for ttl seconds, granting its etcd
// lease if there is none.
func (m *Manager) session(ctx context.Context, holder string, ttl int64) (*session, error) {
	k := sessionKey{holder: holder, ttl: ttl}
	if s := m.liveSession(k); s != nil {
		return s, nil
	}
	// Granted outside the lock, so that renewals never wait for a grant.
	g, err := m.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	m.sessMu.Lock()
	if s := m.sessions[k]; s != nil && !s.isDead() {
		m.sessMu.Unlock()
		m.revoke(g.ID) // a concurrent Acquire of the holder granted one first
		return s, nil
	}
	s := &session{key: k, id: g.ID, held: map[string]heldKey{}, stray: map[string]uint64{}, acquiring: map[string]int{}, scrub: time.Now()}
	m.sessions[k] = s
	m.byID[g.ID] = s
	m.sessMu.Unlock()
	m.log.Debug("holder's etcd lease granted", "holder", holder, "lease", int64(g.ID), "ttl_seconds", g.TTL)
	return s, nil
}

// liveSession returns the live session of k, nil for none.
func (m *Manager) liveSession(k sessionKey) *session {
	m.sessMu.Lock()
	defer m.sessMu.Unlock()
	if s := m.sessions[k]; s != nil && !s.isDead() {
		return s
	}
	return nil
}

// lookup returns the session whose etcd lease is id, nil for none.
func (m *Manager) lookup(id clientv3.LeaseID) *session {
	m.sessMu.Lock()
	defer m.sessMu.Unlock()
	return m.byID[id]
}

// expired marks s dead, its etcd lease gone with every job key it carried.
func (m *Manager) expired(s *session) {
	s.mu.Lock()
	was := s.dead
	s.dead = true
	jobs := len(s.held)
	clear(s.held)
	clear(s.stray)
	s.mu.Unlock()
	m.sessMu.Lock()
	if m.sessions[s.key] == s {
		delete(m.sessions, s.key)
	}
	delete(m.byID, s.id)
	m.sessMu.Unlock()
	if !was && jobs > 0 {
		m.log.Warn("the holder's etcd lease expired: every job lease it carried is lost", "holder", s.key.holder, "lease", int64(s.id), "jobs", jobs)
	}
}

func (s *session) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// keepAlive renews s's etcd lease with a keep-alive sent after this call
// began, which it shares with every concurrent caller: the first caller of
// a batch sends it once the previous batch has answered, and the others
// wait for it. The request is sent by a goroutine of its own, bounded by
// the manager's request timeout (and Close), not by any one caller's
// context: every caller, the first too, stops waiting when its ctx ends.
// A session has at most two such goroutines, one sending and one waiting
// to send the next batch, which every caller until then joins.
func (m *Manager) keepAlive(ctx context.Context, s *session) (int64, error) {
	s.mu.Lock()
	k := s.pending
	first := k == nil
	if first {
		k = &keepAlive{done: make(chan struct{})}
		s.pending = k
	}
	s.mu.Unlock()
	if first {
		// Sent on its own, so that this caller too stops waiting when its
		// ctx ends; at most one batch waits for the one in flight.
		m.sends.Go(func() {
			s.send.Lock()
			s.mu.Lock()
			s.pending = nil // callers from now on join the next batch
			s.mu.Unlock()
			rctx, cancel := context.WithTimeout(m.stop, m.reqTimeout)
			resp, err := m.cli.KeepAliveOnce(rctx, s.id)
			cancel()
			s.send.Unlock()
			if err == nil {
				k.ttl = resp.TTL
			}
			k.err = err
			close(k.done)
		})
	}
	select {
	case <-k.done:
		return k.ttl, k.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// renewSession renews the leases ls, all carried by s, into out (by the
// indexes idx of ls in the caller's slice).
func (m *Manager) renewSession(ctx context.Context, s *session, ls []lease.Job, idx []int, out []lease.Renewal) {
	const op = "renew job lease"
	m.deleteStray(ctx, s)
	ttl, err := m.keepAlive(ctx, s)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		m.expired(s)
	}
	if err == nil && m.scrubDue(s) {
		m.scrubSession(ctx, s)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range idx {
		l := ls[i]
		switch h, ok := s.held[l.Job]; {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || s.dead:
			out[i].Err = fmt.Errorf("%w: job %q: the lease of epoch %d expired with its holder's etcd lease", lease.ErrLost, l.Job, l.Epoch)
		case err != nil:
			out[i].Err = m.opError(ctx, op, l.Job, err)
		case !ok || h.epoch != l.Epoch:
			out[i].Err = fmt.Errorf("%w: job %q: the lease of epoch %d was released, or its key deleted", lease.ErrLost, l.Job, l.Epoch)
		default:
			l.TTL = time.Duration(ttl) * time.Second
			out[i].Job = l
		}
	}
}

func (m *Manager) scrubDue(s *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.scrub) >= m.scrubEvery
}

// scrubSession drops from s every job key that etcd no longer has with s's
// lease, put before the scrub was sent: a key deleted by hand.
func (m *Manager) scrubSession(ctx context.Context, s *session) {
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
	defer cancel()
	resp, err := m.cli.TimeToLive(rctx, s.id, clientv3.WithAttachedKeys())
	if err != nil {
		m.log.Debug("listing the holder's job keys failed; trying again at the next renewal", "holder", s.key.holder, "err", err)
		return
	}
	attached := make(map[string]bool, len(resp.Keys))
	for _, k := range resp.Keys {
		attached[string(k)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrub = sent
	if resp.TTL <= 0 {
		return // expired meanwhile: the next keep-alive says so
	}
	for job, h := range s.held {
		if !attached[m.jobKey(job)] && h.put.Before(sent) {
			delete(s.held, job)
			m.log.Warn("a job lease's key was deleted outside slicerd; the job is lost", "job", job, "holder", s.key.holder, "epoch", h.epoch)
		}
	}
}

// forget takes job's key out of s's held keys, and when del is set, keeps
// it to delete: a Release whose delete failed, or an Acquire that put the
// key but could not renew the lease, must not leave a key that the
// holder's other jobs keep alive.
func (s *session) forget(job string, epoch uint64, del bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.held[job]; ok && h.epoch == epoch {
		delete(s.held, job)
	}
	if del && !s.dead {
		s.stray[job] = epoch
	}
}

// deleteStray deletes, fenced, the keys s keeps to delete.
func (m *Manager) deleteStray(ctx context.Context, s *session) {
	s.mu.Lock()
	if len(s.stray) == 0 {
		s.mu.Unlock()
		return
	}
	stray := maps.Clone(s.stray)
	s.mu.Unlock()
	for job, epoch := range stray {
		rctx, cancel := context.WithTimeout(ctx, m.reqTimeout)
		_, err := m.cli.Txn(rctx).If(m.fence(lease.Job{Job: job, Epoch: epoch})).Then(clientv3.OpDelete(m.jobKey(job))).Commit()
		cancel()
		if err != nil {
			return // etcd does not answer: the keep-alive will say more
		}
		s.mu.Lock()
		if s.stray[job] == epoch {
			delete(s.stray, job)
		}
		s.mu.Unlock()
	}
}

var _ lease.ReleaseWatcher = (*Manager)(nil)

// WatchReleases implements lease.ReleaseWatcher with one etcd watch of the
// deletions under the lease keys: a job key is deleted when its lease is
// released or expires. The watch also sees readers' keys go (a Slicelet's
// Unread, a reader's expiry), which it skips.
func (m *Manager) WatchReleases(ctx context.Context, watching func(), ended func(job string)) error {
	prefix := m.store.AllLeaseKeys()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range m.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: watch of the job leases: %w", lease.ErrUnavailable, err)
		}
		if resp.Created {
			watching()
		}
		for _, ev := range resp.Events {
			if job, ok := strings.CutSuffix(strings.TrimPrefix(string(ev.Kv.Key), prefix), "/job"); ok && !strings.Contains(job, "/") {
				ended(job)
			}
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if m.closed.Load() {
		return fmt.Errorf("%w: watch of the job leases", lease.ErrClosed)
	}
	return fmt.Errorf("%w: etcd ended the watch of the job leases", lease.ErrUnavailable)
}

// begin notes an Acquire of job under way on s; the function it returns
// ends it.
func (s *session) begin(job string) func() {
	s.mu.Lock()
	s.acquiring[job]++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.acquiring[job]--; s.acquiring[job] <= 0 {
			delete(s.acquiring, job)
		}
		s.mu.Unlock()
	}
}

// ownOrphan reports whether job's key of epoch, found carried by s's
// lease by an Acquire of job (the only one under way), is held by no
// lease of this manager: put by an Acquire whose answer was lost, or a
// stray not deleted yet. Left there, the renewals of the holder's other
// jobs would keep it alive for ever, and the job would have no holder.
func (s *session) ownOrphan(job string, epoch uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.acquiring[job] > 1 {
		return false
	}
	h, ok := s.held[job]
	return !ok || h.epoch != epoch
}
