// Package clustertest runs a slicerd cluster inside one test process: real
// agents (roles.Agent) with real serf/memberlist gossip on loopback and
// real Connect servers, real Slicelets and Clerks, and one shared store.
// Only the network is faked: every member's gossip goes through
// gossip.NewDelayTransport, so a test sets the latency of any link at any
// time (to make an Assigner near or far from a job's tasks) and cuts links
// to partition the cluster. Agents stop gracefully, are killed abruptly,
// and restart under their name. Wait helpers poll a condition with
// internal/testwait and fail the test saying what did not happen.
//
// It is for tests only, in the spirit of etcd's integration package and
// raft's MakeCluster. The package holds only the harness; the scenarios
// that run on it are in e2e/inprocess, beside the end-to-end tests.
package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/etcdlease"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
)

// Timeout bounds every wait helper (scaled as testwait scales it).
const Timeout = testwait.Timeout

// Options configures a Cluster. The zero value runs every agent on one
// shared bbolt store.
type Options struct {
	// Store is the store the harness reads (WaitGeneration, Record) and,
	// unless OpenStore is set, the one every agent shares; the harness
	// closes it at the end of the test. Nil opens a bbolt file in a
	// temporary directory.
	Store storage.Store
	// OpenStore, if set, opens one agent's own store (the agent closes it),
	// for stores that many clients share, such as etcd, or a store of its
	// own in Cluster.DataDir(node), which is kept across restarts.
	OpenStore func(node string) (storage.Store, error)
	// Configure adjusts each agent's configuration before it starts.
	Configure func(*roles.Config)
	// ConfigureTask adjusts each Slicelet's configuration before it starts.
	ConfigureTask func(*slicelet.Config)
	// WrapLeases, if set, wraps the shared embedded lease manager as each
	// agent gets it, so a test can watch the calls made to it.
	WrapLeases func(lease.Manager) lease.Manager
	// Latency is the one-way delay of every gossip link without its own
	// (SetLatency). Default 0.
	Latency time.Duration
	// DefaultTimers gives every member slicerd's production failure
	// detection (gossip.DefaultConfig), the agents its rebalance delay,
	// standby poll interval and pull backoff (roles.DefaultConfig) and
	// Clerks their default backoff, so a test measures what an operator
	// would see. Otherwise members use fast test timers.
	DefaultTimers bool
}

// Cluster is a set of in-process slicerd agents, Slicelets and Clerks.
type Cluster struct {
	t     testing.TB
	opts  Options
	store storage.Store
	// leases is the embedded lease manager of a shared bbolt store; nil
	// when agents open stores of their own (Options.OpenStore).
	leases lease.Manager
	log    *slog.Logger
	dir    string // agents' data directories, one per name

	mu       sync.Mutex
	names    map[string]string           // gossip address → member name
	latency  map[[2]string]time.Duration // (from, to) member names → one-way delay
	fallback time.Duration
	cut      map[[2]string]bool // dropped links, both directions stored
	dead     map[string]bool    // killed members: every link dropped
	agents   map[string]*Agent
	tasks    map[string]*Task
	nextPort int
	commits  []Commit
	jitter   float64
	rng      *rand.Rand
}

// New returns an empty cluster whose members are stopped at the end of the
// test.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{
		t: t, opts: opts, log: logger(t), dir: t.TempDir(),
		names:    make(map[string]string),
		latency:  make(map[[2]string]time.Duration),
		fallback: opts.Latency,
		cut:      make(map[[2]string]bool),
		dead:     make(map[string]bool),
		agents:   make(map[string]*Agent),
		tasks:    make(map[string]*Task),
		nextPort: 20000,
		rng:      rand.New(rand.NewPCG(1, 2)),
	}
	c.store = opts.Store
	if c.store == nil {
		s, err := storage.OpenDataDir(t.TempDir(), storage.BoltOptions{Logger: c.log})
		if err != nil {
			t.Fatalf("clustertest: open shared store: %v", err)
		}
		c.store = s
	}
	if b, ok := c.store.(*storage.Bolt); ok && opts.OpenStore == nil {
		// Agents that share one bbolt store share its lease manager, as
		// the Assigners of one process would.
		m, err := lease.NewEmbedded(context.Background(), b, lease.EmbeddedOptions{Logger: c.log})
		if err != nil {
			t.Fatalf("clustertest: open the shared lease manager: %v", err)
		}
		c.leases = m
	}
	// Registered first, so it runs last: after every member has stopped.
	t.Cleanup(func() {
		if c.leases != nil {
			c.leases.Close()
		}
		if err := c.store.Close(); err != nil {
			t.Errorf("clustertest: close store: %v", err)
		}
	})
	t.Cleanup(c.stopAll)
	return c
}

func logger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("CLUSTERTEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// Store is the store the harness reads: the one agents share, or the
// reader given in Options.
func (c *Cluster) Store() storage.Store { return c.store }

// SetLatency sets the one-way gossip delay between members a and b, in
// both directions; their round trip is twice d. Members are named as in
// gossip: an agent's name, or job/task for a Slicelet. It applies to
// packets sent from now on.
func (c *Cluster) SetLatency(a, b string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.latency[[2]string{a, b}] = d
	c.latency[[2]string{b, a}] = d
}

// SetDefaultLatency sets the one-way delay of every link without its own.
func (c *Cluster) SetDefaultLatency(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fallback = d
}

// SetJitter makes every packet's delay vary uniformly within ±f of its
// link's latency (0 ≤ f < 1), as a real network's queues do.
func (c *Cluster) SetJitter(f float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jitter = f
}

// Partition drops every gossip link between a member of side1 and one of
// side2, both ways. Links within a side are untouched; members on neither
// side still reach both.
func (c *Cluster) Partition(side1, side2 []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range side1 {
		for _, b := range side2 {
			c.cut[[2]string{a, b}] = true
			c.cut[[2]string{b, a}] = true
		}
	}
}

// Heal restores every link Partition dropped.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.cut)
}

// delay is every member's gossip.NewDelayTransport delay function.
func (c *Cluster) delay(from, to string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, t := c.names[from], c.names[to]
	if c.dead[f] || c.dead[t] || c.cut[[2]string{f, t}] {
		return gossip.Drop
	}
	d, ok := c.latency[[2]string{f, t}]
	if !ok {
		d = c.fallback
	}
	if c.jitter > 0 && d > 0 {
		d = time.Duration(float64(d) * (1 - c.jitter + 2*c.jitter*c.rng.Float64()))
	}
	return d
}

// transport binds a member's gossip transport on loopback, wrapped to
// apply the cluster's latency and partitions, and registers its address
// under the member's name.
func (c *Cluster) transport(name string) memberlist.NodeAwareTransport {
	c.t.Helper()
	inner, err := gossip.NewNetTransport("127.0.0.1:0", c.log)
	if err != nil {
		c.t.Fatalf("clustertest: gossip transport for %s: %v", name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", inner.GetAutoBindPort())
	c.mu.Lock()
	c.names[addr] = name
	c.mu.Unlock()
	return gossip.NewDelayTransport(inner, c.delay)
}

// gossipConfig returns a member's gossip configuration: loopback, fast
// timers with room for the injected latency, and a delay transport.
func (c *Cluster) gossipConfig(name string) gossip.Config {
	c.t.Helper()
	g := gossip.TestConfig(name)
	// Round trips of a few tens of milliseconds must fit in a probe, or
	// no probe completes and coordinates never learn them; and a loaded
	// machine running -race needs the slack.
	g.ProbeInterval = 200 * time.Millisecond
	g.ProbeTimeout = 150 * time.Millisecond
	g.GossipInterval = 20 * time.Millisecond
	g.SuspicionMult = 4
	if c.opts.DefaultTimers {
		d := gossip.DefaultConfig()
		g.Profile = d.Profile
		g.ProbeInterval, g.ProbeTimeout, g.SuspicionMult = d.ProbeInterval, d.ProbeTimeout, d.SuspicionMult
		g.GossipInterval = 0
	}
	g.Transport = c.transport(name)
	g.Logger = c.log
	return g
}

// preference returns the members' preference settings: a recheck that
// follows the coordinates the fast probes move, or slicerd's defaults with
// DefaultTimers.
func (c *Cluster) preference() lease.Preference {
	if c.opts.DefaultTimers {
		return lease.Preference{}
	}
	return lease.Preference{Recheck: 100 * time.Millisecond}
}

// joinAddrs lists the gossip addresses of the running agents.
func (c *Cluster) joinAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var addrs []string
	for _, a := range c.agents {
		if a.running() {
			if addr := a.GossipAddr(); addr != "" {
				addrs = append(addrs, addr)
			}
		}
	}
	slices.Sort(addrs)
	return addrs
}

// Agent is one running (or stopped) slicerd agent.
type Agent struct {
	*roles.Agent
	Name string

	c      *Cluster
	cfg    roles.Config
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	alive  bool
	front  *proxy
}

// Addr is the RPC address the agent advertises and clients should dial: a
// proxy in front of its RPC server (RPCAddr) that Kill closes at once.
func (a *Agent) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.front.addr()
}

// Config is the configuration the agent was started with.
func (a *Agent) Config() roles.Config { return a.cfg }

func (a *Agent) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.alive
}

// StartAgent starts an agent running the given roles (all three when none
// are given), joined to the running agents, and waits until its gossip
// runs.
func (c *Cluster) StartAgent(name string, rs ...gossip.Role) *Agent {
	c.t.Helper()
	if len(rs) == 0 {
		rs = []gossip.Role{gossip.RoleAssigner, gossip.RoleDistributor, gossip.RoleBackup}
	}
	cfg := roles.TestConfig(name)
	cfg.Roles = rs
	cfg.DataDir = c.DataDir(name) // the store itself comes from OpenStore
	cfg.StartupGrace = 200 * time.Millisecond
	cfg.Logger = c.log.With("agent", name)
	if c.opts.DefaultTimers {
		d := roles.DefaultConfig()
		cfg.RebalanceDelay, cfg.StandbyPollInterval = d.RebalanceDelay, d.StandbyPollInterval
		cfg.PullMinBackoff, cfg.PullMaxBackoff = d.PullMinBackoff, d.PullMaxBackoff
	}
	cfg.Gossip = c.gossipConfig(name)
	cfg.Preference = c.preference()
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	a := &Agent{Name: name, c: c, cfg: cfg}
	c.start(a, cfg.Gossip.Transport)
	return a
}

// start runs a's agent on the given gossip transport.
func (c *Cluster) start(a *Agent, transport memberlist.NodeAwareTransport) {
	c.t.Helper()
	cfg := a.cfg
	cfg.Gossip.Transport = transport
	cfg.Gossip.Join = c.joinAddrs()
	front, err := newProxy()
	if err != nil {
		c.t.Fatalf("clustertest: agent %s: rpc proxy: %v", a.Name, err)
	}
	cfg.AdvertiseRPCAddr = front.addr()
	var own storage.Store // the agent's own store, with OpenStore
	cfg.OpenStore = func(bool) (storage.Store, error) {
		if c.opts.OpenStore != nil {
			s, err := c.opts.OpenStore(a.Name)
			if err != nil {
				return nil, err
			}
			own = s
			return c.record(a.Name, s), nil
		}
		return c.record(a.Name, shared(c.store)), nil
	}
	cfg.OpenLeases = func(storage.Store) (lease.Manager, error) {
		if es, ok := own.(*etcdstore.Store); ok {
			return etcdlease.New(es, etcdlease.Options{Logger: c.log}), nil
		}
		if c.leases == nil {
			return nil, fmt.Errorf("clustertest: agent %s: no lease manager for a store of type %T", a.Name, own)
		}
		m := c.leases
		if c.opts.WrapLeases != nil {
			m = c.opts.WrapLeases(m)
		}
		return sharedLeases{m}, nil
	}
	ra, err := roles.New(context.Background(), cfg)
	if err != nil {
		front.close()
		c.t.Fatalf("clustertest: agent %s: %v", a.Name, err)
	}
	front.setTarget(ra.RPCAddr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ra.Run(ctx) }()
	c.mu.Lock()
	c.dead[a.Name] = false
	c.agents[a.Name] = a
	c.mu.Unlock()
	a.mu.Lock()
	a.Agent, a.cancel, a.done, a.alive, a.front = ra, cancel, done, true, front
	a.mu.Unlock()
	testwait.For(c.t, "agent "+a.Name+" to start gossip", func() bool { return ra.GossipAddr() != "" })
}

// DataDir is the data directory of the agent named node. It survives
// Restart; the harness removes it at the end of the test.
func (c *Cluster) DataDir(node string) string {
	return filepath.Join(c.dir, node)
}

// Agent returns the agent named name, or nil.
func (c *Cluster) Agent(name string) *Agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agents[name]
}

// Stop stops the agent gracefully: it leaves gossip, so the others see it
// leave rather than fail, and ends its streams.
func (a *Agent) Stop() {
	a.c.t.Helper()
	a.stop()
}

// Kill stops the agent abruptly, as close to SIGKILL as one process
// allows: at once its advertised RPC address stops answering and drops
// every connection, and every gossip packet to or from it is dropped, so
// no leave reaches anyone and the others find it failed by probing. Then
// its roles are stopped; its store writes stop when they do, at once.
func (a *Agent) Kill() {
	a.c.t.Helper()
	a.mu.Lock()
	front := a.front
	a.mu.Unlock()
	a.c.mu.Lock()
	a.c.dead[a.Name] = true
	a.c.mu.Unlock()
	front.close()
	a.stop()
}

func (a *Agent) stop() {
	a.mu.Lock()
	if !a.alive {
		a.mu.Unlock()
		return
	}
	a.alive = false
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			a.c.t.Errorf("clustertest: agent %s: %v", a.Name, err)
		}
	case <-time.After(testwait.Scale(Timeout)):
		a.c.t.Fatalf("clustertest: agent %s did not stop within %v", a.Name, testwait.Scale(Timeout))
	}
	a.front.close()
}

// Restart starts a stopped or killed agent again under its name and
// configuration, with fresh ports, joined to the running agents. With a
// store of its own (Options.OpenStore) it reopens it.
func (a *Agent) Restart() {
	a.c.t.Helper()
	a.stop()
	a.c.start(a, a.c.transport(a.Name))
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	var tasks []*Task
	for _, t := range c.tasks {
		tasks = append(tasks, t)
	}
	var agents []*Agent
	for _, a := range c.agents {
		agents = append(agents, a)
	}
	c.mu.Unlock()
	for _, t := range tasks {
		t.Stop()
	}
	for _, a := range agents {
		a.stop()
	}
}

// Task is a job's server task: a real Slicelet in gossip.
type Task struct {
	*slicelet.Slicelet
	Name string // gossip member name, job/task

	c      *Cluster
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// StartTask starts a Slicelet for job/task, joined to the running agents,
// reporting load every 100 ms, and waits until it has joined gossip.
func (c *Cluster) StartTask(job, task string) *Task {
	c.t.Helper()
	name := gossip.TaskMemberName(job, task)
	c.mu.Lock()
	c.nextPort++
	addr := fmt.Sprintf("127.0.0.1:%d", c.nextPort)
	c.mu.Unlock()
	g := c.gossipConfig(name)
	scfg := slicelet.Config{
		Job: job, Task: task, Addr: addr, Join: c.joinAddrs(), Gossip: g, Preference: c.preference(),
		LoadWindow: 100 * time.Millisecond, Logger: c.log.With("task", name),
	}
	if c.opts.ConfigureTask != nil {
		c.opts.ConfigureTask(&scfg)
	}
	s, err := slicelet.New(scfg)
	if err != nil {
		c.t.Fatalf("clustertest: task %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tk := &Task{Slicelet: s, Name: name, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { tk.done <- s.Run(ctx) }()
	c.mu.Lock()
	c.tasks[name] = tk
	c.mu.Unlock()
	select {
	case <-s.Joined():
	case <-time.After(testwait.Scale(Timeout)):
		c.t.Fatalf("clustertest: task %s did not join gossip within %v", name, testwait.Scale(Timeout))
	}
	return tk
}

// Stop stops the task gracefully (it leaves gossip).
func (t *Task) Stop() {
	t.once.Do(func() {
		t.cancel()
		select {
		case err := <-t.done:
			if err != nil {
				t.c.t.Errorf("clustertest: task %s: %v", t.Name, err)
			}
		case <-time.After(testwait.Scale(Timeout)):
			t.c.t.Errorf("clustertest: task %s did not stop within %v", t.Name, testwait.Scale(Timeout))
		}
	})
}

// StartClerk starts a Clerk for job that finds Distributors and Backups
// among the running agents, and stops it at the end of the test.
func (c *Cluster) StartClerk(job string) *clerk.Clerk {
	c.t.Helper()
	cfg := clerk.DefaultConfig()
	cfg.Job = job
	if !c.opts.DefaultTimers {
		cfg.MinBackoff = 10 * time.Millisecond
		cfg.MaxBackoff = 100 * time.Millisecond
	}
	cfg.Logger = c.log.With("clerk", job)
	cfg.Resolver = func() (dists, backups []string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, a := range c.agents {
			if !a.running() {
				continue
			}
			if slices.Contains(a.cfg.Roles, gossip.RoleDistributor) {
				dists = append(dists, a.Addr())
			}
			if slices.Contains(a.cfg.Roles, gossip.RoleBackup) {
				backups = append(backups, a.Addr())
			}
		}
		slices.Sort(dists)
		slices.Sort(backups)
		return dists, backups
	}
	cl, err := clerk.New(cfg)
	if err != nil {
		c.t.Fatalf("clustertest: clerk for %s: %v", job, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.Run(ctx) }()
	c.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			c.t.Errorf("clustertest: clerk for %s: %v", job, err)
		}
	})
	return cl
}

// Running lists the names of the running agents, sorted.
func (c *Cluster) Running() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name, a := range c.agents {
		if a.running() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Leaders lists the running agents whose Assigner generates job.
func (c *Cluster) Leaders(job string) []string {
	var names []string
	for _, name := range c.Running() {
		if c.Agent(name).Leads(job) {
			names = append(names, name)
		}
	}
	return names
}

// WaitPreferred waits until every running agent prefers the Assigner name
// for job and that Assigner, alone, generates it.
func (c *Cluster) WaitPreferred(job, name string) {
	c.t.Helper()
	testwait.For(c.t, fmt.Sprintf("every agent to prefer %s for job %s, and only it to generate the job", name, job), func() bool {
		for _, n := range c.Running() {
			if got := c.Agent(n).PreferredAssigner(job); got != name {
				return false
			}
		}
		return slices.Equal(c.Leaders(job), []string{name})
	})
}

// Record reads job's stored record; a job with nothing stored reads as an
// empty record.
func (c *Cluster) Record(job string) storage.Record {
	c.t.Helper()
	rec, err := c.store.Load(context.Background(), job)
	if err != nil && !isNotFound(err) {
		c.t.Fatalf("clustertest: load %s: %v", job, err)
	}
	return rec
}

// WaitGeneration waits until job's stored generation is at least gen and
// returns the stored assignment.
func (c *Cluster) WaitGeneration(job string, gen uint64) *assign.Assignment {
	c.t.Helper()
	var cur *assign.Assignment
	testwait.For(c.t, fmt.Sprintf("job %s to reach generation %d in the store", job, gen), func() bool {
		cur = c.Record(job).Current
		return cur != nil && cur.Generation >= gen
	})
	return cur
}

// WaitConverged waits until every running agent prefers one Assigner for
// job and that Assigner alone generates it, and returns its name.
func (c *Cluster) WaitConverged(job string) string {
	c.t.Helper()
	var name string
	testwait.For(c.t, "the agents to agree on one preferred assigner for job "+job, func() bool {
		name = ""
		for _, n := range c.Running() {
			got := c.Agent(n).PreferredAssigner(job)
			if got == "" || (name != "" && got != name) {
				return false
			}
			name = got
		}
		return name != "" && slices.Equal(c.Leaders(job), []string{name})
	})
	return name
}

// WaitCoordinates waits until every running agent has an RTT estimate
// between every pair of running members, so that preferences are made on
// distances rather than the rendezvous fallback.
func (c *Cluster) WaitCoordinates() {
	c.t.Helper()
	testwait.For(c.t, "every agent to estimate the RTT between every pair of members", func() bool {
		members := c.Running()
		c.mu.Lock()
		for name := range c.tasks {
			members = append(members, name)
		}
		c.mu.Unlock()
		for _, n := range c.Running() {
			a := c.Agent(n)
			for i, x := range members {
				for _, y := range members[i+1:] {
					if _, ok := a.RTT(x, y); !ok {
						return false
					}
				}
			}
		}
		return true
	})
}

// WaitStable waits until every running agent has preferred the same
// Assigner for job, and it alone has generated the job, for d without a
// break (network coordinates take a while to settle), and returns its
// name.
func (c *Cluster) WaitStable(job string, d time.Duration) string {
	c.t.Helper()
	var name string
	var since time.Time
	testwait.For(c.t, fmt.Sprintf("the agents to agree on one preferred assigner for job %s for %v", job, d), func() bool {
		cur := ""
		for _, n := range c.Running() {
			got := c.Agent(n).PreferredAssigner(job)
			if got == "" || (cur != "" && got != cur) {
				cur = ""
				break
			}
			cur = got
		}
		if cur == "" || !slices.Equal(c.Leaders(job), []string{cur}) {
			name = ""
			return false
		}
		if cur != name {
			name, since = cur, time.Now()
		}
		return time.Since(since) >= d
	})
	return name
}
