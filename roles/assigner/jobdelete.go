package assigner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
)

// Deleting a job. Jobs come into existence from gossip (a live task that
// names the job) or from SetJobConfig, so a job with a live task cannot be
// deleted: its preferred Assigner would create it again at the next
// membership change, so the deletion would only reset its configuration
// and churn its assignment. DeleteJob therefore refuses such a job with
// FAILED_PRECONDITION naming the tasks. A job created again later
// continues above the generation it was deleted at (the store remembers
// it), so clients that still hold the old assignment take the new one.
//
// The store is the truth every role follows: a job the store does not
// hold exists only while a task of it is alive in gossip (see job), so a
// task that failed or left, which serf lists for hours until it reaps it,
// makes no job known, and an Assigner needs no memory of deletions for
// them. Once the store has forgotten the job, so does every role, within
// the time it takes the store's watch (or, without one, the standby poll)
// to report it: the Assigner that deleted it drops the job's state
// (assignment, configuration, load reports, preference, adoption, lease
// and any pending make-before-break step) and ends its streams with
// NOT_FOUND; other Assigners do the same when they read the record gone
// (refresh), whether the job had an assignment or only a configuration;
// Distributors drop their cache when the Assigner answers NOT_FOUND, and
// Backups when the store does. A store read begun before the deletion
// cannot bring the job back: job reads again when a job was forgotten
// while it read. Nothing is remembered per deleted job, so an Assigner's
// memory follows the jobs it serves.

// maxListedTasks bounds the live tasks named in a refusal.
const maxListedTasks = 10

// DeleteJob implements slicerv1connect.JobServiceHandler; see the proto
// for what callers see. Who may call it: an admin only. It costs at most
// three store reads and one store write (etcd retries the write, up to ten
// times, only while commits race it), plus a forward to the job's
// preferred Assigner when that is another one, and is recorded by an
// audit line.
func (a *Assigner) DeleteJob(ctx context.Context, req *connect.Request[slicerv1.DeleteJobRequest]) (*connect.Response[slicerv1.DeleteJobResponse], error) {
	if forwardedWrite(req.Header()) {
		return a.deleteJob(ctx, req)
	}
	name := req.Msg.GetJob()
	before := a.auditState(ctx, name)
	resp, err := a.deleteJob(ctx, req)
	e := auditEntry{procedure: slicerv1connect.JobServiceDeleteJobProcedure, job: name, caller: callerOf(ctx, req), before: before, err: err}
	if err == nil {
		e.after = "deleted"
	}
	a.audit(e)
	return resp, err
}

func (a *Assigner) deleteJob(ctx context.Context, req *connect.Request[slicerv1.DeleteJobRequest]) (*connect.Response[slicerv1.DeleteJobResponse], error) {
	name := req.Msg.GetJob()
	if err := assign.ValidateJobName(name); err != nil {
		return nil, rpc.ToConnect(err)
	}
	if p, elsewhere := a.forwardTo(ctx, name, req.Header()); elsewhere {
		return a.forwardDelete(ctx, p, req)
	}
	// Ordered against SetJobConfig, so a configuration is never stored
	// for a job whose deletion is under way, nor lost after it.
	a.setConfig.Lock()
	defer a.setConfig.Unlock()
	// Gossip's own list, not the membership's index for the current
	// version: a task that joined a moment before its member event moved
	// the version keeps its job.
	if live := jobTasks(a.members.Peers(), name, true); len(live) > 0 {
		return nil, rpc.ToConnect(liveTasksError(name, live))
	}
	_, held := a.known(name)
	j, err := a.peek(ctx, name)
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	info := a.jobInfo(j)
	err = a.store.Delete(ctx, name)
	switch {
	case errors.Is(err, storage.ErrNotFound) && held:
		// Known here only (from gossip), never stored: forgetting it is
		// the whole deletion.
	case errors.Is(err, storage.ErrNotFound):
		return nil, rpc.ToConnect(fmt.Errorf("%w %q: nothing is stored for it and no task of it is alive; it was deleted already, or never existed",
			rpc.ErrUnknownJob, name))
	case err != nil:
		return nil, rpc.ToConnect(fmt.Errorf("delete job %q: %w", name, err))
	}
	a.forgetJob(name)
	a.log.Info("job deleted", "job", name, "generation", info.GetGeneration())
	return connect.NewResponse(&slicerv1.DeleteJobResponse{Job: info}), nil
}

// forwardDelete sends a deletion on to the job's preferred Assigner and,
// once it succeeded, forgets the job here too, without waiting for the
// store to report it.
func (a *Assigner) forwardDelete(ctx context.Context, r lease.Route, req *connect.Request[slicerv1.DeleteJobRequest]) (*connect.Response[slicerv1.DeleteJobResponse], error) {
	resp, err := forward[slicerv1.DeleteJobRequest, slicerv1.DeleteJobResponse](ctx, a, r,
		slicerv1connect.JobServiceDeleteJobProcedure, "a deletion", req.Msg.GetJob(), req.Msg)
	if err != nil {
		return nil, err
	}
	a.forgetJob(req.Msg.GetJob())
	a.log.Info("job deletion forwarded to the preferred assigner", "job", req.Msg.GetJob(), "preferred", r.Peer.Name)
	return resp, nil
}

// liveTasksError refuses to delete job while tasks of it are alive.
func liveTasksError(job string, live []assign.Task) error {
	names := make([]string, 0, min(len(live), maxListedTasks))
	for _, t := range live[:min(len(live), maxListedTasks)] {
		names = append(names, t.Name)
	}
	list := strings.Join(names, ", ")
	if len(live) > maxListedTasks {
		list += fmt.Sprintf(" and %d more", len(live)-maxListedTasks)
	}
	return fmt.Errorf("%w: job %q has %d live task(s) in gossip (%s), which would create it again at once; stop them, wait until gossip sees them leave or fail, and delete the job again",
		rpc.ErrLiveTasks, job, len(live), list)
}

// deletedError ends the streams of a deleted job.
func deletedError(job string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("%w %q: the job was deleted", rpc.ErrUnknownJob, job))
}

// forgetJob drops everything this Assigner holds of a deleted job, stops
// the deadline of its pending make-before-break step, and ends its
// streams with NOT_FOUND.
func (a *Assigner) forgetJob(name string) {
	a.mu.Lock()
	j := a.jobs[name]
	if j != nil {
		setPending(j, nil)
	}
	delete(a.jobs, name)
	delete(a.replicatedWarned, name)
	delete(a.retakes, name)
	a.metrics.forget(name)
	a.forgets++
	a.mu.Unlock()
	a.leader.Forget(context.Background(), name)
	a.loads.mu.Lock()
	delete(a.loads.jobs, name)
	delete(a.loads.nudged, name)
	delete(a.loads.decided, name)
	delete(a.loads.reported, name)
	delete(a.loads.pruned, name)
	a.loads.mu.Unlock()
	a.loadHistory.forget(name)
	a.views.forget(name)
	if j != nil {
		j.pub.End(deletedError(name))
	}
}

// forgetVanished forgets a job whose stored record refresh found gone: it
// was deleted, whether this Assigner served an assignment of it or only
// its configuration. A job known only from a live task, which the store
// does not hold before its first commit, is kept.
func (a *Assigner) forgetVanished(name string) {
	a.mu.Lock()
	j := a.jobs[name]
	a.mu.Unlock()
	if j == nil || (j.pub.Current() == nil && len(a.tasksOf(name, true)) > 0) {
		return
	}
	a.log.Info("the job's stored record is gone: it was deleted; forgetting it", "job", name)
	a.forgetJob(name)
}

// dropLease gives up the lease of a job the Assigner took for a live task
// that is gone before the job was stored: the job does not exist (job).
func (a *Assigner) dropLease(ctx context.Context, name string) {
	if _, held := a.leader.Held(name); held {
		a.log.Debug("the job's tasks are gone and the store does not hold it; releasing its lease", "job", name)
		a.leader.Forget(ctx, name)
	}
}
