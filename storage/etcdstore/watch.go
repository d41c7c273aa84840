package etcdstore

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/assign"
)

// Watch backoff after a failed attempt to (re)start a watch.
const (
	watchMinBackoff = 100 * time.Millisecond
	watchMaxBackoff = 5 * time.Second
)

// Watch implements storage.Watcher with an etcd watch on the job's keys
// (every job's when job is ""). It starts from the revision current when
// Watch returns, so a change committed after that is never missed; when
// etcd drops the watch (history compacted, leader lost) it restarts at the
// latest revision and delivers every watched job, since it cannot tell
// which changed: every stored job and every deleted one (the names under
// deleted/), so that a deletion made meanwhile is not missed; a watch of
// one job delivers that job. Pinning the start is one read, so Watch itself may take up
// to the request timeout when etcd does not answer; the watch then starts
// with such a full delivery once etcd is back. The goroutine behind it ends
// when ctx ends or the store is closed, and Close waits for it.
func (s *Store) Watch(ctx context.Context, job string) <-chan string {
	out := make(chan string)
	if job != "" && assign.ValidateJobName(job) != nil {
		close(out)
		return out
	}
	prefix := s.keys.jobs()
	if job != "" {
		prefix = s.keys.job(job)
	}
	// Pin the start before returning; if etcd is unreachable, the watch
	// catches up with a full resync once it is back.
	var rev int64
	if !s.closed.Load() {
		rctx, cancel := s.withTimeout(ctx)
		if resp, err := s.cli.Get(rctx, s.keys.meta(), clientv3.WithCountOnly()); err == nil {
			rev = resp.Header.Revision
		}
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		close(out)
		return out
	}
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		defer close(out)
		w := watch{s: s, job: job, prefix: prefix, out: out, pending: map[string]bool{}}
		w.run(ctx, rev)
	}()
	return out
}

// watch is one Watch's state, owned by its goroutine.
type watch struct {
	s      *Store
	job    string // "" for every job
	prefix string
	out    chan<- string

	// pending holds the names not yet delivered, in order, once each.
	order   []string
	pending map[string]bool
}

func (w *watch) add(name string) {
	if !w.pending[name] {
		w.pending[name] = true
		w.order = append(w.order, name)
	}
}

// run watches from rev+1 (rev 0: unknown, resync first) until ctx ends or
// the store closes.
func (w *watch) run(ctx context.Context, rev int64) {
	backoff := watchMinBackoff
	resync := rev == 0
	for {
		if resync {
			r, err := w.resync(ctx)
			if err != nil {
				w.s.log.Debug("watch: cannot read the store to resume; retrying", "prefix", w.prefix, "backoff", backoff, "err", err)
				if !w.sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, watchMaxBackoff)
				continue
			}
			rev, resync, backoff = r, false, watchMinBackoff
		}
		var ok bool
		if rev, ok = w.follow(ctx, rev); !ok {
			return
		}
		resync = true
	}
}

// resync queues every watched job, stored or deleted, and returns the
// revision it listed the stored ones at. The deleted ones are listed
// after: one deleted since is delivered by the watch from that revision
// anyway.
func (w *watch) resync(ctx context.Context) (int64, error) {
	rctx, cancel := w.s.withTimeout(ctx)
	defer cancel()
	names, rev, err := w.s.jobs(rctx, w.prefix)
	if err != nil {
		return 0, err
	}
	if w.job != "" {
		names = []string{w.job}
	} else {
		deleted, err := w.s.deletedJobs(rctx)
		if err != nil {
			return 0, err
		}
		names = append(names, deleted...)
	}
	for _, n := range names {
		w.add(n)
	}
	return rev, nil
}

// follow runs one etcd watch from rev+1, delivering pending names as the
// receiver takes them. It returns false when the watch should end, and
// true when etcd dropped it and it must resume after a resync.
func (w *watch) follow(ctx context.Context, rev int64) (int64, bool) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := w.s.cli.Watch(clientv3.WithRequireLeader(wctx), w.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var (
			send  chan<- string
			first string
		)
		if len(w.order) > 0 {
			send, first = w.out, w.order[0]
		}
		select {
		case <-ctx.Done():
			return rev, false
		case <-w.s.closing:
			return rev, false
		case send <- first:
			delete(w.pending, first)
			w.order = w.order[1:]
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return rev, false
				}
				w.s.log.Debug("watch: etcd closed the watch; resuming", "prefix", w.prefix)
				return rev, true
			}
			if err := resp.Err(); err != nil {
				w.s.log.Info("watch: etcd dropped the watch; resuming with every job marked changed", "prefix", w.prefix, "err", err)
				return rev, true
			}
			for _, ev := range resp.Events {
				job, _, err := w.s.keys.jobOf(ev.Kv.Key)
				if err != nil {
					continue
				}
				w.add(job)
				rev = max(rev, ev.Kv.ModRevision)
			}
		}
	}
}

// sleep waits d unless ctx ends or the store closes first.
func (w *watch) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-w.s.closing:
		return false
	case <-t.C:
		return true
	}
}
