package assigner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/failpoint"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/guard"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/tlsconfig"
)

// maxCommitAttempts bounds the read–rebase–retry loop on a conflicting
// conditional write (another Assigner committed first).
const maxCommitAttempts = 5

// trigger says why a decision is taken, which decides what is worth
// committing.
type trigger int

const (
	// Membership or configuration changed: any change is committed, since
	// departed tasks must lose their keys and the configuration must hold.
	triggerChange trigger = iota
	// The rebalance interval passed: only a change that lowers the
	// imbalance by more than the measurement's noise is committed
	// (assign.SignificantGain).
	triggerLoad
	// This Assigner has become the job's preferred one: a new generation
	// is committed even when nothing else changes, so the hand-over is
	// visible and a stale Assigner's next write conflicts.
	triggerTakeover
	// An operator set the job's configuration (job set): the algorithm
	// decides under it at once, with the measured load, and whatever it
	// changes is committed, so slices per task, churn budgets and factors
	// apply in full without waiting for a load decision that must also
	// lower the imbalance.
	triggerConfig
	// A task holds a newer generation of the job, in its store's
	// incarnation, than the store: the store went back (see ahead.go).
	// What membership requires is committed, even when nothing changes,
	// at a generation above the task's. Any decision but a make-before-
	// break step becomes this one while the store is behind.
	triggerRenumber
)

func (t trigger) String() string {
	switch t {
	case triggerLoad:
		return "load"
	case triggerTakeover:
		return "takeover"
	case triggerFlip:
		return "make-before-break"
	case triggerConfig:
		return "configuration"
	case triggerRenumber:
		return "renumber"
	}
	return "change"
}

// Members is the part of the gossip node the Assigner reads: the
// certificate-backed view of members, and a signal when it changes.
type Members interface {
	Peers() []gossip.Peer
	Changes() (<-chan struct{}, func())
}

// ErrStore is a store the Assigner cannot write through: one that cannot
// fence commits by the job lease.
var ErrStore = errors.New("assigner: the store cannot fence commits")

// Assigner generates, stores and publishes assignments for the jobs whose
// lease it holds (see lease.Leader: it tries to take the jobs it is the
// preferred Assigner of), and serves every other job it knows from the
// store, forwarding writes to that job's lease holder.
type Assigner struct {
	gossipKeys func() [][]byte // see Config.GossipKeys
	taskKeys   taskKeyReports  // the keys tasks said they held when registering
	log        *slog.Logger
	self       string // this node's gossip name
	store      storage.Store
	fencer     storage.Fencer // store's fenced commits; nil only in tests without a store
	leases     lease.Manager  // job leases, and the guards and bridges tasks read
	leader     *lease.Leader
	members    Members
	pref       lease.Preference
	poll       time.Duration                                     // standby store reads, when the store cannot watch
	rpcClients *rpc.Peers                                        // forwarded writes
	register   func(gossip.Peer, *gossip.TaskAttributes, string) // records a task's registration; nil without TLS: every member is believed
	rawPeers   func() []gossip.Peer
	forwarded  atomic.Uint64 // writes forwarded to the preferred Assigner
	delay      time.Duration
	grace      time.Duration
	interval   time.Duration // load-driven decisions; 0: never, and load is ignored
	stopping   <-chan struct{}
	loaded     chan struct{} // closed once Run has loaded the stored jobs

	kick    chan struct{} // a job's configuration changed; see kickDecision
	configs chan string   // jobs whose configuration an operator set; see setJobConfig
	flips   chan string   // a make-before-break deadline passed; see handoff.go
	rounds  chan string   // every task of a job reported since its last load decision
	aheads  chan string   // a task of a job holds a newer generation than the store; see ahead.go

	loads *loads                         // tasks' latest load reports; see load.go
	live  lease.PerVersion[*memberIndex] // the membership by job; see load.go
	// loadHistory records each job's load over the key space for
	// GetLoadHistory; see loadhistory.go.
	loadHistory *loadHistory
	// started is when Run began (by loads.now): until loadWarmup has
	// passed, a job's load-driven decision waits for the reports of every
	// task it serves (load.go). Zero before Run.
	started atomic.Int64

	metrics      *jobMetrics   // nil without metrics; set before Run (jobmetrics.go)
	storeMetrics *storeMetrics // nil without metrics; set before Run (metrics.go)

	// setConfig orders SetJobConfig calls, so the configuration stored
	// last is the one applied last.
	setConfig sync.Mutex

	mu   sync.Mutex
	jobs map[string]*assignerJob
	// forgets counts the jobs forgotten (forgetJob), so that job can tell
	// a store read that may predate a deletion; see jobdelete.go. Guarded
	// by mu.
	forgets uint64

	// Limits; see limits.go.
	maxJobs, maxSlices int
	reports            *reportLimiter // load reports per task
	readyReports       *reportLimiter // readiness reports per task
	leaseCalls         *reportLimiter // LeaseService calls per task
	freshReads         *rate.Limiter  // hasLiveTask's reads of gossip's list

	// Strong jobs' guard drivers (guard.go): runCtx is Run's, set when it
	// starts; guards and runCtx are guarded by mu; Run waits for drivers.
	runCtx  context.Context
	guards  map[string]*guardDriver
	drivers sync.WaitGroup
	guard   guard.Driver // strong jobs' guard moves (guard.go)
	// replicatedWarned: the generation each strong job was last warned
	// about for giving a key to several tasks. Guarded by mu.
	replicatedWarned map[string]uint64
	// views holds each job's load view for JobService and metrics.
	views loadViews
	// retakes: when a job whose lease this Assigner holds but whose
	// takeover failed is next tried (takeover). Guarded by mu.
	retakes    map[string]time.Time
	refusalLog time.Duration
	ignoredLog struct {
		sync.Mutex
		last time.Time
	}
}

// Config is what an Assigner needs of the agent's configuration; the
// agent's Config documents each field by its flag.
type Config struct {
	Logger *slog.Logger
	// NodeName is this node's gossip name.
	NodeName   string
	Preference lease.Preference
	// TLS, when not nil, is how the Assigner dials other Assigners to
	// forward writes.
	TLS                 *tlsconfig.Source
	StandbyPollInterval time.Duration
	RebalanceDelay      time.Duration
	StartupGrace        time.Duration
	RebalanceInterval   time.Duration
	LoadHalfLife        time.Duration
	LoadHistoryInterval time.Duration
	JobLeaseTTL         time.Duration
	MaxJobs             int
	MaxSlicesPerJob     int
	// MaxLoadReportsPerSecond and LoadReportBurst size each task's bucket
	// of load reports, and its bucket of readiness reports.
	MaxLoadReportsPerSecond float64
	LoadReportBurst         int
	DisableBridge           bool
	BridgeWait              time.Duration
	// RawPeers is gossip's whole view, before certificates back any claim,
	// for matching a task's registration; Register records one, with the
	// task's attributes when it gave them (nil: its gossip tags are used)
	// (nil without TLS, where every member is believed).
	RawPeers func() []gossip.Peer
	Register func(p gossip.Peer, attrs *gossip.TaskAttributes, by string)
	// GossipKeys returns this node's gossip keys, primary first (nil
	// without encryption), which registrations hand to tasks; nil, none.
	GossipKeys func() [][]byte
	// RefusalLogInterval is the least time between two log lines about
	// jobs ignored over MaxJobs.
	RefusalLogInterval time.Duration
}

// DefaultConfig returns an Assigner's production settings; the agent's
// DefaultConfig starts from them.
func DefaultConfig() Config {
	return Config{
		Logger:              slog.New(slog.DiscardHandler),
		RebalanceDelay:      500 * time.Millisecond,
		StartupGrace:        3 * time.Second,
		StandbyPollInterval: 500 * time.Millisecond,
		JobLeaseTTL:         lease.DefaultJobTTL,
		BridgeWait:          time.Second,
		RebalanceInterval:   4 * time.Second,
		LoadHalfLife:        10 * time.Second,
		LoadHistoryInterval: 5 * time.Second,
		MaxJobs:             10_000,
		// 100,000 slices encode to about 1 MB, within etcd's default
		// request size, and are 150 slices per task for 666 tasks.
		MaxSlicesPerJob: 100_000,
		// The Slicelet reports once per 5 s window by default.
		MaxLoadReportsPerSecond: 10,
		LoadReportBurst:         20,
		RawPeers:                func() []gossip.Peer { return nil },
		RefusalLogInterval:      10 * time.Second,
	}
}

// New returns an Assigner of the jobs in store, not yet running; leases
// grants its job leases, members is the certificate-backed gossip view,
// and stopping is closed when the agent begins to shut down.
func New(cfg Config, store storage.Store, leases lease.Manager, members Members, stopping <-chan struct{}) *Assigner {
	a := &Assigner{
		log:         cfg.Logger.With("role", "assigner"),
		self:        cfg.NodeName,
		store:       store,
		members:     members,
		pref:        cfg.Preference.WithDefaults(),
		poll:        cfg.StandbyPollInterval,
		rpcClients:  rpc.NewPeers(cfg.TLS),
		delay:       cfg.RebalanceDelay,
		grace:       cfg.StartupGrace,
		interval:    cfg.RebalanceInterval,
		stopping:    stopping,
		register:    cfg.Register,
		gossipKeys:  cfg.GossipKeys,
		rawPeers:    cfg.RawPeers,
		refusalLog:  cfg.RefusalLogInterval,
		loaded:      make(chan struct{}),
		kick:        make(chan struct{}, 1),
		flips:       make(chan string, flipSignals),
		rounds:      make(chan string, flipSignals),
		aheads:      make(chan string, flipSignals),
		configs:     make(chan string, flipSignals),
		jobs:        make(map[string]*assignerJob),
		loads:       newLoads(cfg.LoadHalfLife, cfg.RebalanceInterval/2),
		loadHistory: newLoadHistory(cfg.LoadHistoryInterval),
		maxJobs:     cfg.MaxJobs,
		maxSlices:   cfg.MaxSlicesPerJob,
		reports:     newReportLimiter(cfg.MaxLoadReportsPerSecond, cfg.LoadReportBurst),
		// Readiness reports come once per generation that gives a task
		// keys; they get a bucket of the same size, so a task's first
		// readiness report never spends the token of its first load report.
		readyReports: newReportLimiter(cfg.MaxLoadReportsPerSecond, cfg.LoadReportBurst),
	}
	a.fencer, _ = store.(storage.Fencer)
	a.leases = leases
	a.guards = make(map[string]*guardDriver)
	a.replicatedWarned = make(map[string]uint64)
	a.retakes = make(map[string]time.Time)
	a.guard = guard.Driver{Leases: a.leases, Bridged: !cfg.DisableBridge, BridgeWait: cfg.BridgeWait, Log: a.log}
	a.leaseCalls = newReportLimiter(leaseCallsPerSecond, leaseCallBurst)
	a.freshReads = rate.NewLimiter(freshReadsPerSecond, freshReadBurst)
	var rtt lease.RTTFunc // nil when membership estimates no distances
	if p, ok := members.(proximity); ok {
		rtt = p.RTT
	}
	var version func() uint64 // nil when membership does not count its changes
	if v, ok := members.(MembersVersion); ok {
		version = v.Version
	}
	a.leader = lease.NewLeader(lease.LeaderConfig{
		Self:        cfg.NodeName,
		Manager:     leases,
		TTL:         cfg.JobLeaseTTL,
		Preference:  a.pref,
		Members:     members.Peers,
		Version:     version,
		RTT:         rtt,
		Stale:       a.outOfDate,
		OrphanAfter: 10*a.pref.Recheck + 10*a.delay,
		Logger:      a.log,
	})
	return a
}

// load carries every stored job forward: its configuration and its current
// assignment are served at once, before any new decision.
func (a *Assigner) load(ctx context.Context) error {
	names, err := a.store.Jobs(ctx)
	if err != nil {
		return fmt.Errorf("assigner: list stored jobs: %w", err)
	}
	for _, name := range names {
		_, err := a.job(ctx, name)
		if errors.Is(err, rpc.ErrUnknownJob) {
			continue // deleted since it was listed
		}
		if errors.Is(err, rpc.ErrTooManyJobs) {
			// A record with neither configuration nor assignment holds
			// nothing to serve; it is not worth stopping for.
			a.log.Warn("stored job not loaded", "job", name, "err", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// loadRetrying loads the stored jobs, waiting out a store that does not
// answer (etcd down or unreachable since the agent opened it) with a
// capped backoff, so that a short outage at startup does not stop the
// agent. Other errors, such as unreadable stored data, are returned. It
// returns nil, having loaded nothing, when ctx ends.
func (a *Assigner) loadRetrying(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := a.load(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || !errors.Is(err, storage.ErrUnavailable) {
			return err
		}
		a.log.Warn("the store does not answer; retrying before deciding any job", "retry_in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// tasksOf lists the job's tasks known to gossip, sorted by name; with
// aliveOnly, only those that are alive (failed and leaving tasks are out).
func (a *Assigner) tasksOf(job string, aliveOnly bool) []assign.Task {
	if aliveOnly {
		if idx, ok := a.membersNow(); ok {
			return slices.Clone(idx.tasks[job])
		}
	}
	return jobTasks(a.members.Peers(), job, aliveOnly)
}

// jobTasks lists the job's tasks among peers, sorted by name; with
// aliveOnly, only the alive ones. Two members claiming one task name:
// the one whose gossip name sorts first is kept, so every Assigner keeps
// the same one whatever order its membership lists them in.
func jobTasks(peers []gossip.Peer, job string, aliveOnly bool) []assign.Task {
	type claim struct {
		member string
		task   assign.Task
	}
	var claims []claim
	for _, p := range peers {
		if !p.Has(gossip.RoleTask) || p.Job != job || (aliveOnly && p.Status != gossip.StatusAlive) {
			continue
		}
		claims = append(claims, claim{member: p.Name, task: assign.Task{Name: p.Task, Addr: p.RPCAddr, Capacity: p.Capacity, MemoryLimit: float64(p.MemoryLimit), Draining: p.Draining}})
	}
	slices.SortFunc(claims, func(x, y claim) int {
		if c := strings.Compare(x.task.Name, y.task.Name); c != 0 {
			return c
		}
		return strings.Compare(x.member, y.member)
	})
	claims = slices.CompactFunc(claims, func(x, y claim) bool { return x.task.Name == y.task.Name })
	if len(claims) == 0 {
		return nil
	}
	tasks := make([]assign.Task, len(claims))
	for i, c := range claims {
		tasks[i] = c.task
	}
	return tasks
}

// Run reacts to membership and configuration changes until ctx ends. Each
// burst of changes is coalesced over the rebalance delay into one decision
// per job. Every rebalance interval, each job with load reports is
// rebalanced on its load. Until the startup grace has passed, gossip may
// not yet know every live task, so the stored assignments are served
// unchanged.
//
// Only the jobs this Assigner is preferred for are decided on. Preferences
// are re-evaluated at every membership change and every Preference.Recheck
// (coordinates move without membership events); a job this Assigner has
// become preferred for is taken over at once, without waiting for the
// rebalance delay. Every job's stored record is followed, through the
// store's watch when it has one and by polling otherwise.
func (a *Assigner) Run(ctx context.Context) error {
	defer a.rpcClients.CloseIdle()
	if err := a.loadRetrying(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	close(a.loaded)
	a.started.Store(a.loads.now().UnixNano())
	// The leader renews the job leases while the Assigner decides, and
	// releases them once it has stopped, so that another Assigner takes
	// the jobs over at once.
	leaderCtx, stopLeader := context.WithCancel(context.WithoutCancel(ctx))
	leaderDone := make(chan struct{})
	go func() {
		defer close(leaderDone)
		_ = a.leader.Run(leaderCtx)
	}()
	defer func() {
		stopLeader()
		<-leaderDone
	}()
	// The guard drivers stop, and are waited for, before the leases go.
	driverCtx, stopDrivers := context.WithCancel(ctx)
	a.mu.Lock()
	a.runCtx = driverCtx
	a.mu.Unlock()
	defer func() {
		stopDrivers()
		a.stopFlips()
		a.drivers.Wait()
	}()
	changes, unsubscribe := a.members.Changes()
	defer unsubscribe()
	recheck := time.NewTicker(a.pref.Recheck)
	defer recheck.Stop()
	var watched <-chan string // store changes; nil when the store cannot watch
	var poll <-chan time.Time // nil while the store watches
	var pollTicker *time.Ticker
	defer func() {
		if pollTicker != nil {
			pollTicker.Stop()
		}
	}()
	startPoll := func() {
		pollTicker = time.NewTicker(a.poll)
		poll = pollTicker.C
	}
	if w, ok := a.store.(storage.Watcher); ok {
		watched = w.Watch(ctx, "")
	} else {
		startPoll()
	}

	grace := time.NewTimer(a.grace)
	defer grace.Stop()
	var tick <-chan time.Time // nil, never ready, when load balancing is off
	if a.interval > 0 {
		ticker := time.NewTicker(a.interval)
		defer ticker.Stop()
		tick = ticker.C
	}
	var sample <-chan time.Time // nil, never ready, when load history is off
	if a.loadHistory.interval > 0 {
		ticker := time.NewTicker(a.loadHistory.interval)
		defer ticker.Stop()
		sample = ticker.C
	}
	settle := time.NewTimer(0)
	settle.Stop()
	defer settle.Stop()
	// armed: a decision is scheduled. The first change of a burst arms the
	// timer and later ones ride along, so a steady trickle of gossip
	// updates cannot postpone a decision for longer than the delay.
	ready, armed := false, false
	arm := func(d time.Duration) {
		if ready {
			settle.Reset(d)
			armed = true
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-grace.C:
			ready = true
			a.evaluate(ctx, ready)
			arm(0)
		case <-changes:
			a.pruneLoads()
			a.evaluate(ctx, ready)
			if !armed {
				arm(a.delay)
			}
		case <-recheck.C:
			a.evaluate(ctx, ready)
		case <-a.leader.Changes():
			// A lease was gained (take the job over) or lost.
			a.evaluate(ctx, ready)
		case name, ok := <-watched:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				a.log.Warn("the store's watch ended; polling it instead", "interval", a.poll)
				watched = nil
				startPoll()
				continue
			}
			if err := a.refresh(ctx, name); err != nil && ctx.Err() == nil {
				a.log.Warn("reading a changed job from the store failed", "job", name, "err", err)
			}
		case <-poll:
			a.refreshAll(ctx)
		case name := <-a.flips:
			if _, held := a.leader.Held(name); held {
				if err := a.reconcile(ctx, name, triggerFlip); err != nil {
					a.log.Warn("make-before-break: dropping the losing tasks failed; retrying at the next tick", "job", name, "err", err)
				}
			}
		case <-a.kick:
			a.evaluate(ctx, ready)
			arm(0)
		case name := <-a.configs:
			a.evaluate(ctx, ready)
			if !ready {
				continue // the decisions after the grace use the configuration
			}
			// One decision under the new configuration: the algorithm's
			// when the job's membership is settled, else what membership
			// and the configuration require.
			if err := a.reconcile(ctx, name, triggerConfig); err != nil {
				a.log.Error("deciding under the job's new configuration failed; retrying", "job", name, "err", err)
				arm(retryDelay)
			}
		case name := <-a.aheads:
			// A task holds a newer generation than the store: the next
			// commit continues above it, now (after the grace, the first
			// decision does).
			if ready {
				if err := a.reconcile(ctx, name, triggerRenumber); err != nil {
					a.log.Error("committing above the generation a task holds failed; retrying", "job", name, "err", err)
					arm(retryDelay)
				}
			}
		case name := <-a.rounds:
			// A round of load reports is in: decide on it now, as the
			// tick would (a pending membership decision goes first).
			if ready && !armed {
				a.balance(ctx, name)
			}
		case <-tick:
			// A pending membership decision goes first; the load is
			// weighed at the next tick, on reports measured after it.
			if ready && !armed {
				for _, name := range a.overdueFlips() {
					select {
					case a.flips <- name:
					default:
					}
				}
				a.balanceAll(ctx)
			}
		case now := <-sample:
			a.sampleLoads(now)
		case <-settle.C:
			armed = false
			if !a.reconcileAll(ctx) {
				// A failed decision (say, a store error) is retried
				// without waiting for another membership change.
				arm(max(a.delay, retryDelay))
			}
		}
	}
}

// kickDecision asks Run for a decision on every job this Assigner leads,
// at once: a job's configuration changed.
func (a *Assigner) kickDecision() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// retryDelay paces retries of a failed decision.
const retryDelay = time.Second

// reconcileAll takes a decision for every known job and reports whether
// all of them succeeded.
func (a *Assigner) reconcileAll(ctx context.Context) bool {
	ok := true
	for _, name := range a.jobNames() {
		if ctx.Err() != nil {
			return true
		}
		if _, held := a.leader.Held(name); !held {
			continue
		}
		if err := a.reconcile(ctx, name, triggerChange); err != nil {
			a.log.Error("rebalance failed; keeping the current assignment and retrying", "job", name, "err", err)
			ok = false
		}
	}
	return ok
}

// balanceAll takes a load-driven decision for every job with load
// reports. A failure is logged and retried at the next tick.
func (a *Assigner) balanceAll(ctx context.Context) {
	for _, name := range a.loads.reportingJobs() {
		if ctx.Err() != nil {
			return
		}
		a.balance(ctx, name)
	}
}

// balance takes a load-driven decision on one job, if this Assigner
// leads it and its load was measured after its last commit. A failure is
// logged and retried at the next tick or round of reports.
func (a *Assigner) balance(ctx context.Context, name string) {
	if _, held := a.leader.Held(name); !held {
		return
	}
	a.mu.Lock()
	j := a.jobs[name]
	var since time.Time
	if j != nil {
		since = j.committed
	}
	a.mu.Unlock()
	// Decide on load measured under the assignment being served, so one
	// decision's moves are not repeated or undone on a picture half from
	// before it.
	if !a.loads.fresh(name, since) {
		a.log.Debug("load decision waits for reports after the last commit", "job", name)
		return
	}
	// An Assigner that started moments ago has not heard from every task
	// yet: a task without a report would look idle.
	if a.warmingUp() {
		if n := a.unknownLoad(name, j); n > 0 {
			a.log.Debug("load decision waits until every task serving the job has reported here",
				"job", name, "without_report", n)
			return
		}
	}
	a.loads.decide(name, a.loads.now())
	if err := a.reconcile(ctx, name, triggerLoad); err != nil {
		a.log.Error("load-driven rebalance failed; keeping the current assignment until the next interval", "job", name, "err", err)
	}
}

// reconcile takes one decision for a job whose lease this Assigner holds:
// read the assignment, compute the next one from the live tasks and the
// measured load, and store it conditionally on the one read and on the
// lease's epoch. On a conflict it re-reads the stored assignment and
// starts over (§4.1). A load-driven decision is committed only when it
// lowers the imbalance. Without the lease, or once it is lost, it does
// nothing.
func (a *Assigner) reconcile(ctx context.Context, name string, why trigger) error {
	if _, held := a.leader.Held(name); !held {
		return nil
	}
	j, err := a.job(ctx, name)
	if errors.Is(err, rpc.ErrUnknownJob) {
		a.dropLease(ctx, name)
		return nil
	}
	if err != nil {
		return err
	}
	live := a.tasksOf(name, true)
	if len(live) == 0 && (why != triggerTakeover && a.aheadOf(j, j.pub.Current()) == 0 || j.pub.Current() == nil) {
		// Keep routing on the last assignment: clients lose nothing by it,
		// and the next task to join takes the whole key space.
		return nil
	}
	a.mu.Lock()
	cfg := a.capSlices(j.cfg)
	a.mu.Unlock()
	var load assign.Load
	if a.interval > 0 {
		load = a.jobLoad(name)
	}
	for attempt := 1; attempt <= maxCommitAttempts; attempt++ {
		cur := j.pub.Current()
		ahead := a.aheadOf(j, cur)
		if ahead > 0 && why != triggerFlip {
			why = triggerRenumber
		}
		var next *assign.Assignment
		var decision assign.Decision
		algorithm := ""
		pending, wait := a.waitFlip(j, cur, live, cfg, why)
		switch {
		case wait:
			return nil // the second step of a make-before-break decision goes first
		case why == triggerFlip && pending == nil:
			return nil // abandoned: another decision came first
		}
		// cur's imbalance under load, and its hottest task's reports.
		before, evidence := a.imbalance(name, cur, load, live, why)
		switch {
		case why == triggerFlip:
			next, decision = flipDecision(pending, cur)
		case len(live) == 0:
			next = takeoverAssignment(cur) // only a takeover gets here
		default:
			if why == triggerLoad && futile(cur, load, live, before, evidence) {
				a.metrics.skipped(name)
				a.log.Debug("load decision not computed: even a perfect balance would not lower the imbalance by more than the measurement's noise",
					"job", name, "generation", cur.Generation, "imbalance", before, "hottest_task_events", evidence.Events, "hottest_task_share", evidence.Share)
				return nil
			}
			algorithm = a.algorithmFor(cur, live, cfg, why)
			began := time.Now()
			next, decision, err = a.decide(name, cur, live, load, cfg, why)
			a.metrics.decided(name, time.Since(began))
			if err != nil {
				return fmt.Errorf("compute assignment: %w", err)
			}
			if !decision.Changed && why != triggerTakeover && why != triggerRenumber {
				return nil
			}
		}
		if ahead > 0 && why == triggerRenumber {
			// next is the decision's own (the algorithms and
			// takeoverAssignment return a new assignment): renumbering it
			// touches nothing another holds.
			next.Generation = max(next.Generation, ahead+1)
		}
		after := assign.ImbalanceWith(next, load, live)
		var prevGen uint64
		if cur != nil {
			prevGen = cur.Generation
		} else {
			before = after
		}
		if why == triggerLoad {
			if !significant(cur, next, load, live, before, after, evidence) {
				a.log.Debug("load-driven decision not committed: it would not lower the imbalance by more than the measurement's noise",
					"job", name, "generation", prevGen, "imbalance_before", before, "imbalance_after", after,
					"hottest_task_events", evidence.Events, "hottest_task_share", evidence.Share, "churn", decision.Churn, "moves", len(decision.Moves))
				return nil
			}
		}
		entry := a.historyEntry(name, cur, cfg.Controls(live), why, algorithm, decision, load, before, after)
		if mid := a.makeBeforeBreak(j, cfg, cur, next, live, why); mid != nil {
			a.log.Info("make-before-break: the gaining tasks serve beside the losing ones until the handoff deadline",
				"job", name, "generation", mid.Generation, "deadline_ms", cfg.HandoffDeadlineMS)
			next = mid
			entry.Detail += "; make-before-break: the gaining tasks serve beside the losing ones until they are ready"
			entry.ImbalanceAfter = finite(assign.ImbalanceWith(mid, load, live))
		}
		unknown := 0
		if a.interval > 0 {
			unknown = a.unknownLoad(name, j)
		}
		if n := unknown; n > 0 {
			// The imbalance of a partial picture is no figure: a takeover
			// by an Assigner that just started would record 4.000 for
			// four tasks of which one has reported here.
			entry.ImbalanceBefore, entry.ImbalanceAfter = 0, 0
			entry.Detail += fmt.Sprintf("; imbalance not recorded: %d task(s) serving the job had not reported load to this assigner yet", n)
		}
		// The lease is checked again just before the write: one that ran
		// out while the decision was computed stops it here, and one
		// another Assigner took since is refused by the store's fence.
		held, ok := a.leader.Held(name)
		if !ok {
			a.log.Warn("job lease ran out before the commit; not writing the job", "job", name, "generation", next.Generation)
			return nil
		}
		// Ordered against DeleteJob (which holds setConfig while it
		// deletes the job from the store and forgets it): a decision
		// taken before a deletion commits before it, and the deletion
		// removes what it committed, or finds the job forgotten and
		// writes nothing. The bbolt fence compares the stored epoch
		// only, which releasing the lease does not change, and a
		// commit over generation 0 would create the deleted job again.
		a.setConfig.Lock()
		a.mu.Lock()
		forgotten := a.jobs[name] != j
		a.mu.Unlock()
		if forgotten {
			a.setConfig.Unlock()
			a.log.Info("job deleted while its decision was taken; not writing it", "job", name)
			return nil
		}
		err = a.commit(ctx, name, held.Epoch, prevGen, next, entry)
		if err == nil {
			j.pub.Publish(next, time.Now())
		}
		a.setConfig.Unlock()
		if errors.Is(err, storage.ErrFenced) {
			a.leader.Lost(name, held.Epoch, err)
			return nil
		}
		if errors.Is(err, storage.ErrConflict) {
			a.log.Warn("assignment changed in the store since it was read; rebasing", "job", name, "attempt", attempt, "err", err)
			rec, lerr := storage.LoadCurrent(ctx, a.store, name)
			if errors.Is(lerr, storage.ErrNotFound) {
				return nil // deleted meanwhile; see jobdelete.go
			}
			if lerr != nil {
				return fmt.Errorf("re-read after conflict: %w", lerr)
			}
			if rec.Current != nil && !a.wentBack(name, j, rec.Current) {
				j.pub.Publish(rec.Current, time.Time{}) // another's commit: its time is not stored
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("store generation %d: %w", next.Generation, err)
		}
		// The commit time travels with the generation to Distributors
		// and clients (WatchAssignmentResponse.committed_unix_nano); the
		// store does not keep it.
		a.mu.Lock()
		j.committed = a.loads.now()
		if why == triggerFlip {
			setPending(j, nil)
		}
		a.mu.Unlock()
		a.metrics.committed(name, entry)
		a.moveGuard(name)
		a.log.Info("assignment committed", "job", name, "generation", next.Generation, "epoch", held.Epoch, "trigger", why.String(),
			"tasks", len(next.Tasks), "slices", len(next.Slices), "imbalance_before", entry.ImbalanceBefore, "imbalance_after", entry.ImbalanceAfter,
			"tasks_without_load", unknown, "load", load.Total(), "churn", decision.Churn, "moves", len(decision.Moves))
		// A decision over a million slices records some 10^5 moves; their
		// arguments would be built even for a logger that drops them.
		if a.log.Enabled(ctx, slog.LevelDebug) {
			for _, m := range decision.Moves {
				a.log.Debug("move", "job", name, "generation", next.Generation, "kind", m.Kind, "start", m.Start, "end", m.End,
					"from", m.From, "to", m.To, "reason", m.Reason)
			}
		}
		return nil
	}
	return fmt.Errorf("gave up after %d conflicting commits", maxCommitAttempts)
}

// commit stores next fenced by the job lease's epoch, recording the
// decision in the job's history when the store keeps one.
func (a *Assigner) commit(ctx context.Context, job string, epoch, prevGen uint64, next *assign.Assignment, e storage.HistoryEntry) error {
	if a.fencer == nil {
		return fmt.Errorf("%w: the store (%T) cannot fence commits by the job lease", ErrStore, a.store)
	}
	// Failpoints assigner/before-commit and assigner/after-commit: an
	// injected error after the write is a commit whose answer was lost.
	if err := failpoint.Hit(ctx, "assigner/before-commit"); err != nil {
		return err
	}
	start := time.Now()
	var err error
	if h, ok := a.store.(storage.Historian); ok {
		err = h.CommitRecorded(ctx, job, epoch, prevGen, next, e)
	} else {
		err = a.fencer.CommitFenced(ctx, job, epoch, prevGen, next)
	}
	a.storeMetrics.commitDone(time.Since(start), err)
	if err == nil {
		err = failpoint.Hit(ctx, "assigner/after-commit")
	}
	return err
}

// Loaded is closed once Run has loaded the stored jobs.
func (a *Assigner) Loaded() <-chan struct{} { return a.loaded }

// Preferred is the Assigner this one prefers for job now, "" when it has
// made no choice.
func (a *Assigner) Preferred(job string) string { return a.leader.PreferredName(job) }

// Leads reports whether this Assigner holds job's lease and has taken
// the job over under it: it generates the job's assignments.
func (a *Assigner) Leads(job string) bool {
	held, ok := a.leader.Held(job)
	if !ok {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	j := a.jobs[job]
	return j != nil && j.takenOver == held.Epoch
}

// Forwarded counts the load reports and configuration changes this
// Assigner forwarded to another.
func (a *Assigner) Forwarded() uint64 { return a.forwarded.Load() }

// Collectors makes the Assigner time its commits and returns its
// metrics, to register; call it before Run.
func (a *Assigner) Collectors() []prometheus.Collector {
	m := newStoreMetrics()
	a.storeMetrics = m
	return append([]prometheus.Collector{m.duration, m.conflicts, m.errors}, a.metricCollectors()...)
}
