package assigner

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/roles/rpc"
)

// A report's window must lie in [minWindowSeconds, maxWindowSeconds]: a
// millisecond keeps rates finite, a day is far beyond any sane window.
const (
	minWindowSeconds = 1e-3
	maxWindowSeconds = 86400
)

// loadReport is one task's latest load report, as a rate per second.
type loadReport struct {
	generation uint64
	window     time.Duration
	rate       assign.Load // load per second, sorted and non-overlapping
	unowned    float64     // unowned load per second
	events     float64     // ReportLoad calls the window's load sums; 0 unknown
	at         time.Time   // when the report arrived
}

// loads holds, per job, the latest report of each task.
type loads struct {
	halfLife time.Duration
	now      func() time.Time

	mu   sync.Mutex
	jobs map[string]map[string]*loadReport // job → task → report
	// warned is when each job/task was last warned about for load on keys
	// it does not serve; guarded by mu.
	warned map[string]time.Time
	// nudged is when a copy of a report of each job last went to its
	// preferred Assigner (nudgeTarget); guarded by mu, dropped with the job.
	nudged  map[string]time.Time
	foreign atomic.Uint64 // reports cut to the task's own keys
	// decided is when each job's last load decision was taken, and
	// reported how many of its tasks have reported since (put, decide);
	// guarded by mu.
	decided  map[string]time.Time
	reported map[string]int
	// pruned is the list of live tasks each job's reports were last
	// pruned against (put); guarded by mu, dropped with the job.
	pruned map[string][]string
	// spacing is the least time between a job's load decisions that a
	// round of reports may ask for: half the rebalance interval.
	spacing time.Duration
}

func newLoads(halfLife, spacing time.Duration) *loads {
	return &loads{halfLife: halfLife, spacing: spacing, now: time.Now, jobs: make(map[string]map[string]*loadReport)}
}

// loadFromProto validates a report and converts it to load per second.
func loadFromProto(m *slicerv1.ReportLoadRequest) (*loadReport, error) {
	if err := assign.ValidateJobName(m.GetJob()); err != nil {
		return nil, err
	}
	if err := assign.ValidateTaskName(m.GetTask()); err != nil {
		return nil, err
	}
	w := m.GetWindowSeconds()
	if !(w >= minWindowSeconds && w <= maxWindowSeconds) { // also rejects NaN
		return nil, fmt.Errorf("%w: window_seconds %g is not in [%g, %d]; report the length of the measurement window in seconds",
			assign.ErrInvalidLoad, w, minWindowSeconds, maxWindowSeconds)
	}
	if inc := m.GetIncarnation(); inc != "" {
		if err := assign.ValidateIncarnation(inc); err != nil {
			return nil, fmt.Errorf("incarnation: %w", err)
		}
	}
	if err := assign.ValidateLoadValue(m.GetUnownedLoad()); err != nil {
		return nil, fmt.Errorf("unowned_load: %w", err)
	}
	l := make(assign.Load, len(m.GetSlices()))
	for i, s := range m.GetSlices() {
		l[i] = assign.LoadEntry{Start: assign.SliceKey(s.GetStart()), End: assign.SliceKey(s.GetEnd()), Load: s.GetLoad(), Bytes: s.GetBytes()}
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("slices: %w", err)
	}
	for i := range l {
		l[i].Load /= w // a rate; bytes are a gauge and stay as reported
	}
	return &loadReport{
		generation: m.GetGeneration(),
		window:     time.Duration(w * float64(time.Second)),
		rate:       l,
		unowned:    m.GetUnownedLoad() / w,
		events:     float64(m.GetEvents()),
	}, nil
}

// imbalance is cur's imbalance under load (assign.Hottest) and, for a
// load-driven decision, what its measurement rests on: how many reports
// (requests) the load of cur's most utilised task sums in its latest
// report, and that task's share of the job's capacity, which the
// sampling noise of the measured imbalance follows (zero when unknown,
// or for another cause). Without cur it is 1 and no evidence.
func (a *Assigner) imbalance(job string, cur *assign.Assignment, load assign.Load, live []assign.Task, why trigger) (imbalance float64, e assign.Evidence) {
	if cur == nil {
		return 1, e
	}
	hot, imbalance := a.hottestOf(job, cur, load, live)
	if why != triggerLoad || hot < 0 {
		return imbalance, e
	}
	a.loads.mu.Lock()
	r := a.loads.jobs[job][cur.Tasks[hot].Name]
	a.loads.mu.Unlock()
	if r != nil {
		e = assign.Evidence{Events: r.events, Share: assign.CapacityShare(cur, live, hot), Tasks: len(cur.Tasks)}
	}
	return imbalance, e
}

// significant reports whether a load-driven decision from cur to next
// is committed: its gain on the imbalance (before to after, under load)
// is more than the sampling noise of the load it was measured on
// (assign.SignificantGain on e), or it relieves a task past its memory
// limit, whatever it does to the imbalance, or it is the job's first
// assignment.
func significant(cur, next *assign.Assignment, load assign.Load, live []assign.Task, before, after float64, e assign.Evidence) bool {
	return cur == nil || assign.SignificantGain(before, after, e) ||
		assign.MemoryOverage(next, load, live) < assign.MemoryOverage(cur, load, live)
}

// futile reports whether no load-driven decision from cur could be
// significant, so that computing one would be work thrown away: even a
// perfectly balanced assignment (imbalance 1, the least there is) would
// not lower cur's imbalance, before, by a significant gain on e, and no
// task of cur is past its memory limit. A job at rest whose imbalance is
// within its measurement's noise of even (one of few requests a window,
// as the demo's) then costs its Assigner a merge of its reports and one
// imbalance an interval rather than a decision.
func futile(cur *assign.Assignment, load assign.Load, live []assign.Task, before float64, e assign.Evidence) bool {
	// 1 less a rounding error: an "after" computed as 0.99999999 must not
	// count as a gain the gate did not see.
	const best = 1 - 1e-9
	return cur != nil && !assign.SignificantGain(before, best, e) && assign.MemoryOverage(cur, load, live) == 0
}

// ReportLoad implements slicerv1connect.LoadServiceHandler: it validates
// the report, checks that gossip lists the task as an alive member of the
// job, and replaces the task's previous report. The report that
// completes a round (every task of the job has reported since its last
// load decision) asks Run for a load decision on the job at once; the
// interval's tick decides the others. A report sent to one
// Assigner only (every_assigner unset) for a job another Assigner is
// preferred for is forwarded to that Assigner.
func (a *Assigner) ReportLoad(ctx context.Context, req *connect.Request[slicerv1.ReportLoadRequest]) (*connect.Response[slicerv1.ReportLoadResponse], error) {
	m := req.Msg
	if err := a.checkReportSize(m.GetJob(), m.GetTask(), len(m.GetSlices())); err != nil {
		return nil, rpc.ToConnect(err)
	}
	r, err := loadFromProto(m)
	if err != nil {
		return nil, rpc.ToConnect(fmt.Errorf("report load from %s/%s: %w", m.GetJob(), m.GetTask(), err))
	}
	// A report sent to every Assigner is kept wherever it arrives: each
	// Assigner then holds the job's whole load, for its views and for the
	// moment it takes the job over. One another Assigner forwarded still
	// tells this one that the sender takes it for the job's Assigner
	// (forwardTo, lease.Leader.Forwarded).
	var nudge lease.Route
	forwarded := req.Header().Get(auth.ForwardedHeader) != ""
	switch {
	case !m.GetEveryAssigner() || forwarded:
		if p, elsewhere := a.forwardTo(ctx, m.GetJob(), req.Header()); elsewhere {
			return a.forwardLoad(ctx, p, req)
		}
	default:
		nudge = a.nudgeTarget(m.GetJob())
	}
	live, err := a.acceptTaskReport(a.reports, "load", m.GetJob(), m.GetTask())
	if err != nil {
		return nil, err
	}
	a.noteHeld(ctx, m.GetJob(), m.GetTask(), r.generation, m.GetIncarnation(), m.GetChecksum())
	a.keepOwned(m.GetJob(), m.GetTask(), r)
	if a.loads.put(m.GetJob(), m.GetTask(), r, live) && a.interval > 0 {
		// Every task has reported since the job's last load decision: it
		// may be decided on now rather than at the next tick.
		select {
		case a.rounds <- m.GetJob():
		default: // the tick decides it
		}
	}
	if nudge.Peer.Name != "" {
		// This Assigner knows no holder of the job and prefers another:
		// a copy of the report goes there, as a forwarded write, so that
		// if that one does not want the job either (their estimates
		// differ) it adopts it rather than leave it to nobody. Its answer
		// changes nothing here: the report is kept.
		if _, err := a.forwardLoad(ctx, nudge, req); err != nil {
			a.log.Debug("passing a load report to the preferred assigner failed", "job", m.GetJob(), "preferred", nudge.Peer.Name, "err", err)
		}
	}
	a.log.Debug("load report", "job", m.GetJob(), "task", m.GetTask(), "generation", r.generation,
		"window", r.window, "slices", len(r.rate), "rate", r.rate.Total(), "unowned_rate", r.unowned,
		"rejected_reports", m.GetRejectedReports())
	return connect.NewResponse(&slicerv1.ReportLoadResponse{KeyringChanged: a.keyringChangedFor(m.GetJob(), m.GetTask())}), nil
}

// acceptTaskReport checks that task is an alive member of job in gossip
// and within its rate of reports of this kind (limits, "load" or
// "readiness"), and returns the job's live task names.
func (a *Assigner) acceptTaskReport(limits *reportLimiter, kind, job, task string) ([]string, error) {
	live, ok := a.liveWith(job, task)
	if !ok {
		return nil, rpc.ToConnect(fmt.Errorf("%w: task %q is not an alive member of job %q in gossip; "+
			"start the task's Slicelet (it joins gossip before reporting) or wait until gossip has seen it join",
			rpc.ErrNotMember, task, job))
	}
	if err := limitReport(limits, kind, job, task); err != nil {
		return nil, rpc.ToConnect(err)
	}
	return live, nil
}

// liveWith returns job's alive task names (liveNamesNow) and whether task
// is one of them. A task not in the current version's index is looked
// for in gossip itself before it is refused: its join may be that far
// ahead of its event.
func (a *Assigner) liveWith(job, task string) ([]string, bool) {
	live := a.liveNamesNow(job)
	if _, ok := slices.BinarySearch(live, task); ok {
		return live, true
	}
	live = a.liveTaskNames(job)
	_, ok := slices.BinarySearch(live, task)
	return live, ok
}

// liveTaskNames lists the names of the job's alive tasks, sorted, read
// from gossip afresh (see liveNamesNow for the kept ones).
func (a *Assigner) liveTaskNames(job string) []string {
	return namesOf(jobTasks(a.members.Peers(), job, true))
}

// namesOf lists the names of tasks.
func namesOf(tasks []assign.Task) []string {
	if len(tasks) == 0 {
		return nil
	}
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
	}
	return names
}

// MembersVersion is implemented by Members that count their changes, as
// gossip.Node and the agent do: Version moves after anything that changes
// what Peers lists. With it, the Assigner reads every member once per
// version (memberIndex) rather than once for every job it looks at, or
// for every report it checks.
type MembersVersion interface{ Version() uint64 }

// memberIndex is the membership by job for one version: each job's alive
// tasks as jobTasks lists them, and their names. It is built in one pass
// over the members (those of the lease leader's View of the same
// version: one read of gossip per version for both) the first time its
// version is asked for, so that an Assigner of many jobs does not read,
// parse and sort every member for every job it decides on, describes or
// samples (the load history's sampling of 3,000 jobs over 9,000 members
// read all 9,000 members 3,000 times every interval), nor for every load
// report or lease call of a job of 10,000 tasks. The lists are shared and
// never modified.
type memberIndex struct {
	tasks map[string][]assign.Task
	names map[string][]string
}

// membersNow returns the membership index of the current version, and false
// when the membership does not count its versions.
func (a *Assigner) membersNow() (*memberIndex, bool) {
	v, ok := a.members.(MembersVersion)
	if !ok {
		return nil, false
	}
	return a.live.Get(v.Version(), func() *memberIndex { return indexMembers(a.leader.View().Peers()) }), true
}

// indexMembers builds the index of peers.
func indexMembers(peers []gossip.Peer) *memberIndex {
	byJob := make(map[string][]gossip.Peer)
	for _, p := range peers {
		if p.Has(gossip.RoleTask) && p.Status == gossip.StatusAlive {
			byJob[p.Job] = append(byJob[p.Job], p)
		}
	}
	idx := &memberIndex{tasks: make(map[string][]assign.Task, len(byJob)), names: make(map[string][]string, len(byJob))}
	for job, ps := range byJob {
		tasks := jobTasks(ps, job, true)
		idx.tasks[job], idx.names[job] = tasks, namesOf(tasks)
	}
	return idx
}

// liveNamesNow returns job's alive task names, sorted, as liveTaskNames
// does, from the index of the current membership version (shared: never
// modified).
func (a *Assigner) liveNamesNow(job string) []string {
	if idx, ok := a.membersNow(); ok {
		return idx.names[job]
	}
	return a.liveTaskNames(job)
}

// put stores r as task's latest report and drops the reports of tasks
// no longer in live (sorted). It reports whether every task of live has
// now reported since the job's last load decision (decided), at least
// spacing after it: a round of reports is in, and the job may be decided
// on without waiting for the interval.
func (l *loads) put(job, task string, r *loadReport, live []string) (round bool) {
	r.at = l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	reps := l.jobs[job]
	if reps == nil {
		reps = make(map[string]*loadReport)
		l.jobs[job] = reps
	}
	prev := reps[task]
	reps[task] = r
	if last := l.pruned[job]; len(last) == 0 || len(last) != len(live) || &last[0] != &live[0] {
		// Against a list of live tasks not seen before (a membership
		// version's are shared, see liveNames): every other report is
		// then of a task in it, until the list changes.
		prune(reps, live)
		if l.pruned == nil {
			l.pruned = make(map[string][]string)
		}
		l.pruned[job] = live
	}
	if l.reported == nil {
		l.reported, l.decided = make(map[string]int), make(map[string]time.Time)
	}
	if _, ok := l.decided[job]; !ok {
		// The first report: rounds are spaced from it, and it counts
		// once (a later report of its task comes after this instant).
		l.decided[job] = r.at.Add(-time.Nanosecond)
	}
	if prev == nil || !prev.at.After(l.decided[job]) {
		l.reported[job]++
	}
	return len(live) > 0 && l.reported[job] >= len(live) && !r.at.Before(l.decided[job].Add(l.spacing))
}

// decide records a load decision on job at now: the next round of reports
// starts.
func (l *loads) decide(job string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.decided == nil {
		l.reported, l.decided = make(map[string]int), make(map[string]time.Time)
	}
	l.decided[job] = now
	delete(l.reported, job)
}

// prune drops the reports of tasks not in live (sorted).
func prune(reps map[string]*loadReport, live []string) {
	for name := range reps {
		if _, ok := slices.BinarySearch(live, name); !ok {
			delete(reps, name)
		}
	}
}

// pruneLoads drops the reports of every task that has left its job, so
// memory follows membership.
func (a *Assigner) pruneLoads() {
	alive := make(map[string][]string)
	for _, p := range a.members.Peers() {
		if p.Has(gossip.RoleTask) && p.Status == gossip.StatusAlive {
			alive[p.Job] = append(alive[p.Job], p.Task)
		}
	}
	a.loads.mu.Lock()
	defer a.loads.mu.Unlock()
	for job, reps := range a.loads.jobs {
		live := alive[job]
		slices.Sort(live)
		prune(reps, live)
		if len(reps) == 0 {
			delete(a.loads.jobs, job)
			delete(a.loads.decided, job)
			delete(a.loads.reported, job)
			delete(a.loads.pruned, job)
		}
	}
}

// jobLoad merges the latest reports of the job's live tasks into one load
// (per second). Ranges several tasks report (replicas, or tasks measuring
// under different generations) add up. A report is taken at full weight
// until its window has passed again (the next report is due), then
// decays with the configured half-life, so a task that stopped reporting
// fades out instead of pinning its last load.
func (a *Assigner) jobLoad(job string) assign.Load {
	var parts []assign.Load
	a.liveReports(job, func(rate assign.Load, w float64) {
		if w == 1 {
			parts = append(parts, rate)
			return
		}
		scaled := slices.Clone(rate)
		for i := range scaled {
			scaled[i].Load *= w
		}
		parts = append(parts, scaled)
	})
	return assign.MergeLoads(parts...)
}

// liveReports calls f, under the reports' lock, with the latest report of
// each of the job's live tasks and the weight it counts with now (weight);
// the reports of departed tasks are skipped (pruneLoads drops them).
func (a *Assigner) liveReports(job string, f func(rate assign.Load, weight float64)) {
	live := a.liveNamesNow(job)
	a.loads.mu.Lock()
	defer a.loads.mu.Unlock()
	now := a.loads.now()
	for task, r := range a.loads.jobs[job] {
		if _, ok := slices.BinarySearch(live, task); ok {
			f(r.rate, a.loads.weight(r, now))
		}
	}
}

// weight is how much r still counts at now: 1 until one window past its
// arrival, then halving every half-life.
func (l *loads) weight(r *loadReport, now time.Time) float64 {
	stale := now.Sub(r.at) - r.window
	if stale <= 0 || l.halfLife <= 0 {
		return 1
	}
	return math.Exp2(-float64(stale) / float64(l.halfLife))
}

// reportingJobs lists, sorted, the jobs with at least one load report.
func (l *loads) reportingJobs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.jobs))
	for job, reps := range l.jobs {
		if len(reps) > 0 {
			names = append(names, job)
		}
	}
	slices.Sort(names)
	return names
}

// fresh reports whether every task reporting load for job has reported
// since the time since, or is overdue (a window has passed since then
// without its report).
//
// A decision right after a commit would otherwise see, for every range it
// moved, only the old task's report: the new task has not yet reported
// serving it, and the old one's next report will not show it any more, so
// the same moves could be repeated or undone on a stale picture. Waiting
// for reports measured wholly after the commit would be more exact still,
// but costs a second window per decision; since Slicelets report hot keys
// as their own entries, the part of a window before the commit misleads
// little.
func (l *loads) fresh(job string, since time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, r := range l.jobs[job] {
		if !r.at.After(since) && now.Sub(since) < r.window {
			return false
		}
	}
	return true
}

// reportingAmong counts the tasks in live (sorted) with a load report for
// job.
func (l *loads) reportingAmong(job string, live []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for task := range l.jobs[job] {
		if _, ok := slices.BinarySearch(live, task); ok {
			n++
		}
	}
	return n
}

// reporting counts the tasks with a load report for job.
func (l *loads) reporting(job string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs[job])
}

// loadWarmup is how long after it starts an Assigner's load-driven
// decisions wait for the reports of every task a job's assignment lists:
// Slicelets report every few seconds (slicelet.DefaultLoadWindow is 2 s),
// so several rounds of them fit in it at the defaults. Past it a task that
// still has not reported (it cannot reach this Assigner) no longer holds
// the job's balancing back.
const loadWarmup = 30 * time.Second

// warmingUp reports whether the Assigner started less than loadWarmup ago.
func (a *Assigner) warmingUp() bool {
	started := a.started.Load()
	return started != 0 && a.loads.now().Sub(time.Unix(0, started)) < loadWarmup
}

// unknownLoad counts the tasks of j's current assignment that gossip lists
// alive for the job but that have no load report here: their load is
// unknown to this Assigner, not zero. A task that has just joined is not
// in the assignment yet and does not count. 0 for a nil j.
func (a *Assigner) unknownLoad(job string, j *assignerJob) int {
	if j == nil {
		return 0
	}
	cur := j.pub.Current()
	if cur == nil {
		return 0
	}
	live := a.liveNamesNow(job)
	a.loads.mu.Lock()
	defer a.loads.mu.Unlock()
	reps := a.loads.jobs[job]
	n := 0
	for _, t := range cur.Tasks {
		if _, ok := slices.BinarySearch(live, t.Name); !ok {
			continue
		}
		if _, ok := reps[t.Name]; !ok {
			n++
		}
	}
	return n
}

// keepOwned cuts r to the keys the job's current assignment, or the one
// before it (a window may span the change), gives task: a task's report
// counts only for keys it serves, so that a task, whatever its
// certificate, cannot move another task's keys by reporting load on them.
// Load cut off is counted (ForeignLoadReports) and warned about once a
// minute per task. A report for a job this Assigner holds no assignment
// of yet is kept whole.
func (a *Assigner) keepOwned(job, task string, r *loadReport) {
	j, ok := a.known(job)
	if !ok {
		return // no assignment of the job here yet: nothing to check against
	}
	cur, prev := j.pub.Current(), j.pub.Previous()
	if cur == nil {
		return
	}
	kept := r.rate.OwnedIn(task, j.owners.of(cur, prev)...)
	total := r.rate.Total()
	r.rate = kept
	if dropped := total - kept.Total(); dropped > 1e-9*max(total, 1) {
		a.loads.foreign.Add(1)
		if a.loads.warnForeign(job, task) {
			a.log.Warn("load report on keys the task does not serve: that part is ignored (a task may report load only on its own keys)",
				"job", job, "task", task, "report_generation", r.generation, "generation", cur.Generation,
				"ignored_load", dropped, "reported_load", total)
		}
	}
}

// ownerIndexes holds the assign.OwnerIndex of the two assignments a job's
// load reports were last cut to, its current and previous ones. A report
// then costs the reporting task's own slices, not a pass over the job's
// (at 10,000 tasks and a million slices, 26 µs instead of 15–20 ms: an
// Assigner could not otherwise keep up with the job's reports). When a new
// generation arrives, the index of the one it replaces is kept as the
// previous one's, so each generation is indexed once (40–55 ms at a million
// slices), by the first report that needs it; the job's other reports
// wait for it rather than build their own.
type ownerIndexes struct {
	mu   sync.Mutex
	held [2]*assign.OwnerIndex
}

// of returns the indexes of cur and prev (nil for a nil one), building
// what it does not hold.
func (o *ownerIndexes) of(cur, prev *assign.Assignment) []*assign.OwnerIndex {
	o.mu.Lock()
	defer o.mu.Unlock()
	find := func(a *assign.Assignment) *assign.OwnerIndex {
		if a == nil {
			return nil
		}
		if x := o.heldFor(a); x != nil {
			return x
		}
		return assign.NewOwnerIndex(a)
	}
	o.held = [2]*assign.OwnerIndex{find(cur), find(prev)}
	held := o.held // a copy: the caller reads it without mu
	return held[:]
}

// lookup returns the index of a if o holds one, without building it.
func (o *ownerIndexes) lookup(a *assign.Assignment) *assign.OwnerIndex {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.heldFor(a)
}

// heldFor is the index of a that o holds, or nil; o.mu is held.
func (o *ownerIndexes) heldFor(a *assign.Assignment) *assign.OwnerIndex {
	for _, x := range o.held {
		if x != nil && x.Assignment() == a {
			return x
		}
	}
	return nil
}

// taskLoadsOf is assign.TaskLoads(cur, load) for job and, with bytes,
// assign.TaskBytes(cur, load), read through the index of cur that the
// job's load reports were cut with when there is one (built by the first
// report after a generation): two-fifths of the time at a million slices,
// where every check of whether the job needs a load decision otherwise
// looks a million names up.
func (a *Assigner) taskLoadsOf(job string, cur *assign.Assignment, load assign.Load, bytes bool) (loads, held []float64) {
	taskLoads := func(l assign.Load) []float64 { return assign.TaskLoads(cur, l) }
	taskBytes := func(l assign.Load) []float64 { return assign.TaskBytes(cur, l) }
	if j, ok := a.known(job); ok {
		if idx := j.owners.lookup(cur); idx != nil {
			taskLoads, taskBytes = idx.TaskLoads, idx.TaskBytes
		}
	}
	if bytes {
		held = taskBytes(load)
	}
	return taskLoads(load), held
}

// hottestOf is assign.Hottest(cur, load, live) by taskLoadsOf.
func (a *Assigner) hottestOf(job string, cur *assign.Assignment, load assign.Load, live []assign.Task) (task int, imbalance float64) {
	loads, _ := a.taskLoadsOf(job, cur, load, false)
	return assign.HottestOf(cur, loads, live)
}

// ForeignLoadReports counts the load reports cut to the reporting task's
// own keys (keepOwned).
func (a *Assigner) ForeignLoadReports() uint64 { return a.loads.foreign.Load() }

// foreignWarnEvery bounds the warnings about one task's load reports on
// keys it does not serve.
const foreignWarnEvery = time.Minute

// warnForeign reports whether a warning about job/task's foreign load is
// due, and notes it.
func (l *loads) warnForeign(job, task string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	key := job + "\x00" + task
	for k, at := range l.warned {
		if now.Sub(at) >= foreignWarnEvery {
			delete(l.warned, k) // bounded by the tasks warned about within a minute
		}
	}
	if _, recent := l.warned[key]; recent {
		return false
	}
	if l.warned == nil {
		l.warned = make(map[string]time.Time)
	}
	l.warned[key] = now
	return true
}

// nudgeEvery bounds the copies of load reports an Assigner passes to a
// job's preferred Assigner (nudgeTarget): one per job per interval is
// enough to start and renew an adoption (lease.Config.AdoptFor).
const nudgeEvery = time.Second

// nudgeTarget returns the Assigner to pass a copy of a load report for job
// to, or a zero Route: the job's preferred Assigner, when it is another
// one and this Assigner knows no live holder of the job's lease, at most
// once per nudgeEvery per job. Without these copies two Assigners that
// each prefer the other would both leave the job, and nothing would tell
// either to adopt it, since tasks report to every Assigner and no report
// is forwarded.
func (a *Assigner) nudgeTarget(job string) lease.Route {
	r := a.leader.Target(job)
	if r.Self || r.Holder || r.Peer.Name == "" || r.Peer.RPCAddr == "" {
		return lease.Route{}
	}
	now := a.loads.now()
	a.loads.mu.Lock()
	defer a.loads.mu.Unlock()
	if now.Sub(a.loads.nudged[job]) < nudgeEvery {
		return lease.Route{}
	}
	if a.loads.nudged == nil {
		a.loads.nudged = make(map[string]time.Time)
	}
	a.loads.nudged[job] = now
	return r
}
