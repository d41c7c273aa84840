package assigner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// ahead is the generation the job's next commit must be above when
	// the current one is not: the highest a live task reported holding in
	// the current assignment's incarnation above the store's, or the one
	// this Assigner held when its store went back; otherContent is the
	// current assignment when a task reported holding its generation with
	// other content (see ahead.go). Guarded by Assigner.mu.
	ahead        uint64
	otherContent *assign.Assignment
	// checked is the current assignment when the store, read for a
	// task's report of its generation with other content, had the
	// task's: such reports of it are not checked again (noteHeld).
	// Guarded by Assigner.mu.
	checked *assign.Assignment
	// sum is api.Checksum of the current assignment, computed for the
	// first load report of its generation (checksumOf). Guarded by
	// Assigner.mu.
	sum *assignmentSum
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

// hasLiveTask reports whether a task of job is alive in gossip: in the
// membership's index for the current version or, since the index is
// built from the list as it was when the version last moved, in gossip's
// own list. A job's first task is in the list a moment before its member
// event moves the version, and a subscriber or a caller that asks for the
// job in that moment finds it rather than an unknown job.
//
// Reading gossip's own list parses every member (milliseconds in a
// cluster of thousands), for a name any caller may make up: it is read at
// most freshReadsPerSecond times a second (freshReadBurst in a row), and
// beyond that the index alone answers, which only a task whose event is
// still on its way can be missing from.
func (a *Assigner) hasLiveTask(job string) bool {
	if len(a.liveNamesNow(job)) > 0 {
		return true
	}
	return a.freshReads.Allow() && len(a.liveTaskNames(job)) > 0
}

// Bounds of hasLiveTask's reads of gossip's own list.
const (
	freshReadsPerSecond = 20
	freshReadBurst      = 40
)

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
		if !a.hasLiveTask(name) {
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
// it, and load reports of departed tasks are left for pruneLoads. The
// load figures come from the job's load view (loadView), computed at most
// once per viewMaxAge.
func (a *Assigner) jobInfo(j *assignerJob) *slicerv1.JobInfo {
	a.mu.Lock()
	cfg, configured := j.cfg, j.configured
	a.mu.Unlock()
	info := &slicerv1.JobInfo{Name: j.name, Config: api.ConfigToProto(cfg), Configured: configured,
		PreferredAssigner: a.leader.PreferredNow(j.name)}
	if configured {
		info.ConfigVersion = storage.ConfigVersion(cfg)
	}
	live := a.tasksOf(j.name, true)
	for _, t := range cfg.Controls(live) {
		info.LiveTasks = append(info.LiveTasks, &slicerv1.Task{Name: t.Name, Address: t.Addr, Capacity: t.Capacity,
			MemoryLimit: uint64(t.MemoryLimit), Draining: t.Draining, Cordoned: t.Cordoned})
	}
	v := a.views.get(j.name, j.pub.Current(), func(cur *assign.Assignment) *loadView { return a.loadView(j.name, cur, live) })
	info.TotalLoad = v.total
	info.ReportingTasks = v.reporting
	if v.version.Generation != 0 {
		info.Generation = v.version.Generation
		info.Imbalance = v.imbalance
		info.TaskLoads = v.taskLoads
	}
	return info
}

// loadView is the load-derived part of a job's JobInfo: what decisions
// see, reported even while load balancing is off so an operator can tell
// whether it is needed. Its TaskLoads are shared by the answers it is
// served in, which only read them.
type loadView struct {
	at time.Time // when it was computed
	// version is the assignment it describes (the zero Version for none):
	// its version, not the assignment, so that a view nobody asks for
	// again does not keep a generation the job has left behind.
	version   assign.Version
	total     float64
	reporting uint32
	imbalance float64
	taskLoads []*slicerv1.TaskLoad
}

// loadView computes job's view under cur, the assignment it serves now,
// with live its alive tasks.
func (a *Assigner) loadView(job string, cur *assign.Assignment, live []assign.Task) *loadView {
	load := a.jobLoad(job)
	v := &loadView{version: cur.Version(), total: load.Total(),
		reporting: uint32(a.loads.reportingAmong(job, a.liveNamesNow(job)))}
	if cur != nil {
		loads, held := a.taskLoadsOf(job, cur, load, true)
		_, v.imbalance = assign.HottestOf(cur, loads, live)
		v.taskLoads = make([]*slicerv1.TaskLoad, 0, len(cur.Tasks))
		for i, l := range loads {
			v.taskLoads = append(v.taskLoads, &slicerv1.TaskLoad{Task: cur.Tasks[i].Name, Load: l, Bytes: held[i]})
		}
	}
	return v
}

// viewMaxAge is how long a job's load view is served before it is
// computed again. Merging a job's reports and weighing its assignment
// with them costs an Assigner about 0.22 s for a job of 10,000 tasks
// (BenchmarkGetJob), and GetJob and ListJobs (the web UI's every
// refresh, for every page open), and every metrics scrape, read it: each
// job's costs at most one such computation a second, however many ask.
const viewMaxAge = time.Second

// loadViews holds each job's newest load view. Callers asking for a job
// whose view is being computed wait for that one rather than computing
// another.
type loadViews struct {
	now      func() time.Time // time.Now when nil; tests set it
	computed atomic.Uint64    // views computed
	mu       sync.Mutex
	views    map[string]*viewSlot
}

// viewSlot is one job's view; mu is held while it is computed.
type viewSlot struct {
	mu sync.Mutex
	v  *loadView
}

// get returns job's view under cur: the one held, when it describes
// cur's version and is younger than viewMaxAge, else one compute makes
// (and holds).
func (vs *loadViews) get(job string, cur *assign.Assignment, compute func(*assign.Assignment) *loadView) *loadView {
	vs.mu.Lock()
	if vs.views == nil {
		vs.views = make(map[string]*viewSlot)
	}
	slot := vs.views[job]
	if slot == nil {
		slot = &viewSlot{}
		vs.views[job] = slot
	}
	vs.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	now := time.Now()
	if vs.now != nil {
		now = vs.now()
	}
	if v := slot.v; v != nil && v.version == cur.Version() && now.Sub(v.at) >= 0 && now.Sub(v.at) < viewMaxAge {
		return v
	}
	v := compute(cur)
	v.at = now
	vs.computed.Add(1)
	slot.v = v
	return v
}

// forget drops job's view (it was deleted).
func (vs *loadViews) forget(job string) {
	vs.mu.Lock()
	delete(vs.views, job)
	vs.mu.Unlock()
}
