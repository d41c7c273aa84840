package roles

import (
	"context"
	"errors"
	"slices"
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

// RTT implements proximity for the roles: the gossip node's estimate of
// the round trip between two members.
func (a *Agent) RTT(x, y string) (time.Duration, bool) {
	if n := a.gossipNode(); n != nil {
		return n.RTT(x, y)
	}
	return 0, false
}

// storeWatcher is storage.Watcher: a store that reports commits itself.
type storeWatcher interface {
	Watch(ctx context.Context, job string) <-chan string
}

// preferred returns the job's preferred Assigner as this Assigner sees it,
// and whether that is this one. With no live Assigner in view (gossip not
// started, or a membership without Assigners in tests) it acts alone.
func (a *Assigner) preferred(job string) (gossip.Peer, bool) {
	p, ok := a.choices.Preferred(a.pref, job, a.members.Peers(), a.rtt)
	if !ok {
		return gossip.Peer{Name: a.self}, true
	}
	return p, p.Name == a.self
}

// jobNames lists, sorted, the jobs this Assigner knows: those with a task
// in gossip and those it has loaded.
func (a *Assigner) jobNames() []string {
	names := make(map[string]bool)
	for _, p := range a.members.Peers() {
		if p.Has(gossip.RoleTask) && p.Job != "" {
			names[p.Job] = true
		}
	}
	a.mu.Lock()
	for name := range a.jobs {
		names[name] = true
	}
	a.mu.Unlock()
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	slices.Sort(sorted)
	return sorted
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
func (a *Assigner) refresh(ctx context.Context, name string) error {
	rec, err := a.store.Load(ctx, name)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	j, err := a.job(ctx, name, true)
	if err != nil {
		return err
	}
	a.mu.Lock()
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
	for _, name := range names {
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

// PreferredAssigner returns the Assigner this agent currently prefers for
// job: its Assigner's choice, or its Distributor's when it runs no
// Assigner; "" when it has made none. Tests and operators use it to see
// where a job is generated.
func (a *Agent) PreferredAssigner(job string) string {
	switch {
	case a.assigner != nil:
		return a.assigner.choices.Current(job)
	case a.distributor != nil:
		return a.distributor.choices.Current(job)
	}
	return ""
}

// Leads reports whether this agent's Assigner has taken job over and
// generates its assignments.
func (a *Agent) Leads(job string) bool {
	if a.assigner == nil {
		return false
	}
	a.assigner.mu.Lock()
	defer a.assigner.mu.Unlock()
	j := a.assigner.jobs[job]
	return j != nil && j.leading
}

// PullsFrom returns the name of the Assigner this agent's Distributor
// streams job from, "" while it has no stream for it.
func (a *Agent) PullsFrom(job string) string {
	if a.distributor == nil {
		return ""
	}
	a.distributor.mu.Lock()
	defer a.distributor.mu.Unlock()
	if j := a.distributor.jobs[job]; j != nil {
		return j.from
	}
	return ""
}

// ForwardedWrites counts the load reports and configuration changes this
// agent's Assigner forwarded to another, preferred, Assigner.
func (a *Agent) ForwardedWrites() uint64 {
	if a.assigner == nil {
		return 0
	}
	return a.assigner.forwarded.Load()
}
