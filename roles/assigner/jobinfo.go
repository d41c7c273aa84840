package assigner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
)

// assignerJob is an Assigner's state of one job: its configuration, the
// newest assignment it serves, and whether it generates the job.
type assignerJob struct {
	name       string
	cfg        assign.Config
	configured bool
	pub        *watch.Latest
	// committed is when this Assigner last committed an assignment of the
	// job (zero if never); load measured before it is partly under the
	// previous assignment. Guarded by Assigner.mu.
	committed time.Time
	// takenOver is the job lease epoch under which this Assigner last
	// committed its takeover generation: it generates the job while it
	// holds the lease at that epoch. Guarded by Assigner.mu.
	takenOver uint64
	// cfgSet counts the configurations SetJobConfig applied; a refresh
	// that sees it change while it reads the store read too early, and
	// reads again. Guarded by Assigner.mu.
	cfgSet uint64
	// pending is the second step of a make-before-break decision (see
	// handoff.go). Guarded by Assigner.mu.
	pending *pendingFlip
	// owners indexes the assignments the job's load reports are cut to
	// (keepOwned).
	owners ownerIndexes
}

// job returns the state of a job: this Assigner's own, or one built from
// the job's stored record, or from the defaults when the store does not
// hold the job but a task of it is alive in gossip. It returns
// rpc.ErrUnknownJob when neither holds the job: a job the store does not
// hold exists only while a task names it, so neither a deleted job nor
// its failed tasks lingering in gossip bring it back.
//
// The store is read without mu, so a deletion may be forgotten here
// (forgetJob) between the read and the job's insertion; what was read may
// then predate the deletion, and the store is read again. Each read again
// follows a forgotten job, so this ends once deletions stop racing it.
func (a *Assigner) job(ctx context.Context, name string) (*assignerJob, error) {
	for {
		if j, ok := a.known(name); ok {
			return j, nil
		}
		a.mu.Lock()
		forgets := a.forgets
		a.mu.Unlock()
		j, rec, err := a.read(ctx, name)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		if existing, ok := a.jobs[name]; ok {
			a.mu.Unlock()
			return existing, nil
		}
		if a.forgets != forgets {
			a.mu.Unlock()
			continue
		}
		if rec.Current == nil && !rec.Configured && len(a.jobs) >= a.maxJobs {
			a.mu.Unlock()
			return nil, a.tooManyJobs(name) // stored jobs are always served
		}
		a.jobs[name] = j
		a.mu.Unlock()
		if rec.Current != nil {
			a.log.Info("carrying stored assignment forward", "job", name, "generation", rec.Current.Generation,
				"tasks", len(rec.Current.Tasks), "slices", len(rec.Current.Slices))
		}
		return j, nil
	}
}

// peek returns the state of a job for reading: this Assigner's own when
// it has the job, else one read from the store (or gossip) and not kept,
// so that a read never adds a job. It returns rpc.ErrUnknownJob when neither
// the store nor a live task knows the job.
func (a *Assigner) peek(ctx context.Context, name string) (*assignerJob, error) {
	if j, ok := a.known(name); ok {
		return j, nil
	}
	j, _, err := a.read(ctx, name)
	return j, err
}

// known returns the job's state if this Assigner has it.
func (a *Assigner) known(name string) (*assignerJob, bool) {
	if err := assign.ValidateJobName(name); err != nil {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	j, ok := a.jobs[name]
	return j, ok
}

// read builds a job's state from its stored record, or from the defaults
// when the store does not hold it and a task of it is alive in gossip.
func (a *Assigner) read(ctx context.Context, name string) (*assignerJob, storage.Record, error) {
	if err := assign.ValidateJobName(name); err != nil {
		return nil, storage.Record{}, err
	}
	rec, err := storage.LoadCurrent(ctx, a.store, name)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		if len(a.tasksOf(name, true)) == 0 {
			return nil, storage.Record{}, rpc.UnknownJob(name)
		}
		rec = storage.Record{Job: name, Config: assign.DefaultConfig()}
	case err != nil:
		return nil, storage.Record{}, fmt.Errorf("assigner: load job %q: %w", name, err)
	}
	j := &assignerJob{name: name, cfg: rec.Config, configured: rec.Configured, pub: watch.New()}
	if rec.Current != nil {
		j.pub.Publish(rec.Current, time.Time{}) // read from the store: commit time unknown
	}
	return j, rec, nil
}

// jobInfo describes a job for JobService. It only reads: the preferred
// Assigner is the one this Assigner would choose now, without remembering
// it, and load reports of departed tasks are left for pruneLoads.
func (a *Assigner) jobInfo(j *assignerJob) *slicerv1.JobInfo {
	a.mu.Lock()
	cfg, configured := j.cfg, j.configured
	a.mu.Unlock()
	info := &slicerv1.JobInfo{Name: j.name, Config: api.ConfigToProto(cfg), Configured: configured,
		PreferredAssigner: a.leader.PreferredNow(j.name)}
	live := a.tasksOf(j.name, true)
	for _, t := range cfg.Controls(live) {
		info.LiveTasks = append(info.LiveTasks, &slicerv1.Task{Name: t.Name, Address: t.Addr, Capacity: t.Capacity,
			MemoryLimit: uint64(t.MemoryLimit), Draining: t.Draining, Cordoned: t.Cordoned})
	}
	// The load view is what decisions see, reported even while load
	// balancing is off so an operator can tell whether it is needed.
	load := a.jobLoad(j.name)
	info.TotalLoad = load.Total()
	info.ReportingTasks = uint32(a.loads.reportingAmong(j.name, a.liveTaskNames(j.name)))
	if cur := j.pub.Current(); cur != nil {
		info.Generation = cur.Generation
		info.Imbalance = assign.ImbalanceWith(cur, load, live)
		held := assign.TaskBytes(cur, load)
		for i, l := range assign.TaskLoads(cur, load) {
			info.TaskLoads = append(info.TaskLoads, &slicerv1.TaskLoad{Task: cur.Tasks[i].Name, Load: l, Bytes: held[i]})
		}
	}
	return info
}
