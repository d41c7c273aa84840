package distributor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/cespare/xxhash/v2"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Config is what a Distributor needs of the agent's configuration.
type Config struct {
	Logger     *slog.Logger
	Preference lease.Preference
	// TLS, when not nil, is how the Distributor dials Assigners: each
	// must present a certificate naming it an Assigner.
	TLS *tlsconfig.Source
	// PullMinBackoff and PullMaxBackoff bound the wait before a failed
	// pull from an Assigner is retried.
	PullMinBackoff, PullMaxBackoff time.Duration
	// Upstreams, when set, are the Distributors (host:port) this one
	// relays from instead of pulling from Assigners: the second level of
	// a fan-out tree. Each job streams from one of them, ranked by a
	// rendezvous hash of the job and the address, so that the jobs spread
	// and a job's relays share an upstream; from the next when it fails;
	// and from the job's preferred Assigner once all have failed. At each
	// Preference.Recheck a job streaming from another source tries its
	// first-ranked upstream again. With TLS each must present a
	// Distributor's certificate.
	Upstreams []string
	// MaxJobs bounds the jobs the Distributor holds at once (0: no
	// bound): a request for a job beyond it is refused with
	// RESOURCE_EXHAUSTED. A name no Assigner knows is forgotten as soon
	// as an Assigner says so, but while none answers it stays, with its
	// pull; without a bound, names made up by any caller that may watch
	// (every client on a cluster without TLS) would pile up then.
	MaxJobs int
}

// Members is the gossip membership a Distributor follows: the live
// Assigners, and a signal when membership changes. A Members that also
// estimates round-trip times (RTT(a, b string) (time.Duration, bool))
// lets the Distributor prefer the Assigner nearest a job's tasks.
type Members interface {
	Peers() []gossip.Peer
	Changes() (<-chan struct{}, func())
}

// proximity is the optional distance estimate of a Members.
type proximity interface {
	RTT(a, b string) (time.Duration, bool)
}

// Distributor fans assignments out to subscribers. It pulls a job from the
// job's preferred Assigner on the first request for it (paper §4.2), caches
// the newest generation, and pushes every new one to all of the job's
// streams. When the job's preferred Assigner changes, the pull moves to the
// new one.
type Distributor struct {
	log        *slog.Logger
	members    Members
	rtt        lease.RTTFunc // nil when membership estimates no distances
	pref       lease.Preference
	choices    lease.Choices
	rpcClients *rpc.Peers
	minBackoff time.Duration
	maxBackoff time.Duration
	stopping   <-chan struct{}
	upstreams  []string
	maxJobs    int // Config.MaxJobs

	mu     sync.Mutex
	runCtx context.Context // set by Run; pulls live as long as it
	// stopped is set by Run, before it waits for the pulls, once ctx has
	// ended: no pull starts after, so none outlives Run.
	stopped bool
	pulls   sync.WaitGroup
	jobs    map[string]*distJob

	metrics *distMetrics // nil until Collectors; see metrics.go

	// Test hooks, nil outside tests: a pull was admitted (called under
	// mu, before it starts); a pull goroutine started.
	testAdmitted    func()
	testPullStarted func()
}

// distJob is one job's cache and the stream that fills it.
type distJob struct {
	l *watch.Latest
	// from is the source the pull streams from (an Assigner's name, or
	// an upstream Distributor's address), "" between streams; cancel ends
	// that stream; tried is the source the pull last tried. Guarded by
	// Distributor.mu.
	from   string
	cancel context.CancelFunc
	tried  string
	// retry wakes a pull waiting out its backoff when the job's preferred
	// Assigner changes: the new one is likely up.
	retry chan struct{}
}

// New returns a Distributor following members, not yet running;
// stopping is closed when the agent begins to shut down.
func New(cfg Config, members Members, stopping <-chan struct{}) *Distributor {
	d := &Distributor{
		log:        cfg.Logger.With("role", "distributor"),
		members:    members,
		pref:       cfg.Preference.WithDefaults(),
		rpcClients: rpc.NewPeers(cfg.TLS),
		minBackoff: cfg.PullMinBackoff,
		maxBackoff: cfg.PullMaxBackoff,
		stopping:   stopping,
		upstreams:  slices.Clone(cfg.Upstreams),
		jobs:       make(map[string]*distJob),
		maxJobs:    cfg.MaxJobs,
	}
	if p, ok := members.(proximity); ok {
		d.rtt = p.RTT
	}
	return d
}

// Run owns the pulls: it lets handlers start them, moves each to its job's
// preferred Assigner whenever that changes (at membership changes and every
// Preference.Recheck, as coordinates move), and, when ctx ends, waits for
// every pull to stop.
func (d *Distributor) Run(ctx context.Context) error {
	d.mu.Lock()
	d.runCtx = ctx
	for name, j := range d.jobs { // asked for before Run
		d.startPull(name, j)
	}
	d.mu.Unlock()
	changes, unsubscribe := d.members.Changes()
	defer unsubscribe()
	recheck := time.NewTicker(d.pref.Recheck)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			d.mu.Lock()
			d.stopped = true
			d.mu.Unlock()
			d.pulls.Wait()
			d.rpcClients.CloseIdle()
			return nil
		case <-changes:
			if len(d.upstreams) == 0 {
				d.follow()
			}
		case <-recheck.C:
			if len(d.upstreams) == 0 {
				d.follow()
			} else {
				d.followUpstreams()
			}
		}
	}
}

// follow ends every stream that is not from its job's preferred Assigner;
// its pull reconnects to the preferred one at once.
func (d *Distributor) follow() {
	// Indexed once for all the jobs: scanning every member for each job
	// costs a Distributor of thousands of jobs in a large cluster seconds.
	view := lease.NewView(d.members.Peers())
	d.mu.Lock()
	names := make([]string, 0, len(d.jobs))
	for name := range d.jobs {
		names = append(names, name)
	}
	d.mu.Unlock()
	for _, name := range names {
		p, ok := d.choices.PreferredIn(d.pref, name, view, d.rtt)
		d.mu.Lock()
		j := d.jobs[name]
		switch {
		case !ok || j == nil:
		case j.from != "" && j.from != p.Name && j.cancel != nil:
			d.log.Info("the job's preferred assigner changed; moving the pull", "job", name, "from", j.from, "to", p.Name)
			j.cancel()
			j.cancel = nil
		case j.from == "" && j.tried != p.Name:
			select {
			case j.retry <- struct{}{}:
			default:
			}
		}
		d.mu.Unlock()
	}
}

// followUpstreams ends every relayed stream that is not from its job's
// first-ranked upstream; its pull tries that one again at once, and moves
// on if it still fails.
func (d *Distributor) followUpstreams() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, j := range d.jobs {
		if first := d.rankUpstreams(name)[0]; j.from != "" && j.from != first && j.cancel != nil {
			d.log.Info("trying the job's first upstream distributor again", "job", name, "from", j.from, "to", first)
			j.cancel()
			j.cancel = nil
		}
	}
}

// rankUpstreams orders the upstreams for job, highest rendezvous hash
// first.
func (d *Distributor) rankUpstreams(job string) []string {
	ranked := slices.Clone(d.upstreams)
	score := func(addr string) uint64 { return xxhash.Sum64String(job + "\x00" + addr) }
	slices.SortFunc(ranked, func(a, b string) int { return cmp.Compare(score(b), score(a)) })
	return ranked
}

// source is where a pull streams a job from: an upstream Distributor, or
// an Assigner.
type source struct {
	name, addr string // name: the Assigner's node name, or the upstream's address
	upstream   bool
}

// watcher is the WatchAssignment call both sources serve.
type watcher interface {
	WatchAssignment(context.Context, *connect.Request[slicerv1.WatchAssignmentRequest]) (*connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], error)
}

// source picks the pull's source for its attempt-th try since its last
// good stream: the ranked upstreams in turn, then the job's preferred
// Assigner. ok is false when that is the Assigner and none is alive.
func (d *Distributor) source(job string, attempt int) (src source, ok bool) {
	if attempt < len(d.upstreams) {
		addr := d.rankUpstreams(job)[attempt]
		return source{name: addr, addr: addr, upstream: true}, true
	}
	p, ok := d.Assigner(job)
	return source{name: p.Name, addr: p.RPCAddr}, ok
}

func (d *Distributor) client(src source) watcher {
	if src.upstream {
		return slicerv1connect.NewDistributorServiceClient(d.rpcClients.GetAgent(identity.Distributor, src.addr))
	}
	return slicerv1connect.NewAssignerServiceClient(d.rpcClients.Get(identity.Assigner, src.name, src.addr))
}

// Latest is the cache of job name, what its streams are served from,
// starting its pull on first use. A job asked for before Run starts (the
// RPC server may serve first) gets its pull when Run starts.
func (d *Distributor) Latest(name string) (*watch.Latest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j, ok := d.jobs[name]; ok {
		return j.l, nil
	}
	if d.stopped || (d.runCtx != nil && d.runCtx.Err() != nil) {
		return nil, connect.NewError(connect.CodeUnavailable, rpc.ErrShuttingDown)
	}
	if d.maxJobs > 0 && len(d.jobs) >= d.maxJobs {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"this distributor holds %d jobs, the most it serves (twice the node's --max-jobs); job %q is not among them: check its name, or subscribe through another distributor",
			len(d.jobs), name))
	}
	j := &distJob{l: watch.New(), retry: make(chan struct{}, 1)}
	d.jobs[name] = j
	if d.runCtx != nil {
		d.startPull(name, j)
	}
	return j.l, nil
}

// startPull starts j's pull under Run's context; d.mu is held.
func (d *Distributor) startPull(name string, j *distJob) {
	ctx := d.runCtx
	if d.testAdmitted != nil {
		d.testAdmitted()
	}
	d.pulls.Go(func() {
		if d.testPullStarted != nil {
			d.testPullStarted()
		}
		d.pull(ctx, name, j)
	})
}

// Assigner picks the Assigner to pull a job from: its preferred Assigner,
// chosen by the same function every Assigner and Slicelet uses.
func (d *Distributor) Assigner(job string) (gossip.Peer, bool) {
	return d.choices.Preferred(d.pref, job, d.members.Peers(), d.rtt)
}

// pull keeps a stream open to the job's preferred Assigner, or to an
// upstream Distributor (Config.Upstreams), until ctx ends or the source
// says the job does not exist. A stream ended because the preference
// moved reconnects at once; one that failed tries the next source, and
// waits out a backoff once every source failed.
func (d *Distributor) pull(ctx context.Context, job string, dj *distJob) {
	l := dj.l
	backoff := d.minBackoff
	wait := func() bool {
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		defer t.Stop()
		backoff = min(2*backoff, d.maxBackoff)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-dj.retry:
			backoff = d.minBackoff
			return true
		}
	}
	// resync asks the next stream for the full assignment: a delta of
	// the last one did not apply.
	resync := false
	attempt := 0 // sources tried since the last good stream
	for ctx.Err() == nil {
		src, ok := d.source(job, attempt)
		addr := src.addr
		if !ok {
			attempt = 0
			if l.Current() == nil {
				l.Fail(connect.NewError(connect.CodeUnavailable, rpc.ErrNoAssigner))
			}
			d.log.Warn("no live assigner to pull from; serving the cached assignment", "job", job)
			if !wait() {
				return
			}
			continue
		}
		// base is what the Assigner's next delta applies to: the held
		// assignment, then each one the stream brings.
		base := l.Current()
		if resync {
			base, resync = nil, false
		}
		known := base.Version()
		client := d.client(src)
		sctx, cancel := context.WithCancel(ctx)
		d.mu.Lock()
		dj.from, dj.cancel, dj.tried = src.name, cancel, src.name
		d.mu.Unlock()
		received := false
		stream, err := client.WatchAssignment(sctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{
			Job: job, KnownGeneration: known.Generation, KnownIncarnation: known.Incarnation, DeltaVersion: api.DeltaVersion,
			Relay: true, // it serves the job on to its own streams
		}))
		if err == nil {
			for stream.Receive() {
				a, err := api.Receive(base, stream.Msg())
				if errors.Is(err, api.ErrDelta) {
					d.log.Error("the source sent a delta that does not apply; serving the cached assignment and asking for a full one", "job", job, "from", src.name, "err", err)
					resync = true
					break
				}
				if err != nil {
					d.log.Error("the source sent an invalid assignment; ignoring it", "job", job, "from", src.name, "err", err)
					continue
				}
				base, received = a, true
				if l.Publish(a, api.CommittedAt(stream.Msg())) {
					d.log.Debug("assignment received", "job", job, "generation", a.Generation, "from", src.name)
				}
				backoff = d.minBackoff
			}
			err = stream.Err()
			stream.Close()
		}
		moved := sctx.Err() != nil
		cancel()
		d.mu.Lock()
		dj.from, dj.cancel = "", nil
		d.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if moved || received {
			// Moved, or a good stream ended: the first source again.
			attempt = 0
		}
		if moved {
			backoff = d.minBackoff
			continue
		}
		if connect.CodeOf(err) == connect.CodeNotFound {
			// Forget the job so a later request asks again; the waiting
			// streams see the Assigner's answer. A job with an
			// assignment was deleted: its streams end too.
			d.mu.Lock()
			if d.jobs[job] == dj {
				delete(d.jobs, job)
			}
			d.mu.Unlock()
			if l.Current() != nil {
				d.log.Info("the assigner no longer knows the job: it was deleted; ending its streams", "job", job, "from", src.name)
				l.End(err)
			} else {
				l.Fail(err)
			}
			return
		}
		if src.upstream {
			d.log.Warn("assignment stream from upstream distributor ended; trying the next source", "job", job, "upstream", addr, "err", err)
			attempt++
			continue // the next upstream, or the Assigner, at once
		}
		d.log.Warn("assignment stream from assigner ended; reconnecting", "job", job, "assigner", src.name, "addr", addr, "err", err)
		attempt = 0
		if !received && l.Current() == nil {
			// Nothing to serve and no Assigner answering: streams waiting
			// here (a relay's among them) are told so, and can try
			// another source, rather than wait on this one.
			l.Fail(connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w: the job's assigner %s did not answer: %w", rpc.ErrNoAssigner, src.name, err)))
		}
		if !wait() {
			return
		}
	}
}

// errRelayOfRelay refuses a relay's stream at a relay.
var errRelayOfRelay = errors.New("this distributor is a relay (--distributor-upstream) and serves no relay distributors; " +
	"list first-level distributors, which pull from Assigners, as upstreams")

// WatchAssignment implements slicerv1connect.DistributorServiceHandler.
func (d *Distributor) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	if len(d.upstreams) > 0 && req.Msg.GetRelay() {
		// A relay does not serve relays: the tree has two levels, and a
		// relay that followed another could follow itself, or one that
		// follows it, and never reach an Assigner. Refused, the relay
		// takes its next source. (Whoever says relay is refused: the
		// flag only ever costs its sender.)
		return connect.NewError(connect.CodeFailedPrecondition, errRelayOfRelay)
	}
	l, err := d.lookup(req.Msg.GetJob())
	if err != nil {
		return err
	}
	opened := time.Now()
	return l.Serve(ctx, d.stopping, req, stream, d.metrics.recorder(opened))
}

// GetAssignment implements slicerv1connect.DistributorServiceHandler: it
// returns the cached assignment, waiting for the first pull if needed.
func (d *Distributor) GetAssignment(ctx context.Context, req *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	l, err := d.lookup(req.Msg.GetJob())
	if err != nil {
		return nil, err
	}
	var first *slicerv1.WatchAssignmentResponse
	errFound := errors.New("found")
	err = l.Stream(ctx, d.stopping, watch.Subscription{}, func(m *watch.Message) error {
		first = m.Proto()
		return errFound
	})
	if first != nil {
		return connect.NewResponse(&slicerv1.GetAssignmentResponse{Assignment: first.GetAssignment()}), nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return nil, rpc.ToConnect(err)
}

func (d *Distributor) lookup(job string) (*watch.Latest, error) {
	if err := rpc.ValidateJob(job); err != nil {
		return nil, err
	}
	return d.Latest(job)
}

// Relays counts the streams of job served to relay Distributors, 0 for a
// job the Distributor does not serve.
func (d *Distributor) Relays(job string) int {
	d.mu.Lock()
	j := d.jobs[job]
	d.mu.Unlock()
	if j == nil {
		return 0
	}
	return j.l.Relays()
}

// Preferred is the Assigner the Distributor prefers for job now, "" when
// it has made no choice.
func (d *Distributor) Preferred(job string) string { return d.choices.Current(job) }

// PullsFrom is the name of the Assigner the Distributor streams job
// from, "" while it has no stream for it.
func (d *Distributor) PullsFrom(job string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j := d.jobs[job]; j != nil {
		return j.from
	}
	return ""
}

// Collectors makes the Distributor count what it sends and returns its
// metrics, to register; call it before Run.
func (d *Distributor) Collectors() []prometheus.Collector {
	m := newDistMetrics()
	d.metrics = m
	return []prometheus.Collector{m.updates, m.bytes, m.delay, m.commitToSend, subscribersCollector{d: d}}
}

// Counting reports whether the Distributor counts what it sends: whether
// Collectors was called.
func (d *Distributor) Counting() bool { return d.metrics != nil }
