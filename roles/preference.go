package roles

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/storage"
)

// proximity is the part of the gossip node that estimates distances. The
// roles use it when their membership offers it; without it every distance
// is unknown and preferences fall back to the rendezvous hash.
type proximity interface {
	RTT(a, b string) (time.Duration, bool)
}

// preferred returns the job's preferred Assigner as this Assigner sees it,
// and whether that is this one. With no live Assigner in view (gossip not
// started, or a membership without Assigners in tests) it acts alone.
//
// A job this Assigner has adopted (see adopt) is its own while the
// adoption lasts, whatever its estimates say.
func (a *Assigner) preferred(job string) (gossip.Peer, bool) {
	p, ok := a.choices.Preferred(a.pref, job, a.members.Peers(), a.rtt)
	if !ok {
		return gossip.Peer{Name: a.self}, true
	}
	if p.Name != a.self && a.adopted(job) {
		return gossip.Peer{Name: a.self}, true
	}
	return p, p.Name == a.self
}

// preferredName is the job's preferred Assigner as this Assigner last
// chose it, adoption included; "" if it has not chosen.
func (a *Assigner) preferredName(job string) string {
	if a.adopting(job) {
		return a.self
	}
	return a.choices.Current(job)
}

// preferredNow is the job's preferred Assigner as this Assigner would
// choose it now, adoption included, without remembering the choice or
// ending a lapsed adoption: what a read-only RPC reports. Like preferred,
// it is this Assigner when none is live in its view.
func (a *Assigner) preferredNow(job string) string {
	if a.adopting(job) {
		return a.self
	}
	p, ok := a.pref.Preferred(job, a.members.Peers(), a.rtt, a.choices.Current(job))
	if !ok {
		return a.self
	}
	return p.Name
}

// adoptFor is how long an adoption lasts unless renewed: ten rechecks, so
// a steady flow of forwarded writes or a lasting orphan keeps it, while
// an Assigner whose estimates later agree with everyone's hands the job
// back soon after the disagreement ends.
func (a *Assigner) adoptFor() time.Duration { return 10 * a.pref.Recheck }

// orphanAfter is how long a job's stored assignment may route keys to a
// dead task before an Assigner that is not its preferred one adopts it:
// long enough for the preferred Assigner to see the same membership
// change and decide (its gossip view may lag by a probe or two), short
// enough that a job nobody generates is repaired.
func (a *Assigner) orphanAfter() time.Duration { return 10*a.pref.Recheck + 10*a.delay }

// Observers whose RTT estimates contradict each other (each finding the
// other nearer by more than the margin, as a small cluster's coordinates
// can for a while) may each prefer the other Assigner, and then nobody
// generates the job. Two signals break the tie, both safe because commits
// are conditional: a write forwarded here means its sender prefers this
// Assigner; and a job whose stored assignment still routes keys to a dead
// task after orphanAfter has no working preferred Assigner. In either case
// this Assigner adopts the job: it treats itself as preferred for adoptFor
// (renewed while the signal lasts) and takes the job over. If another
// Assigner generates it too, their commits conflict and each chooses
// afresh (refresh); an adoption that is no longer renewed lapses.
func (a *Assigner) adopt(job, why string) {
	a.mu.Lock()
	renewing := a.adoptions[job].After(time.Now())
	a.adoptions[job] = time.Now().Add(a.adoptFor())
	a.mu.Unlock()
	if !renewing {
		a.log.Warn("adopting the job: another assigner is preferred in this assigner's view, but "+why, "job", job,
			"for", a.adoptFor())
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// adopting reports whether job's adoption lasts, without ending one that
// has lapsed, for readers.
func (a *Assigner) adopting(job string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.adoptions[job].After(time.Now())
}

func (a *Assigner) adopted(job string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.adoptions[job]
	if ok && !until.After(time.Now()) {
		delete(a.adoptions, job)
		return false
	}
	return ok
}

// watchOrphan adopts job when its stored assignment has routed keys to a
// dead task for orphanAfter while another Assigner is preferred.
func (a *Assigner) watchOrphan(job string) {
	stale := a.outOfDate(job)
	a.mu.Lock()
	since, seen := a.orphans[job]
	switch {
	case !stale:
		delete(a.orphans, job)
	case !seen:
		a.orphans[job] = time.Now()
	}
	a.mu.Unlock()
	if stale && seen && time.Since(since) >= a.orphanAfter() {
		a.adopt(job, "the job's stored assignment has routed keys to a dead task for "+time.Since(since).Round(time.Millisecond).String())
	}
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
	cur := j.pub.current()
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

// jobNames lists, sorted, the jobs this Assigner knows: those with a task
// in gossip and those it has loaded.
func (a *Assigner) jobNames() []string {
	names := make(map[string]bool)
	alive := make(map[string]bool)
	for _, p := range a.members.Peers() {
		if p.Has(gossip.RoleTask) && p.Job != "" {
			names[p.Job] = true
			alive[p.Job] = alive[p.Job] || p.Status == gossip.StatusAlive
		}
	}
	a.mu.Lock()
	for name := range a.deleted {
		if !alive[name] {
			delete(names, name) // only failed tasks of a deleted job
		}
	}
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

// evaluate re-checks which jobs this Assigner is preferred for. A job it
// has become preferred for is taken over at once, unless the startup grace
// is still running (ready is false): a process that has just started does
// not yet know which tasks are alive. A job another Assigner is now
// preferred for is left to it; this one keeps serving it from the store.
func (a *Assigner) evaluate(ctx context.Context, ready bool) {
	for _, name := range a.jobNames() {
		if ctx.Err() != nil {
			return
		}
		p, self := a.preferred(name)
		a.mu.Lock()
		j := a.jobs[name]
		leading := j != nil && j.leading
		if !self && leading {
			j.leading = false
		}
		a.mu.Unlock()
		switch {
		case !self && leading:
			a.log.Info("another assigner is preferred for the job; serving it from the store", "job", name, "preferred", p.Name)
		case self && !leading && ready:
			a.takeover(ctx, name)
		}
		if !self && ready {
			a.watchOrphan(name)
		}
	}
}

// takeover makes this Assigner the one generating a job: it re-reads the
// stored record, so it continues from the last committed assignment
// whoever committed it, and commits a takeover generation at once (the
// stored assignment with dead tasks replaced, as a membership decision
// would, and the generation bumped even when nothing else changed). The
// hand-over is then visible to every subscriber, and a stale Assigner's
// next write conflicts. A failure is logged and retried at the next
// evaluation.
func (a *Assigner) takeover(ctx context.Context, name string) {
	start := time.Now()
	j, err := a.job(ctx, name, true)
	if err != nil {
		a.log.Error("taking over job failed; retrying", "job", name, "err", err)
		return
	}
	if err := a.refresh(ctx, name); err != nil {
		a.log.Error("taking over job: reading the stored record failed; retrying", "job", name, "err", err)
		return
	}
	var from uint64
	if cur := j.pub.current(); cur != nil {
		from = cur.Generation
	}
	if err := a.reconcile(ctx, name, triggerTakeover); err != nil {
		a.log.Error("taking over job failed; retrying", "job", name, "err", err)
		return
	}
	a.mu.Lock()
	j.leading = true
	a.mu.Unlock()
	var to uint64
	if cur := j.pub.current(); cur != nil {
		to = cur.Generation
	}
	a.log.Info("took over job as its preferred assigner", "job", name, "stored_generation", from, "generation", to,
		"took", time.Since(start))
}

// refresh reads a job's stored record and serves it: the newest committed
// assignment and the stored configuration. An assignment newer than this
// Assigner's own last commit while it leads the job means another Assigner
// also believes it is preferred (a partition, or views of gossip that
// differ): the choice is then made afresh, as every observer without
// history makes it, so the two agree again.
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
		rec, err := a.store.Load(ctx, name)
		if errors.Is(err, storage.ErrNotFound) {
			a.forgetVanished(name)
			return nil
		}
		if err != nil {
			return err
		}
		j, err := a.job(ctx, name, true)
		if errors.Is(err, ErrUnknownJob) {
			return nil // deleted here; see jobdelete.go
		}
		if err != nil {
			return err
		}
		a.mu.Lock()
		if j.cfgSet != cfgSet {
			a.mu.Unlock()
			continue
		}
		j.cfg, j.configured = rec.Config, rec.Configured
		leading, own := j.leading, j.own
		a.mu.Unlock()
		if rec.Current != nil && j.pub.publish(rec.Current) && leading && rec.Current.Generation > own {
			a.log.Warn("another assigner committed while this one leads the job; choosing the preferred assigner afresh",
				"job", name, "generation", rec.Current.Generation, "own_generation", own)
			a.choices.Forget(name)
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
	stored := make(map[string]bool, len(names))
	for _, name := range names {
		stored[name] = true
		if ctx.Err() != nil {
			return
		}
		if err := a.refresh(ctx, name); err != nil && ctx.Err() == nil {
			a.log.Warn("reading a stored job failed; serving what was read before", "job", name, "err", err)
		}
	}
	for _, name := range a.jobNames() {
		if !stored[name] {
			a.forgetVanished(name)
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
