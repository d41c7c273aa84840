package distributor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
)

// Backup is the Backup Distributor (paper §4.3): the read API served
// straight from the assignment store. It is deliberately small and shares
// no logic with the Assigner or Distributor, so a fault in theirs cannot
// take it down too. Streams follow the store's commits when it offers a
// watch (storage.Watcher: etcd) and poll it otherwise (bbolt).
//
// A job the store does not hold is NotFound, "no stored assignment yet":
// a Backup on an empty store answers that for every job, safely, until an
// Assigner commits one.
type Backup struct {
	log      *slog.Logger
	store    storage.Store
	poll     time.Duration
	stopping <-chan struct{}

	mu      sync.Mutex
	pollers map[string]*poller // by job
	wg      sync.WaitGroup     // pollers
	closed  bool               // wait was called: no new pollers
}

// NewBackup returns a Backup serving from store, polling it every poll
// when it cannot watch it; stopping is closed when the agent begins to
// shut down.
func NewBackup(log *slog.Logger, store storage.Store, poll time.Duration, stopping <-chan struct{}) *Backup {
	return &Backup{log: log.With("role", "backup"), store: store, poll: poll, stopping: stopping, pollers: map[string]*poller{}}
}

// LogJobs says at start what the backup has to serve, and warns when that
// is nothing yet. The Agent calls it from Run.
func (b *Backup) LogJobs(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	jobs, err := b.store.Jobs(ctx)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		// The agent is stopping; nothing to report.
	case err != nil:
		b.log.Warn("cannot list the store's jobs; the backup will answer from the store once it can read it", "err", err)
	case len(jobs) == 0:
		b.log.Info("store has no jobs yet; the backup answers NotFound (no stored assignment yet) for every job until an assigner commits one")
	default:
		_, watched := b.store.(storage.Watcher)
		b.log.Info("backup serving stored jobs", "jobs", len(jobs), "follows_commits", watched)
	}
}

func (b *Backup) read(ctx context.Context, job string) (*slicerv1.Assignment, error) {
	if err := rpc.ValidateJob(job); err != nil {
		return nil, err
	}
	a, err := b.load(ctx, job)
	if err != nil {
		return nil, err
	}
	return api.ToProto(a), nil
}

// load reads job's current assignment from the store, with the errors a
// client is sent.
func (b *Backup) load(ctx context.Context, job string) (*assign.Assignment, error) {
	rec, err := storage.LoadCurrent(ctx, b.store, job)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, rpc.ToConnect(fmt.Errorf("%w %q: it has no stored assignment yet; the backup serves only what an assigner has committed to the store", rpc.ErrUnknownJob, job))
	}
	if errors.Is(err, storage.ErrUnavailable) {
		// A shared store that does not answer: clients should try elsewhere.
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	return rec.Current, nil
}

// GetAssignment implements slicerv1connect.BackupServiceHandler.
func (b *Backup) GetAssignment(ctx context.Context, req *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	a, err := b.read(ctx, req.Msg.GetJob())
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("job "+req.Msg.GetJob()+" has no stored assignment yet"))
	}
	return connect.NewResponse(&slicerv1.GetAssignmentResponse{Assignment: a}), nil
}

// WatchAssignment implements slicerv1connect.BackupServiceHandler. All
// watchers of a job share one poller, which reads and decodes the store once
// per tick or commit and publishes to every stream through a latest; a slow
// stream skips to the newest assignment.
func (b *Backup) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	job := req.Msg.GetJob()
	if err := rpc.ValidateJob(job); err != nil {
		return err
	}
	l, leave, err := b.join(job)
	if err != nil {
		return err
	}
	defer leave()
	return l.Serve(ctx, b.stopping, req, stream, nil)
}

// poller reads one job's assignment from the store for all its watchers.
type poller struct {
	l        *watch.Latest
	watchers int
	cancel   context.CancelFunc
}

// join registers a watcher of job, starting the job's poller if it is the
// first; leave unregisters it and stops the poller with the last watcher.
func (b *Backup) join(job string) (*watch.Latest, func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stopping:
		return nil, nil, connect.NewError(connect.CodeUnavailable, rpc.ErrShuttingDown)
	default:
	}
	if b.closed {
		return nil, nil, connect.NewError(connect.CodeUnavailable, rpc.ErrShuttingDown)
	}
	p := b.pollers[job]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &poller{l: watch.New(), cancel: cancel}
		b.pollers[job] = p
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.pollJob(ctx, job, p)
		}()
	}
	p.watchers++
	return p.l, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		p.watchers--
		if p.watchers == 0 {
			p.cancel()
			if b.pollers[job] == p {
				delete(b.pollers, job)
			}
		}
	}, nil
}

// pollJob reads job on every tick and store change until ctx ends or the
// Backup stops. A read error reaches the watchers that have no assignment
// yet; those that have one keep it and wait for the next good read.
func (b *Backup) pollJob(ctx context.Context, job string, p *poller) {
	defer p.cancel()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-b.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	// Start following before the first read, so no commit falls between.
	var (
		changed <-chan string
		tick    <-chan time.Time
	)
	if w, ok := b.store.(storage.Watcher); ok {
		changed = w.Watch(ctx, job)
	} else {
		ticker := time.NewTicker(b.poll)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		rec, err := b.load(ctx, job)
		switch {
		case ctx.Err() != nil:
			return
		case connect.CodeOf(err) == connect.CodeNotFound && p.l.Current() != nil:
			// A stored assignment vanished: the job was deleted.
			b.log.Info("the job's stored record is gone: it was deleted; ending its streams", "job", job)
			b.forget(job, p)
			p.l.End(err)
			return
		case err != nil:
			p.l.Fail(err)
		case rec != nil:
			p.l.Publish(rec, time.Time{}) // the store keeps no commit time
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case _, ok := <-changed:
			if !ok {
				if ctx.Err() == nil {
					p.l.Fail(connect.NewError(connect.CodeUnavailable, rpc.ErrShuttingDown))
					b.forget(job, p)
				}
				return
			}
		}
	}
}

// forget drops p from the pollers so the next watcher of job starts afresh.
func (b *Backup) forget(job string, p *poller) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pollers[job] == p {
		delete(b.pollers, job)
	}
}

// Pollers is the number of jobs whose store poller runs.
func (b *Backup) Pollers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pollers)
}

// WaitPollers returns when every poller started so far has stopped,
// without closing the Backup to new ones.
func (b *Backup) WaitPollers() { b.wg.Wait() }

// Wait returns when every poller has stopped; the Agent calls it after
// closing stopping.
func (b *Backup) Wait() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
