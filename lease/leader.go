package lease

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/failpoint"
	"github.com/slicerd/slicerd/internal/leaseclock"
)

// LeaderConfig configures a Leader.
type LeaderConfig struct {
	// Self is this Assigner's gossip name, the holder name of its leases.
	Self string
	// Manager grants the job leases.
	Manager Manager
	// TTL is the job lease's lifetime (default DefaultJobTTL). A failed
	// Assigner's jobs are taken over once it has run out, so it bounds
	// failover from below; renewals cost one manager call per job every
	// TTL/3.
	TTL time.Duration
	// ClockMargin is the fraction of a lease's TTL the holder gives up to
	// the difference between its clock's rate and the manager's (default
	// DefaultClockMargin): it stops using a lease at send + TTL×(1−margin).
	ClockMargin float64
	// Preference chooses the Assigner that tries to take each job.
	Preference Preference
	// Members is the current gossip view.
	Members func() []gossip.Peer
	// Version, when set, moves whenever Members would return something
	// else (gossip.Node.Version): the Leader then reads and indexes the
	// members once per version (View) instead of once for each job it
	// looks at. Nil: every look reads Members.
	Version func() uint64
	// RTT estimates distances; nil: none is known.
	RTT RTTFunc
	// Stale reports whether job's served assignment routes keys to a dead
	// task: the signal that a job nobody generates needs adopting. Nil:
	// never.
	Stale func(job string) bool
	// OrphanAfter is how long a job may stay Stale while another Assigner
	// is preferred before this one adopts it; AdoptFor is how long an
	// adoption lasts unless renewed. Defaults: 10 and 10 preference
	// rechecks.
	OrphanAfter, AdoptFor time.Duration
	Logger                *slog.Logger
}

// DefaultJobTTL is LeaderConfig.TTL's default: etcd's least lease TTL
// with its default election timeout.
const DefaultJobTTL = 2 * time.Second

// DefaultClockMargin is LeaderConfig.ClockMargin's default: clocks of
// healthy machines differ in rate by far less than 5%, and the margin
// costs the holder 100 ms of a 2 s lease.
const DefaultClockMargin = 0.05

// Leader keeps one Assigner's job leases: proximity (Preference,
// with its hysteresis) decides which jobs it tries to take, and the lease
// manager decides which it may write. The Assigner asks Held: "do I hold
// job J, at which epoch?". It is safe for concurrent use; Run renews the
// leases it holds.
type Leader struct {
	cfg     LeaderConfig
	log     *slog.Logger
	clock   *leaseclock.Clock // lease deadlines, counting a host's suspend
	choices Choices
	changes chan struct{} // a lease was gained or lost

	views PerVersion[*View] // with cfg.Version; see View

	// With a manager that tells of job leases ending (ReleaseWatcher),
	// watching is set while its watch is in place: a deferral is then
	// checked when the holder's lease ends, not every preference
	// recheck. releases counts the ends it told of, so that an Acquire
	// that found a lease held can tell whether it ended since; due nudges
	// Run to check the deferrals made due.
	watching atomic.Bool
	releases atomic.Uint64
	due      chan struct{}

	mu        sync.Mutex
	held      map[string]*heldJob
	gained    []string             // gained since the last Gained
	wanted    map[string]bool      // jobs the last Evaluate wanted
	holders   map[string]string    // job → another holder, as Acquire last found
	deferrals map[string]*deferral // job → the live holder this Assigner defers to
	retry     map[string]time.Time // job → earliest next Acquire
	acquiring map[string]bool      // jobs an acquire is under way for
	adoptions map[string]time.Time // job → when its adoption lapses
	orphans   map[string]time.Time // job → since when it is Stale
}

// heldJob is never changed once in l.held: a renewal replaces it, so that
// a copy of the pointer taken under l.mu may be read without it. One past
// its deadline is lapsed: not held (Held), not renewed, and released
// before this Assigner acquires the job again.
type heldJob struct {
	l        Job
	deadline int64 // on Leader.clock
}

// live reports whether h is still before its deadline at now (Leader.clock).
func (h *heldJob) live(now int64) bool { return now < h.deadline }

// deferral is this Assigner deferring to another live Assigner that holds
// a job this one would take: the holder is its remembered choice (see
// acquire). It lasts while that Assigner holds the lease, which Run checks
// every TTL/10 for a handoff window after the deferral began (the holder,
// when it sees the same change, releases the job for this one within it)
// and every preference recheck after that.
type deferral struct {
	holder string
	since  time.Time // when this Assigner began deferring to holder
	next   time.Time // when to check again that holder holds the lease
	// ended: the manager told that the job's lease ended since the
	// deferral began; the check need not ask it whether holder still
	// holds it (another Acquire since is found by this one's).
	ended bool
}

// NewLeader returns a Leader holding no lease; Run renews what Evaluate
// acquires.
func NewLeader(cfg LeaderConfig) *Leader {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultJobTTL
	}
	if cfg.ClockMargin == 0 {
		cfg.ClockMargin = DefaultClockMargin
	}
	cfg.Preference = cfg.Preference.WithDefaults()
	if cfg.OrphanAfter == 0 {
		cfg.OrphanAfter = 10 * cfg.Preference.Recheck
	}
	if cfg.AdoptFor == 0 {
		cfg.AdoptFor = 10 * cfg.Preference.Recheck
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Members == nil {
		cfg.Members = func() []gossip.Peer { return nil }
	}
	return &Leader{
		cfg:       cfg,
		log:       cfg.Logger,
		clock:     leaseclock.New(),
		changes:   make(chan struct{}, 1),
		due:       make(chan struct{}, 1),
		held:      make(map[string]*heldJob),
		wanted:    make(map[string]bool),
		holders:   make(map[string]string),
		deferrals: make(map[string]*deferral),
		retry:     make(map[string]time.Time),
		acquiring: make(map[string]bool),
		adoptions: make(map[string]time.Time),
		orphans:   make(map[string]time.Time),
	}
}

// View is the membership indexed: kept for as long as cfg.Version stays,
// read afresh on every call without one.
func (l *Leader) View() *View {
	read := func() *View { return NewView(l.cfg.Members()) }
	if l.cfg.Version == nil {
		return read()
	}
	return l.views.Get(l.cfg.Version(), read)
}

// Changes signals, coalesced, that a lease was gained or lost: the
// Assigner takes over the Gained jobs and stops writing the others.
func (l *Leader) Changes() <-chan struct{} { return l.changes }

// Held reports whether this Assigner holds job's lease, and at which
// epoch. It is false from the moment the lease's local deadline passes,
// renewed or not, so an Assigner paused past it (SIGSTOP, a long GC)
// does not write when it resumes until it holds a lease again.
func (l *Leader) Held(job string) (Job, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[job]
	if h == nil || !h.live(l.clock.Now()) {
		return Job{}, false
	}
	return h.l, true
}

// Gained returns the jobs whose lease was acquired since the last call, for
// the Assigner to take over.
func (l *Leader) Gained() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gained
	l.gained = nil
	return g
}

// Lost drops job's lease of epoch at once: a write fenced under that
// epoch found it was no longer the job's. A lease held here at another
// epoch (taken again since that write was sent) is kept: dropped without
// a release, its key would stay on this holder's etcd session, kept alive
// by the renewals of its other jobs, and nobody could take the job.
func (l *Leader) Lost(job string, epoch uint64, err error) {
	l.mu.Lock()
	h, had := l.held[job]
	if had && h.l.Epoch != epoch {
		l.mu.Unlock()
		l.log.Debug("a write under an earlier epoch of a job lease held again was fenced; keeping the lease", "job", job,
			"epoch", h.l.Epoch, "fenced_epoch", epoch)
		return
	}
	delete(l.held, job)
	l.mu.Unlock()
	if had {
		l.log.Warn("job lease lost; no longer writing the job", "job", job, "err", err)
		l.signal()
	}
}

// Forget drops everything known about job (it was deleted), releasing its
// lease if held.
func (l *Leader) Forget(ctx context.Context, job string) {
	l.mu.Lock()
	h := l.held[job]
	delete(l.held, job)
	delete(l.wanted, job)
	delete(l.holders, job)
	delete(l.deferrals, job)
	delete(l.retry, job)
	delete(l.adoptions, job)
	delete(l.orphans, job)
	l.choices.Forget(job)
	l.mu.Unlock()
	if h != nil {
		l.release(ctx, h.l)
	}
}

// Preferred returns the job's preferred Assigner as this Assigner sees it,
// and whether that is this one: the Assigner that tries to take the job.
// With no live Assigner in view (gossip not started, or a membership
// without Assigners in tests) it acts alone. A job this Assigner has
// adopted is its own while the adoption lasts.
func (l *Leader) Preferred(job string) (gossip.Peer, bool) {
	p, ok := l.choices.PreferredIn(l.cfg.Preference, job, l.View(), l.cfg.RTT)
	if !ok {
		return gossip.Peer{Name: l.cfg.Self}, true
	}
	if p.Name != l.cfg.Self && l.adopted(job) {
		return gossip.Peer{Name: l.cfg.Self}, true
	}
	return p, p.Name == l.cfg.Self
}

// PreferredName is the job's preferred Assigner as this one last chose it,
// adoption included; "" if it has not chosen.
func (l *Leader) PreferredName(job string) string {
	if l.adopting(job) {
		return l.cfg.Self
	}
	return l.choices.Current(job)
}

// PreferredNow is the job's preferred Assigner as this one would choose it
// now, adoption included, without remembering the choice or ending a
// lapsed adoption: what a read-only RPC reports.
func (l *Leader) PreferredNow(job string) string {
	if l.adopting(job) {
		return l.cfg.Self
	}
	p, ok := l.cfg.Preference.PreferredIn(job, l.View(), l.cfg.RTT, l.choices.Current(job))
	if !ok {
		return l.cfg.Self
	}
	return p.Name
}

// Route is where a write for a job goes.
type Route struct {
	Peer gossip.Peer
	// Self: the write is taken here.
	Self bool
	// Holder: Peer holds the job's lease, as the manager last said;
	// otherwise it is the job's preferred Assigner.
	Holder bool
}

// Target is where a write for job goes: here while this Assigner holds
// the lease; else to the holder the manager last named, while gossip has
// it alive; else to the preferred Assigner, which takes the lease once it
// is free.
func (l *Leader) Target(job string) Route {
	if _, ok := l.Held(job); ok {
		return Route{Peer: gossip.Peer{Name: l.cfg.Self}, Self: true}
	}
	l.mu.Lock()
	holder := l.holders[job]
	l.mu.Unlock()
	if holder != "" && holder != l.cfg.Self {
		if p, ok := l.View().Peer(holder); ok && p.Status == gossip.StatusAlive && p.Has(gossip.RoleAssigner) && p.RPCAddr != "" {
			return Route{Peer: p, Holder: true}
		}
	}
	p, self := l.Preferred(job)
	return Route{Peer: p, Self: self}
}

// Forwarded notes that another Assigner forwarded a write for job here,
// taking this one for the job's lease holder (toHolder) or its preferred
// Assigner. In the second case, if this one does not prefer the job and
// nobody holds its lease, it adopts it, so that two Assigners that each
// prefer the other do not leave the job to nobody; an adoption already
// under way is renewed, whether or not this one has taken the lease since,
// so that it keeps the job while the writes keep coming. A write sent to
// the preferred Assigner while another live Assigner holds the lease
// adopts nothing: the sender did not know the holder, and the holder
// generates the job (this one routes the job's writes there from now on).
// A write sent to a holder that has since released the lease adopts
// nothing either: the sender wants the job itself, or knows who does, and
// takes the lease at its next attempt.
func (l *Leader) Forwarded(ctx context.Context, job, from string, toHolder bool) {
	if toHolder {
		return
	}
	p, ok := l.choices.PreferredIn(l.cfg.Preference, job, l.View(), l.cfg.RTT)
	if !ok || p.Name == l.cfg.Self {
		return
	}
	why := "assigner " + from + " forwards the job's writes here"
	if l.adopting(job) {
		l.adopt(job, why)
		return
	}
	if _, held := l.Held(job); held {
		return
	}
	if holder := l.liveHolder(ctx, job); holder != "" {
		l.mu.Lock()
		l.holders[job] = holder
		l.mu.Unlock()
		return
	}
	l.adopt(job, why)
}

// liveHolder is the Assigner other than this one that holds job's lease,
// as the manager says, if gossip has it alive; "" otherwise, also when the
// manager does not answer.
func (l *Leader) liveHolder(ctx context.Context, job string) string {
	lj, err := l.cfg.Manager.Holder(ctx, job)
	if err != nil || lj.Holder == l.cfg.Self || !l.alive(lj.Holder) {
		return ""
	}
	return lj.Holder
}

// leaving reports whether gossip has this Assigner leaving or left.
func (l *Leader) leaving() bool {
	p, ok := l.View().Peer(l.cfg.Self)
	return ok && (p.Status == gossip.StatusLeaving || p.Status == gossip.StatusLeft)
}

// alive reports whether gossip has name alive as an Assigner.
func (l *Leader) alive(name string) bool {
	p, ok := l.View().Peer(name)
	return ok && p.Status == gossip.StatusAlive && p.Has(gossip.RoleAssigner)
}

// Evaluate decides, for each of jobs, whether this Assigner should hold
// its lease, and acts: it tries to acquire the lease of a job it prefers
// (or has adopted) and does not hold, and releases that of a job another
// live Assigner is now preferred for, so that one can take it at once
// (unless this one is leaving gossip: it then keeps its leases until Run
// ends).
// Jobs whose lease it gains are reported by Gained.
func (l *Leader) Evaluate(ctx context.Context, jobs []string) {
	// Acquires and releases run in parallel: an Assigner that starts, or
	// sees another die, may take thousands of jobs at once.
	var g errgroup.Group
	g.SetLimit(maxParallelAcquires)
	defer func() { _ = g.Wait() }()
	for _, job := range jobs {
		if ctx.Err() != nil {
			return
		}
		p, want := l.Preferred(job)
		if !want {
			l.watchOrphan(job)
		}
		l.mu.Lock()
		if d := l.deferrals[job]; d != nil && d.holder != p.Name {
			delete(l.deferrals, job) // choices were made afresh since
			delete(l.retry, job)     // paced as the deferral was
		}
		l.wanted[job] = want
		h := l.held[job]
		l.mu.Unlock()
		switch {
		case want && (h == nil || !h.live(l.clock.Now())):
			g.Go(func() error {
				l.acquire(ctx, job)
				return nil
			})
		case !want && h != nil && l.leaving():
			// This Assigner is leaving gossip, so it prefers another,
			// which does not know yet: serf marks a leaving member
			// without telling anyone, and the others see it gone only
			// when the leave is complete. It keeps the job until Run
			// ends, after the leave; released now, the job would have
			// no holder until then.
		case !want && h != nil:
			l.log.Info("another assigner is preferred for the job; releasing its lease", "job", job, "preferred", p.Name, "epoch", h.l.Epoch)
			l.mu.Lock()
			delete(l.held, job)
			l.mu.Unlock()
			g.Go(func() error {
				l.release(ctx, h.l)
				l.signal()
				return nil
			})
		}
	}
}

// acquire tries to take job's lease unless a recent attempt found it held
// and the time to try again has not come.
func (l *Leader) acquire(ctx context.Context, job string) {
	now := time.Now()
	l.mu.Lock()
	if h := l.held[job]; now.Before(l.retry[job]) || l.acquiring[job] || (h != nil && h.live(l.clock.Now())) {
		// Paced, or another call (Evaluate, or Run's retry) is acquiring
		// it or just did: a second Acquire would find the lease held by
		// this Assigner and back off as if another held it.
		l.mu.Unlock()
		return
	}
	l.acquiring[job] = true
	lapsed := l.held[job]
	delete(l.held, job)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.acquiring, job)
		l.mu.Unlock()
	}()
	if lapsed != nil {
		// This Assigner's own lease, past its local deadline but perhaps
		// not yet expired in the manager: released first, so that it is
		// not locked out by itself until the manager lets it go, and
		// taken again under a new epoch, which fences any write it sent
		// before the deadline.
		l.release(ctx, lapsed.l)
	}
	sent := l.clock.Now()
	releases := l.releases.Load()
	lj, err := l.cfg.Manager.Acquire(ctx, job, l.cfg.Self, l.cfg.TTL)
	if err != nil {
		var he *HeldError // nil unless the lease is held
		errors.As(err, &he)
		now := time.Now()
		l.mu.Lock()
		if he != nil {
			l.holders[job] = he.Holder
		}
		// A holder gossip has failed leaves a lease that expires within a
		// TTL, and so does this Assigner's previous run, named as the
		// holder: it is tried often, so that failover waits for little
		// more than the expiry. (A key this run put in an Acquire whose
		// answer was lost does not expire while its other jobs renew the
		// holder's etcd lease; the manager's next Acquire deletes it and
		// takes the job afresh.)
		wait := l.cfg.TTL / 10
		if he != nil && he.Holder != l.cfg.Self && l.alive(he.Holder) {
			// Another live Assigner holds the job: this one defers to it.
			// The holder becomes its remembered choice, which the
			// hysteresis keeps unless this one is nearer by more than the
			// margin, so views that differ only slightly agree on the
			// holder instead of each wanting the job forever. The
			// deferral ends when the holder lets the job go (Run checks):
			// often it is about to, having seen the same change as this
			// one a moment later, and would otherwise release the job to
			// an Assigner that no longer wants it.
			d := l.deferrals[job]
			if d == nil || d.holder != he.Holder {
				d = &deferral{holder: he.Holder, since: now}
				l.deferrals[job] = d
				l.log.Debug("job lease held by another assigner; deferring to it until it lets the job go", "job", job, "holder", he.Holder)
			}
			// Tried again as often as the deferral is checked: the
			// holder is remembered as this one's choice, but if this one
			// is nearer by more than the margin its next Evaluate still
			// wants the job, and takes it as soon as the holder lets go.
			wait = l.deferralCheck(d, now)
			d.next = now.Add(wait)
			if l.releases.Load() != releases {
				// A lease ended while this one was refused, perhaps
				// this one: it is checked at once rather than missed.
				d.next = now
				l.nudge()
			}
			l.choices.Remember(job, he.Holder)
		}
		l.retry[job] = now.Add(wait)
		l.mu.Unlock()
		if !errors.Is(err, ErrHeld) && ctx.Err() == nil {
			l.log.Warn("acquiring the job lease failed; retrying", "job", job, "err", err)
		}
		return
	}
	l.mu.Lock()
	l.held[job] = &heldJob{l: lj, deadline: l.deadline(sent, lj.TTL)}
	delete(l.holders, job)
	delete(l.deferrals, job)
	delete(l.retry, job)
	l.gained = append(l.gained, job)
	l.mu.Unlock()
	l.signal()
}

// handoffWindow is how long after it began deferring to a holder this
// Assigner checks often whether the holder let the job go: long enough
// for the holder to see a change of membership this one saw first.
func (l *Leader) handoffWindow() time.Duration { return 2 * l.cfg.Preference.Recheck }

// watchedDeferralCheck is the time until a deferral is next checked while
// the manager's release watch is in place: never, in effect, since the
// end of the holder's lease is told.
const watchedDeferralCheck = 24 * time.Hour

// deferralCheck is the time until d is next checked.
func (l *Leader) deferralCheck(d *deferral, now time.Time) time.Duration {
	if l.watching.Load() {
		return watchedDeferralCheck
	}
	if now.Sub(d.since) < l.handoffWindow() {
		return l.cfg.TTL / 10
	}
	return l.cfg.Preference.Recheck
}

// deadline is when a lease granted or renewed by a request sent at sent
// stops being used here.
func (l *Leader) deadline(sent int64, ttl time.Duration) int64 {
	return sent + int64(ttl-time.Duration(float64(ttl)*l.cfg.ClockMargin))
}

func (l *Leader) release(ctx context.Context, lj Job) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.TTL)
	defer cancel()
	if err := l.cfg.Manager.Release(rctx, lj); err != nil {
		l.log.Warn("releasing the job lease failed; it expires instead", "job", lj.Job, "epoch", lj.Epoch, "err", err)
	}
}

func (l *Leader) signal() {
	select {
	case l.changes <- struct{}{}:
	default:
	}
}

// maxParallelReleases bounds the releases in flight at once at shutdown,
// and maxParallelAcquires the deferrals checked (and jobs taken) at once.
const (
	maxParallelReleases = 16
	maxParallelAcquires = 16
)

// Run renews the held leases every TTL/3 and retries, every TTL/10, the
// wanted jobs whose holder gossip has failed, and checks the deferrals
// that are due, until ctx ends; then it
// releases every lease it holds, so that another Assigner takes the jobs
// at once rather than after their TTL.
//
// With a manager that tells of job leases ending (ReleaseWatcher), it
// watches them for as long as it runs, and checks a deferral when its
// holder's lease ends.
func (l *Leader) Run(ctx context.Context) error {
	renew := time.NewTicker(l.cfg.TTL / 3)
	defer renew.Stop()
	retry := time.NewTicker(l.cfg.TTL / 10)
	defer retry.Stop()
	if rw, ok := l.cfg.Manager.(ReleaseWatcher); ok {
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { l.watchReleases(wctx, rw) })
		defer func() {
			stop()
			wg.Wait()
		}()
	}
	for {
		select {
		case <-ctx.Done():
			l.releaseAll(ctx)
			return nil
		case <-renew.C:
			l.renewAll(ctx)
		case <-retry.C:
			l.retryWanted(ctx)
			l.checkDeferrals(ctx)
		case <-l.due:
			l.checkDeferrals(ctx)
		}
	}
}

// watchReleases keeps the manager's release watch in place until ctx
// ends: every deferral is checked each time the watch is (re)established,
// since an end may have gone untold before, and each deferral on a job
// whose lease ended is checked at once.
func (l *Leader) watchReleases(ctx context.Context, rw ReleaseWatcher) {
	for {
		err := rw.WatchReleases(ctx, func() {
			l.watching.Store(true)
			l.deferralsDue("")
		}, l.deferralsDue)
		l.watching.Store(false)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("watching the job leases failed; checking the jobs other assigners hold every preference recheck until the watch is back",
			"err", err)
		l.deferralsDue("")
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.cfg.Preference.Recheck):
		}
	}
}

// WatchingReleases reports whether the manager's release watch is in
// place: deferrals are then checked when the holder's lease ends, and not
// polled.
func (l *Leader) WatchingReleases() bool { return l.watching.Load() }

// deferralsDue makes the deferral on job due at once, or every deferral
// for job "", and nudges Run to check them.
func (l *Leader) deferralsDue(job string) {
	l.releases.Add(1)
	l.mu.Lock()
	n := 0
	if job == "" {
		for _, d := range l.deferrals {
			d.next = time.Time{}
			n++
		}
	} else if d := l.deferrals[job]; d != nil {
		d.next = time.Time{}
		d.ended = true
		n++
	}
	l.mu.Unlock()
	if n > 0 {
		l.nudge()
	}
}

func (l *Leader) nudge() {
	select {
	case l.due <- struct{}{}:
	default:
	}
}

// renewAll renews every live lease with one manager call (one etcd
// keep-alive for all of them). The call may take until the latest of their
// deadlines, so that one lease about to lapse does not cut the others'
// renewal short, and no longer than a renewal interval, so that a call
// that hangs does not hold up the next.
func (l *Leader) renewAll(ctx context.Context) {
	now := l.clock.Now()
	l.mu.Lock()
	held := make([]*heldJob, 0, len(l.held))
	for _, h := range l.held {
		if h.live(now) { // a lapsed one is taken again, not renewed
			held = append(held, h)
		}
	}
	l.mu.Unlock()
	if len(held) == 0 {
		return
	}
	ls := make([]Job, len(held))
	until := held[0].deadline
	for i, h := range held {
		ls[i] = h.l
		until = max(until, h.deadline)
	}
	sent := l.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, min(time.Duration(until-sent), l.cfg.TTL/3))
	// Failpoints lease/before-renew and lease/after-renew: an injected
	// error is a failed renewal of every lease (retried until their
	// deadlines).
	err := failpoint.Hit(rctx, "lease/before-renew")
	var out []Renewal
	if err == nil {
		out = l.cfg.Manager.RenewAll(rctx, ls)
		err = failpoint.Hit(rctx, "lease/after-renew")
	}
	cancel()
	var lost, lapsed, failed renewFailures
	l.mu.Lock()
	for i, h := range held {
		r := Renewal{Err: err}
		if err == nil {
			r = out[i]
		}
		if l.held[h.l.Job] != h {
			continue // released or lost meanwhile
		}
		switch {
		case r.Err == nil:
			l.held[h.l.Job] = &heldJob{l: r.Job, deadline: l.deadline(sent, r.Job.TTL)}
		case errors.Is(r.Err, ErrLost):
			delete(l.held, h.l.Job)
			lost.add(h, r.Err)
		case !h.live(l.clock.Now()):
			// Kept, lapsed (Held is false): the next acquire releases it
			// first, and Evaluate releases it for the preferred Assigner.
			lapsed.add(h, r.Err)
		case ctx.Err() == nil:
			if len(failed.jobs) == 0 {
				failed.deadlineIn = time.Duration(h.deadline - l.clock.Now()).Round(time.Millisecond)
			}
			failed.add(h, r.Err)
		}
	}
	l.mu.Unlock()
	lost.log(l.log, "job lease lost; no longer writing the job")
	lapsed.log(l.log, "job lease not renewed before its deadline; no longer writing the job")
	failed.log(l.log, "renewing the job lease failed; retrying until its deadline")
	if len(lost.jobs)+len(lapsed.jobs) > 0 {
		l.signal()
	}
}

// renewFailures are the leases of one renewal that failed one way, logged
// as one line however many they are (an etcd lease carrying 10,000 job
// keys expires for all of them at once).
type renewFailures struct {
	jobs       []string
	epoch      uint64        // the first one's
	err        error         // the first one's
	deadlineIn time.Duration // the first one's, when it is still live
}

func (f *renewFailures) add(h *heldJob, err error) {
	if len(f.jobs) == 0 {
		f.epoch, f.err = h.l.Epoch, err
	}
	f.jobs = append(f.jobs, h.l.Job)
}

func (f *renewFailures) log(log *slog.Logger, msg string) {
	switch n := len(f.jobs); {
	case n == 0:
	case n == 1:
		attrs := []any{"job", f.jobs[0], "epoch", f.epoch, "err", f.err}
		if f.deadlineIn != 0 {
			attrs = append(attrs, "deadline_in", f.deadlineIn)
		}
		log.Warn(msg, attrs...)
	default:
		slices.Sort(f.jobs)
		log.Warn(msg, "jobs", n, "first", f.jobs[:min(n, 5)], "err", f.err)
	}
}

func (l *Leader) retryWanted(ctx context.Context) {
	now, clk := time.Now(), l.clock.Now()
	l.mu.Lock()
	var jobs []string
	for job, want := range l.wanted {
		if h := l.held[job]; want && (h == nil || !h.live(clk)) && !now.Before(l.retry[job]) {
			jobs = append(jobs, job)
		}
	}
	l.mu.Unlock()
	slices.Sort(jobs)
	for _, job := range jobs {
		if ctx.Err() != nil {
			return
		}
		l.acquire(ctx, job)
	}
}

// checkDeferrals ends each due deferral whose holder no longer holds the
// job's lease: the job's choice is made afresh, and if it is this
// Assigner, it takes the lease at once.
func (l *Leader) checkDeferrals(ctx context.Context) {
	now := time.Now()
	l.mu.Lock()
	due := make(map[string]*deferral)
	for job, d := range l.deferrals {
		if !now.Before(d.next) {
			due[job] = d
		}
	}
	l.mu.Unlock()
	// In parallel: when an Assigner dies, the other Assigners check and
	// take every job it held at once.
	var g errgroup.Group
	g.SetLimit(maxParallelAcquires)
	for _, job := range slices.Sorted(maps.Keys(due)) {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			l.checkDeferral(ctx, job, due[job])
			return nil
		})
	}
	_ = g.Wait()
}

// checkDeferral ends the deferral d on job unless its holder still holds
// the job's lease, and takes the job if this Assigner wants it.
func (l *Leader) checkDeferral(ctx context.Context, job string, d *deferral) {
	l.mu.Lock()
	holder, ended := d.holder, d.ended
	l.mu.Unlock()
	lj, err := Job{}, error(ErrNotHeld)
	if !ended {
		lj, err = l.cfg.Manager.Holder(ctx, job)
	}
	l.mu.Lock()
	if l.deferrals[job] != d {
		l.mu.Unlock()
		return // ended or replaced meanwhile
	}
	if (err == nil && lj.Holder == holder) || (err != nil && !errors.Is(err, ErrNotHeld)) {
		// Still held by it, or the manager did not answer.
		d.next = time.Now().Add(l.deferralCheck(d, time.Now()))
		l.mu.Unlock()
		return
	}
	delete(l.deferrals, job)
	if err == nil {
		l.holders[job] = lj.Holder
	} else {
		delete(l.holders, job)
	}
	delete(l.retry, job)
	l.mu.Unlock()
	if l.choices.Current(job) == holder {
		l.choices.Forget(job)
	}
	_, want := l.Preferred(job)
	l.mu.Lock()
	l.wanted[job] = want
	l.mu.Unlock()
	if want {
		l.log.Info("the job's holder let it go; taking it", "job", job, "holder", holder)
		l.acquire(ctx, job)
	}
}

func (l *Leader) releaseAll(ctx context.Context) {
	l.mu.Lock()
	held := make([]Job, 0, len(l.held))
	for _, h := range l.held {
		held = append(held, h.l)
	}
	clear(l.held)
	l.mu.Unlock()
	var g errgroup.Group
	g.SetLimit(maxParallelReleases)
	for _, lj := range held {
		g.Go(func() error {
			l.release(ctx, lj)
			return nil
		})
	}
	_ = g.Wait()
	if len(held) > 0 {
		l.log.Info("released the job leases on shutdown", "jobs", len(held))
	}
}

// adopt makes job this Assigner's for AdoptFor, renewed while the signal
// lasts, whatever its estimates say; see Forwarded and watchOrphan.
func (l *Leader) adopt(job, why string) {
	l.mu.Lock()
	renewing := l.adoptions[job].After(time.Now())
	l.adoptions[job] = time.Now().Add(l.cfg.AdoptFor)
	l.mu.Unlock()
	if !renewing {
		l.log.Warn("adopting the job: another assigner is preferred in this assigner's view, but "+why, "job", job,
			"for", l.cfg.AdoptFor)
		l.signal()
	}
}

// Adopting reports whether this Assigner has adopted job: it takes the
// job's lease although it prefers another Assigner (see Forwarded).
func (l *Leader) Adopting(job string) bool { return l.adopting(job) }

// adopting reports whether job's adoption lasts, without ending one that
// has lapsed, for readers.
func (l *Leader) adopting(job string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.adoptions[job].After(time.Now())
}

func (l *Leader) adopted(job string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.adoptions[job]
	if ok && !until.After(time.Now()) {
		delete(l.adoptions, job)
		l.log.Info("the job's adoption lapsed: no write was forwarded here for it; it goes to its preferred assigner", "job", job)
		return false
	}
	return ok
}

// watchOrphan adopts job when it has been Stale for OrphanAfter while
// another Assigner is preferred: nobody is generating it.
func (l *Leader) watchOrphan(job string) {
	stale := l.cfg.Stale != nil && l.cfg.Stale(job)
	l.mu.Lock()
	since, seen := l.orphans[job]
	switch {
	case !stale:
		delete(l.orphans, job)
	case !seen:
		l.orphans[job] = time.Now()
	}
	l.mu.Unlock()
	if stale && seen && time.Since(since) >= l.cfg.OrphanAfter {
		l.adopt(job, "the job's stored assignment has routed keys to a dead task for "+time.Since(since).Round(time.Millisecond).String())
	}
}
