package rpc

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
)

var (
	// ErrUnknownJob is returned for a job with no live task, no stored
	// assignment and no configuration.
	ErrUnknownJob = errors.New("rpc: unknown job")
	// ErrNoAssigner means gossip knows no live Assigner to pull a job from.
	ErrNoAssigner = errors.New("rpc: no live assigner")
	// ErrNotMember rejects a load report or a lease call from a task that
	// gossip does not list as an alive member of the job.
	ErrNotMember = errors.New("rpc: task not a live member of the job")
	// ErrLiveTasks refuses to delete a job that still has live tasks.
	ErrLiveTasks = errors.New("rpc: job has live tasks")
	// ErrTooManyJobs refuses a new job over Config.MaxJobs.
	ErrTooManyJobs = errors.New("rpc: too many jobs")
	// ErrTooManyReports refuses a load report over the task's
	// Config.MaxLoadReportsPerSecond.
	ErrTooManyReports = errors.New("rpc: load reports too frequent")
	// ErrNotServing is Agent.Check's answer for an agent that is starting,
	// shutting down or whose gossip has stopped.
	ErrNotServing = errors.New("rpc: agent not serving")
)

// ErrShuttingDown ends the calls and streams of a node that is shutting
// down, as UNAVAILABLE.
var ErrShuttingDown = watch.ErrShuttingDown

// codes maps package sentinels to Connect codes at the RPC edge. The first
// match wins; anything unmatched is Internal.
var codes = []struct {
	err  error
	code connect.Code
}{
	{ErrUnknownJob, connect.CodeNotFound},
	{storage.ErrNotFound, connect.CodeNotFound},
	{assign.ErrInvalidName, connect.CodeInvalidArgument},
	{assign.ErrInvalidConfig, connect.CodeInvalidArgument},
	{assign.ErrInvalidAssignment, connect.CodeInvalidArgument},
	{assign.ErrInvalidLoad, connect.CodeInvalidArgument},
	{ErrNotMember, connect.CodeFailedPrecondition},
	{ErrLiveTasks, connect.CodeFailedPrecondition},
	{watch.ErrTooManyStreams, connect.CodeResourceExhausted},
	{ErrTooManyJobs, connect.CodeResourceExhausted},
	{ErrTooManyReports, connect.CodeResourceExhausted},
	{storage.ErrInvalid, connect.CodeInvalidArgument},
	{storage.ErrConflict, connect.CodeAborted},
	{storage.ErrFenced, connect.CodeAborted},
	{ErrNoAssigner, connect.CodeUnavailable},
	{ErrNotServing, connect.CodeUnavailable},
	{storage.ErrClosed, connect.CodeUnavailable},
	{storage.ErrUnavailable, connect.CodeUnavailable},
	{lease.ErrInvalid, connect.CodeInvalidArgument},
	{lease.ErrRecalled, connect.CodeFailedPrecondition},
	{lease.ErrBusy, connect.CodeFailedPrecondition},
	{lease.ErrOtherProcess, connect.CodeFailedPrecondition},
	{lease.ErrLost, connect.CodeFailedPrecondition},
	{lease.ErrUnavailable, connect.CodeUnavailable},
	{lease.ErrClosed, connect.CodeUnavailable},
	{context.Canceled, connect.CodeCanceled},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded},
}

// ToConnect wraps err with the Connect code its sentinel maps to; an error
// that already carries a code keeps it.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			ce := connect.NewError(c.code, err)
			switch c.err {
			case ErrNotMember:
				ce.Meta().Set(api.RefusalHeader, api.RefusalNotMember)
			case lease.ErrOtherProcess:
				ce.Meta().Set(api.RefusalHeader, api.RefusalOtherProcess)
			}
			return ce
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}

// UnknownJob is the error for a job nobody knows, saying how to make it.
func UnknownJob(job string) error {
	return fmt.Errorf("%w %q: no task of it has joined and nothing is stored for it; "+
		"start a task whose Slicelet names this job, or create it with 'slicerd job set %s'", ErrUnknownJob, job, job)
}

// ValidateJob checks a job name from a request.
func ValidateJob(job string) error {
	return ToConnect(assign.ValidateJobName(job))
}
