package assigner

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
)

// proximity is the part of the gossip node that estimates distances. The
// roles use it when their membership offers it; without it every distance
// is unknown and preferences fall back to the rendezvous hash.
type proximity interface {
	RTT(a, b string) (time.Duration, bool)
}

// outOfDate reports whether the job has live tasks and its served
// assignment is missing or routes keys to a task that is not alive (or
// not at that address any more): the changes that must not wait. A new
// task without slices yet only waits for balance, and does not count.
func (a *Assigner) outOfDate(job string) bool {
	live := a.tasksOf(job, true)
	if len(live) == 0 {
		return false
	}
	a.mu.Lock()
	j := a.jobs[job]
	a.mu.Unlock()
	if j == nil {
		return true
	}
	cur := j.pub.Current()
	if cur == nil {
		return true
	}
	byName := func(x, y assign.Task) int { return strings.Compare(x.Name, y.Name) }
	for _, t := range cur.Tasks {
		i, ok := slices.BinarySearchFunc(live, t, byName)
		if !ok || live[i].Addr != t.Addr {
			return true
		}
	}
	return false
}

// jobNames lists, sorted, the jobs this Assigner knows: those with a live
// task in gossip and those it has loaded. A task that failed or left does
// not make a job known (see job).
func (a *Assigner) jobNames() []string {
	names := make(map[string]bool)
	if idx, ok := a.membersNow(); ok { // read once per membership version
		for job := range idx.tasks {
			if job != "" {
				names[job] = true
			}
		}
	} else {
		for _, p := range a.members.Peers() {
			if p.Has(gossip.RoleTask) && p.Job != "" && p.Status == gossip.StatusAlive {
				names[p.Job] = true
			}
		}
	}
	a.mu.Lock()
	held := len(a.jobs)
	for name := range a.jobs {
		names[name] = true
	}
	a.mu.Unlock()
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	slices.Sort(sorted)
	return a.withinJobCap(sorted, held)
}

// evaluate re-checks which jobs this Assigner should lead: it takes the
// lease of the jobs it is preferred for (or has adopted), gives up those
// another Assigner is now preferred for, and takes over every job whose
// lease it gained, or whose lease it holds but whose takeover failed
// (paced by retryDelay). Until the startup grace has passed (ready is
// false) it takes no lease: a process that has just started does not yet
// know which tasks are alive. A job it does not lead is served from the
// store.
func (a *Assigner) evaluate(ctx context.Context, ready bool) {
	if !ready {
		return
	}
	names := a.jobNames()
	a.leader.Evaluate(ctx, names)
	for _, name := range a.leader.Gained() {
		if ctx.Err() != nil {
			return
		}
		a.takeover(ctx, name)
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		held, ok := a.leader.Held(name)
		if !ok {
			continue
		}
		if a.retakeDue(name, held.Epoch) {
			a.takeover(ctx, name)
		}
		a.moveGuard(name) // a strong job's guard follows its generation
	}
}

// retakeDue reports whether job, whose lease this Assigner holds at
// epoch, has not been taken over under it and its next try has come: a
// takeover that failed (a store error, say) is tried again rather than
// left until the job's membership next changes, for until then the
// stored assignment may still route keys to the tasks that died with the
// previous holder.
func (a *Assigner) retakeDue(job string, epoch uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j := a.jobs[job]; j != nil && j.takenOver == epoch {
		return false
	}
	next, failed := a.retakes[job]
	return failed && !time.Now().Before(next)
}

// takeover makes this Assigner, which has just gained the job's lease, the
// one generating the job: it re-reads the stored record, so it continues
// from the last committed assignment whoever committed it, and commits a
// takeover generation at once (the stored assignment with dead tasks
// replaced, as a membership decision would, and the generation bumped
// even when nothing else changed), fenced by the new lease. The hand-over
// is then visible to every subscriber. A failure is logged and tried
// again by evaluate after retryDelay while the lease is held.
func (a *Assigner) takeover(ctx context.Context, name string) {
	start := time.Now()
	held, ok := a.leader.Held(name)
	if !ok {
		return
	}
	failed := func(msg string, err error) {
		a.mu.Lock()
		a.retakes[name] = time.Now().Add(retryDelay)
		a.mu.Unlock()
		a.log.Error(msg, "job", name, "epoch", held.Epoch, "retry_in", retryDelay, "err", err)
	}
	j, err := a.job(ctx, name)
	if errors.Is(err, rpc.ErrUnknownJob) {
		a.dropLease(ctx, name)
		return
	}
	if err != nil {
		failed("taking over job failed; retrying", err)
		return
	}
	if err := a.refresh(ctx, name); err != nil {
		failed("taking over job: reading the stored record failed; retrying", err)
		return
	}
	var from uint64
	if cur := j.pub.Current(); cur != nil {
		from = cur.Generation
	}
	if err := a.reconcile(ctx, name, triggerTakeover); err != nil {
		failed("taking over job failed; retrying", err)
		return
	}
	a.mu.Lock()
	j.takenOver = held.Epoch
	delete(a.retakes, name)
	a.mu.Unlock()
	var to uint64
	if cur := j.pub.Current(); cur != nil {
		to = cur.Generation
	}
	a.log.Info("took over job as its preferred assigner", "job", name, "epoch", held.Epoch, "stored_generation", from, "generation", to,
		"took", time.Since(start))
}

// refresh reads a job's stored record and serves it: the newest committed
// assignment and the stored configuration.
//
// A configuration SetJobConfig applies while the record is read may be
// newer than the one read; the record is then read again, so an older
// configuration never replaces it.
func (a *Assigner) refresh(ctx context.Context, name string) error {
	for {
		var cfgSet uint64
		a.mu.Lock()
		if j := a.jobs[name]; j != nil {
			cfgSet = j.cfgSet
		}
		a.mu.Unlock()
		rec, err := storage.LoadCurrent(ctx, a.store, name)
		if errors.Is(err, storage.ErrNotFound) {
			a.forgetVanished(name)
			return nil
		}
		if err != nil {
			return err
		}
		j, err := a.job(ctx, name)
		if errors.Is(err, rpc.ErrUnknownJob) {
			return nil // deleted since it was read; see jobdelete.go
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		if j.cfgSet != cfgSet {
			a.mu.Unlock()
			continue
		}
		changed := j.configured != rec.Configured || !j.cfg.Equal(rec.Config)
		j.cfg, j.configured = rec.Config, rec.Configured
		a.mu.Unlock()
		if rec.Current != nil {
			j.pub.Publish(rec.Current, time.Time{}) // read from the store: commit time unknown
		}
		if _, held := a.leader.Held(name); changed && held {
			// Another Assigner stored it (one that took itself for the
			// job's, or that the write reached while the lease moved):
			// this one generates the job, so it decides on it now rather
			// than at whatever changes next.
			a.log.Info("job configured through another assigner; deciding on it", "job", name)
			a.kickDecision()
		}
		return nil
	}
}

// refreshAll refreshes every stored job; a failure is logged and retried
// at the next poll.
func (a *Assigner) refreshAll(ctx context.Context) {
	names, err := a.store.Jobs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("listing stored jobs failed; serving what was read before", "err", err)
		}
		return
	}
	// The jobs held here but not listed are read too: a deleted one is
	// forgotten, and one stored since the listing is kept.
	a.mu.Lock()
	held := make(map[string]bool, len(a.jobs))
	for name := range a.jobs {
		held[name] = true
	}
	a.mu.Unlock()
	for _, name := range names {
		delete(held, name)
	}
	for _, name := range append(names, slices.Sorted(maps.Keys(held))...) {
		if ctx.Err() != nil {
			return
		}
		if err := a.refresh(ctx, name); err != nil && ctx.Err() == nil {
			a.log.Warn("reading a stored job failed; serving what was read before", "job", name, "err", err)
		}
	}
}

// takeoverAssignment is the takeover generation when the job has no live
// task to decide with: the stored assignment under the next generation.
func takeoverAssignment(cur *assign.Assignment) *assign.Assignment {
	next := cur.Clone()
	next.Generation = cur.Generation + 1
	return next
}
