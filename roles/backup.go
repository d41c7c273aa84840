package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
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
}

func newBackup(cfg Config, store storage.Store, stopping <-chan struct{}) *Backup {
	return &Backup{log: cfg.Logger.With("role", "backup"), store: store, poll: cfg.BackupPollInterval, stopping: stopping}
}

// logJobs says at start what the backup has to serve, and warns when that
// is nothing yet. The Agent calls it from Run.
func (b *Backup) logJobs(ctx context.Context) {
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
	if err := validateJob(job); err != nil {
		return nil, err
	}
	rec, err := b.store.Load(ctx, job)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, toConnect(fmt.Errorf("%w %q: it has no stored assignment yet; the backup serves only what an assigner has committed to the store", ErrUnknownJob, job))
	}
	if errors.Is(err, storage.ErrUnavailable) {
		// A shared store that does not answer: clients should try elsewhere.
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return api.ToProto(rec.Current), nil
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

// WatchAssignment implements slicerv1connect.BackupServiceHandler.
func (b *Backup) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	job := req.Msg.GetJob()
	if err := validateJob(job); err != nil {
		return err
	}
	known := knownVersion(req.Msg)
	// Start following before the first read, so no commit falls between.
	var (
		changed <-chan string
		tick    <-chan time.Time
	)
	if w, ok := b.store.(storage.Watcher); ok {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		changed = w.Watch(wctx, job)
	} else {
		ticker := time.NewTicker(b.poll)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		a, err := b.read(ctx, job)
		if err != nil {
			return err
		}
		if v := (assign.Version{Incarnation: a.GetIncarnation(), Generation: a.GetGeneration()}); a != nil && v.Supersedes(known) {
			if err := stream.Send(&slicerv1.WatchAssignmentResponse{Assignment: a}); err != nil {
				return err
			}
			known = v
		}
		select {
		case <-ctx.Done():
			return nil
		case <-b.stopping:
			return connect.NewError(connect.CodeUnavailable, errShuttingDown)
		case <-tick:
		case _, ok := <-changed:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return connect.NewError(connect.CodeUnavailable, errShuttingDown)
			}
		}
	}
}
