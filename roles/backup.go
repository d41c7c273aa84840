package roles

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/storage"
)

// Backup is the Backup Distributor (paper §4.3): the read API served
// straight from the assignment store. It is deliberately small and shares
// no logic with the Assigner or Distributor, so a fault in theirs cannot
// take it down too. Streams poll the store.
type Backup struct {
	log      *slog.Logger
	store    storage.Store
	poll     time.Duration
	stopping <-chan struct{}
}

func newBackup(cfg Config, store storage.Store, stopping <-chan struct{}) *Backup {
	return &Backup{log: cfg.Logger.With("role", "backup"), store: store, poll: cfg.BackupPollInterval, stopping: stopping}
}

func (b *Backup) read(ctx context.Context, job string) (*slicerv1.Assignment, error) {
	if err := validateJob(job); err != nil {
		return nil, err
	}
	rec, err := b.store.Load(ctx, job)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, toConnect(unknownJob(job))
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
	known := req.Msg.GetKnownGeneration()
	ticker := time.NewTicker(b.poll)
	defer ticker.Stop()
	for {
		a, err := b.read(ctx, req.Msg.GetJob())
		if err != nil {
			return err
		}
		if a != nil && a.GetGeneration() > known {
			if err := stream.Send(&slicerv1.WatchAssignmentResponse{Assignment: a}); err != nil {
				return err
			}
			known = a.GetGeneration()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-b.stopping:
			return connect.NewError(connect.CodeUnavailable, errShuttingDown)
		case <-ticker.C:
		}
	}
}
