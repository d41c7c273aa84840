package slicelet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/leaseclock"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/subset"
)

// joinRetryInterval spaces join attempts while no slicerd node answers.
const joinRetryInterval = time.Second

// Listener learns which key ranges this task gained and lost.
type Listener interface {
	// OnChangedSlices is called with the ranges newly assigned to this task
	// and those no longer assigned to it, each sorted and with adjacent
	// ranges merged (so Tasks is nil). Calls are serial; the slices are
	// shared between listeners and must not be modified.
	OnChangedSlices(assigned, unassigned []assign.Slice)
}

// view is everything a lookup needs, swapped atomically per assignment.
type view struct {
	table *clerk.Table
	mine  []bool         // mine[i]: slice i names this task
	owned []assign.Slice // this task's ranges, merged
	load  []loadCell     // load[i]: load measured on slice i in this window
	// installed is when the view was installed, for the assignment age.
	installed time.Time
	// sum is api.Checksum of the view's assignment once a load report
	// needed it (checksum); 0 before.
	sum atomic.Uint64
}

// checksum returns api.Checksum of v's assignment, computed the first
// time it is asked for: load reports carry it, and a job of a million
// slices takes about 0.15 s to hash (BenchmarkChecksum in package api:
// 1.5 ms per 10,000 slices), once per generation.
func (v *view) checksum() uint64 {
	if sum := v.sum.Load(); sum != 0 {
		return sum
	}
	sum := api.Checksum(v.table.Assignment())
	v.sum.Store(sum)
	return sum
}

// Slicelet is a server task's membership in slicerd: it advertises the
// task in gossip and follows the job's assignment to tell which keys the
// task owns.
type Slicelet struct {
	cfg      Config
	log      *slog.Logger
	clerk    *clerk.Clerk
	nodeName string

	view   atomic.Pointer[view]
	node   atomic.Pointer[gossip.Node]
	ready  chan struct{}
	joined chan struct{}
	// reclaims counts the gossip members runGossip replaced.
	reclaims atomic.Uint64
	// reregister asks registerLoop to register again with every Assigner:
	// an Assigner refused a call as from a non-member (see notMember).
	reregister chan struct{}
	// attrsChanged asks registerLoop to register again at once with every
	// Assigner: the task's attributes (draining) changed.
	attrsChanged chan struct{}
	started      atomic.Bool

	load       loadState
	httpClient *http.Client // load reports to the Assigner, without TLS
	// assigners holds, with TLS, one client per Assigner member, which
	// accepts only a certificate naming that member.
	assignersMu sync.Mutex
	assigners   map[string]*http.Client
	// dists records, with TLS, the Distributors and Backups whose
	// certificates were found where gossip places them; see distState.
	dists distState

	metrics *sliceletMetrics // nil without Config.Registerer; see metrics.go

	strong  strongState  // strong mode's leases; see strong.go
	handoff handoffState // state handoff; see handoff.go

	// listenMu serialises listener calls with AddListener, so every
	// listener sees one unbroken sequence of changes.
	listenMu  sync.Mutex
	listeners []Listener
	// changed is closed, and replaced, by every install (under listenMu):
	// Drain waits on it.
	changed chan struct{}
}

// New validates cfg and builds a Slicelet without starting anything; Run
// starts it.
func New(cfg Config) (*Slicelet, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.LoadWindow == 0 {
		cfg.LoadWindow = DefaultLoadWindow
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.ClockMargin == 0 {
		cfg.ClockMargin = lease.DefaultClockMargin
	}
	if cfg.ReleaseWait == 0 {
		cfg.ReleaseWait = DefaultReleaseWait
	}
	s := &Slicelet{
		cfg:          cfg,
		log:          cfg.Logger.With("job", cfg.Job, "task", cfg.Task),
		ready:        make(chan struct{}),
		joined:       make(chan struct{}),
		reregister:   make(chan struct{}, 1),
		attrsChanged: make(chan struct{}, 1),
		httpClient:   api.NewH2CClient(),
		changed:      make(chan struct{}),
	}
	s.handoff.serveSem = make(chan struct{}, maxConcurrentServes)
	s.handoff.fetched = make(map[string][]fetchedRange)
	s.handoff.served = make(chan struct{})
	s.strong.clock = leaseclock.New()
	s.strong.instance = rand.Text()
	s.strong.kick = make(chan struct{}, 1)
	s.strong.recent = make(map[uint64]*assign.Assignment)
	s.strong.view.Store(&strongView{})
	if cfg.TLS != nil {
		s.assigners = map[string]*http.Client{}
		s.load.view.verify = true
	}
	s.nodeName = cfg.gossipConfig(nil).NodeName
	ccfg := clerk.DefaultConfig()
	ccfg.Job = cfg.Job
	ccfg.Resolver = s.resolve
	ccfg.Down = s.downDistributors
	ccfg.OnAssignment = s.install
	ccfg.CacheFile = cfg.CacheFile
	ccfg.TLS = cfg.TLS
	ccfg.SubsetSize = cfg.SubsetSize
	frontend, ok := subset.TaskNumber(cfg.Task)
	if !ok {
		frontend = subset.FrontendIndex(cfg.Job + "/" + cfg.Task)
	}
	ccfg.Frontend = &frontend
	ccfg.Logger = cfg.Logger.With("task", cfg.Task)
	c, err := clerk.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s.clerk = c
	if cfg.Registerer != nil {
		s.metrics = newSliceletMetrics(s)
		if err := metrics.Register(cfg.Registerer, s.metrics); err != nil {
			return nil, fmt.Errorf("%w: task %s/%s: %w", ErrInvalidConfig, cfg.Job, cfg.Task, err)
		}
	}
	if a := c.Assignment(); a != nil {
		// Loaded from the cache file: answer from it before Run.
		s.install(nil, a)
	}
	return s, nil
}

// Job is the job this task belongs to.
func (s *Slicelet) Job() string { return s.cfg.Job }

// Task is this task's name.
func (s *Slicelet) Task() string { return s.cfg.Task }

// AddListener registers l. If an assignment is already held, l is first
// called with this task's current ranges as assigned, so every listener
// sees its changes from nothing. It must not be called from a listener.
func (s *Slicelet) AddListener(l Listener) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	s.listeners = append(s.listeners, l)
	if v := s.view.Load(); v != nil && len(v.owned) > 0 {
		l.OnChangedSlices(slices.Clone(v.owned), nil)
	}
}

// Ranges returns this task's key ranges in the current assignment,
// sorted and merged (Tasks nil), and the assignment's generation; nil and
// 0 before the first assignment. The slice is the caller's.
func (s *Slicelet) Ranges() ([]assign.Slice, uint64) {
	v := s.view.Load()
	if v == nil {
		return nil, 0
	}
	return slices.Clone(v.owned), v.table.Assignment().Generation
}

// NextRanges is Ranges with a channel closed once the next assignment is
// installed, whether or not it changes this task's ranges: a follower of
// the generation (the sidecar's WatchRanges) waits on it.
func (s *Slicelet) NextRanges() ([]assign.Slice, uint64, <-chan struct{}) {
	v, next := s.currentView()
	if v == nil {
		return nil, 0, next
	}
	return slices.Clone(v.owned), v.table.Assignment().Generation, next
}

// IsAffinitizedKey reports whether the current assignment gives key's
// slice to this task; false before the first assignment. It does not
// allocate or lock.
func (s *Slicelet) IsAffinitizedKey(key []byte) bool {
	h := assign.HashKey(key)
	s.countLookup(h)
	v := s.view.Load()
	return v != nil && v.mine[v.table.Lookup(h)]
}

// IsAffinitizedKeyString is IsAffinitizedKey for a string key.
func (s *Slicelet) IsAffinitizedKeyString(key string) bool {
	h := assign.HashString(key)
	s.countLookup(h)
	v := s.view.Load()
	return v != nil && v.mine[v.table.Lookup(h)]
}

// countLookup counts a lookup of slice key h when metrics are on.
func (s *Slicelet) countLookup(h assign.SliceKey) {
	if m := s.metrics; m != nil {
		m.lookups.Inc(uint64(h))
	}
}

// Assignment returns the current assignment, or nil. It is read-only.
func (s *Slicelet) Assignment() *assign.Assignment {
	if v := s.view.Load(); v != nil {
		return v.table.Assignment()
	}
	return nil
}

// Generation returns the current assignment's generation, 0 if none.
func (s *Slicelet) Generation() uint64 {
	if a := s.Assignment(); a != nil {
		return a.Generation
	}
	return 0
}

// Ready is closed when the first assignment has been installed.
func (s *Slicelet) Ready() <-chan struct{} { return s.ready }

// Joined is closed when this task has joined the slicerd gossip cluster.
func (s *Slicelet) Joined() <-chan struct{} { return s.joined }

// GossipAddr is the address of this task's gossip member, "" until Run has
// started it.
func (s *Slicelet) GossipAddr() string {
	if n := s.node.Load(); n != nil {
		return n.GossipAddr()
	}
	return ""
}

// Run starts gossip, joins slicerd, and follows the job's assignment until
// ctx ends. Then it leaves gossip gracefully, which tells slicerd to move
// this task's slices away, shuts gossip down and returns nil. Serve
// requests until Run returns, so requests routed on the old assignment
// still land. Run may be called once.
func (s *Slicelet) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: task %s/%s; create a new Slicelet to rejoin", ErrRunning, s.cfg.Job, s.cfg.Task)
	}
	node, err := gossip.Start(s.cfg.gossipConfig(s.log))
	if err != nil {
		return fmt.Errorf("slicelet: start gossip for task %s/%s: %w", s.cfg.Job, s.cfg.Task, err)
	}
	s.node.Store(node)

	g, gctx := errgroup.WithContext(ctx)
	s.dists.start(gctx)
	s.startHandoff(gctx)
	g.Go(func() error { return s.runGossip(gctx, node) })
	g.Go(func() error {
		// The Clerk's servers come from gossip: before the join it knows
		// none and would only warn that none answered. A join that keeps
		// failing is reported by RetryJoin.
		select {
		case <-s.joined:
		case <-gctx.Done():
			return nil
		}
		if s.cfg.TLS != nil {
			// Check the Distributors and Backups gossip has before the
			// Clerk's first round, which lists only those that passed.
			s.resolve()
			s.dists.settle(gctx)
		}
		return s.clerk.Run(gctx)
	})
	g.Go(func() error {
		s.reportLoop(gctx)
		return nil
	})
	if s.strongMode() {
		g.Go(func() error {
			s.strongLoop(gctx)
			return nil
		})
	}
	err = g.Wait()
	s.dists.stop()
	s.stopHandoff()
	s.httpClient.CloseIdleConnections()
	s.closeAssignerClients()

	// Leave is the drain signal. Serf bounds it by its broadcast timeout
	// and leave propagation delay, so it needs no deadline of its own.
	node = s.node.Load() // a reclaim may have replaced it
	if lerr := node.Leave(context.WithoutCancel(ctx)); lerr != nil {
		s.log.Warn("slicelet: graceful leave failed; slicerd will see this task as failed instead of drained", "err", lerr)
		err = errors.Join(err, lerr)
	}
	if serr := node.Shutdown(); serr != nil {
		err = errors.Join(err, serr)
	}
	return err
}

// downDistributors lists the Distributors gossip has declared failed (not
// those that left): they keep their place in subsetting's numbering. With
// TLS it lists only those resolve would have listed alive (distState).
func (s *Slicelet) downDistributors() []string {
	n := s.node.Load()
	if n == nil {
		return nil
	}
	var down []string
	for _, p := range n.Peers() {
		if p.Status == gossip.StatusFailed && p.RPCAddr != "" && p.Has(gossip.RoleDistributor) &&
			(s.cfg.TLS == nil || s.dists.isVerified(p)) {
			down = append(down, p.RPCAddr)
		}
	}
	return down
}

// resolve lists the RPC addresses of the live Distributors and Backups
// gossip knows. With TLS it lists only those whose certificate was found
// at their address, and starts a check of the others (distState).
func (s *Slicelet) resolve() (dists, backups []string) {
	n := s.node.Load()
	if n == nil {
		return nil, nil
	}
	for _, p := range n.Peers() {
		if p.Status != gossip.StatusAlive || p.RPCAddr == "" {
			continue
		}
		if !p.Has(gossip.RoleDistributor) && !p.Has(gossip.RoleBackup) {
			continue
		}
		if s.cfg.TLS != nil && !s.dists.isVerified(p) {
			s.verifyDistributor(p)
			continue
		}
		if p.Has(gossip.RoleDistributor) {
			dists = append(dists, p.RPCAddr)
		}
		if p.Has(gossip.RoleBackup) {
			backups = append(backups, p.RPCAddr)
		}
	}
	return dists, backups
}

// install is the Clerk's OnAssignment: it swaps in the lookup view of next
// and tells the listeners what changed for this task.
func (s *Slicelet) install(_, next *assign.Assignment) {
	if v := s.view.Load(); v != nil && v.table.Assignment() == next {
		return // the cached assignment New installed, reported again by Run
	}
	if s.strongMode() {
		s.strong.remember(next)
	}
	t := s.clerk.Table()
	if t == nil || t.Assignment() != next {
		t = clerk.NewTable(next)
	}
	v := &view{table: t, mine: make([]bool, len(next.Slices)), owned: ownedRanges(next, s.cfg.Task),
		load: make([]loadCell, len(next.Slices)), installed: time.Now()}
	for i, sl := range next.Slices {
		v.mine[i] = hasTask(sl.Tasks, s.cfg.Task)
	}

	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	var oldOwned []assign.Slice
	old := s.view.Load() // installs are serialised by listenMu
	if old != nil {
		oldOwned = old.owned
	}
	assigned, unassigned := diffRanges(oldOwned, v.owned)
	// The state of the ranges gained is awaited (AwaitState) from before
	// the view that gives them here is in place, so no request for them
	// is served cold while their fetch starts.
	imps := s.startImports(old, next, assigned)
	s.view.Store(v)
	close(s.changed)
	s.changed = make(chan struct{})
	if s.strongMode() {
		s.strong.changes.notify() // keys stop or start being on their way here
	}
	if old != nil {
		s.retire(old)
	} else {
		close(s.ready)
	}
	s.log.Debug("slicelet: assignment installed", "generation", next.Generation,
		"owned_ranges", len(v.owned), "assigned", len(assigned), "unassigned", len(unassigned))
	if len(assigned) == 0 && len(unassigned) == 0 {
		return
	}
	for _, l := range s.listeners {
		l.OnChangedSlices(assigned, unassigned)
	}
	if len(assigned) > 0 {
		s.reportReady(next.Generation, imps)
	}
}
