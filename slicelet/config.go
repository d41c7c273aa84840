package slicelet

import (
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Config configures a Slicelet.
type Config struct {
	// Job and Task identify this server task; Task is stable across
	// restarts of the same task.
	Job, Task string
	// Addr is where this task serves its clients (host:port). It is
	// advertised in gossip and recorded in assignments, so Clerks route to
	// it. Required.
	Addr string
	// Capacity is this task's relative capacity, advertised in gossip: a
	// task of capacity 2 is given about twice the load of one of capacity
	// 1 by load-driven decisions (docs/algorithm.md, "Capacity"). 0 means
	// 1; otherwise assign.MinCapacity to assign.MaxCapacity. It is this
	// task's own claim, trusted as its load reports are: it can only draw
	// more or less of its own job's load to itself.
	Capacity float64
	// MemoryLimit is the most state, in bytes, this task may hold,
	// advertised in gossip; 0 means no limit, otherwise 1 to
	// assign.MaxBytes. The Assigner places no slice on the task past it,
	// and moves slices off the task when its state outgrows it, judging by
	// what StateBytes reports, which it therefore needs. Like Capacity it
	// is the task's own claim and can only move its own job's keys.
	MemoryLimit int64
	// StateBytes, if set, tells the Slicelet how much state the task holds
	// for its keys, so placement can keep it within MemoryLimit. Once per
	// load window the Slicelet calls it on its reporting goroutine; it
	// calls add, from that goroutine only, for each key it holds state
	// for (or once for keys that hash to the same slice key), with h the
	// key's slice key (assign.HashKey or assign.HashString) and the bytes
	// held. Calls after StateBytes returns, for keys the task does not own
	// and for bytes ≤ 0 are ignored. The sum per owned slice is reported
	// with the window's load. It costs one slice lookup per call.
	StateBytes func(add func(h assign.SliceKey, bytes int64))
	// ExportState and ImportState, set together on every task of the job,
	// move the application's state with its keys: a task that gains keys
	// fetches their state from the task that held them (see
	// StateExporter, and HandoffHandler, which the task must serve on
	// Addr). Nil: keys move without their state.
	ExportState StateExporter
	ImportState StateImporter
	// ImportStates, instead of ImportState, takes the entries of each
	// message a fetch receives at once (at most 1 MiB of keys and
	// values), for an importer that pays per call: the sidecar hands
	// them to its application in one local call. The slice is reused
	// after it returns.
	ImportStates func(entries []StateEntry)
	// HandoffAddr is where this task serves HandoffService when not at
	// Addr, advertised in gossip: a task's Slicelet that stands beside
	// its application (slicerd sidecar) serves it on its own listener.
	// "" means Addr.
	HandoffAddr string
	// HandoffTimeout bounds one fetch of state; 0 means
	// DefaultHandoffTimeout. HandoffMaxBytes bounds the keys and values
	// one fetch takes; 0 means DefaultHandoffMaxBytes.
	HandoffTimeout  time.Duration
	HandoffMaxBytes int64
	// GossipAddr is the IP:port this task's gossip member binds; default
	// "127.0.0.1:0" (a free loopback port). Use a routable IP when slicerd
	// runs on other hosts.
	GossipAddr string
	// Join lists slicerd gossip addresses (host:port); at least one.
	Join []string
	// Gossip is the base gossip configuration (profile, timers,
	// AdvertiseAddr). The Slicelet fills in NodeName, BindAddr, Join and
	// Self. The zero value means gossip.DefaultConfig(). To join a cluster
	// that encrypts gossip, start from gossip.DefaultConfig() and set Keys
	// (gossip.ParseKey decodes the base64 key) and, so that a restart after
	// a key rotation still joins, KeyringFile.
	Gossip gossip.Config
	// Preference tunes how the job's preferred Assigner, the one its load
	// reports go to, is chosen (see lease.Preference). Use the values the
	// slicerd agents use (their --preference-* flags); zero fields take
	// lease.DefaultPreference's.
	Preference lease.Preference
	// LoadWindow is how often the Slicelet sends the load measured through
	// ReportLoad to an Assigner; 0 means DefaultLoadWindow.
	LoadWindow time.Duration
	// CacheFile, when set, is a file where the Slicelet keeps the newest
	// assignment it accepted. A Slicelet that restarts with a valid cache
	// file treats the cached assignment as current — IsAffinitizedKey
	// answers from it and listeners are told the cached ranges — until it
	// hears a newer generation (see the package documentation). Its
	// directory must exist and be writable; New checks. Empty turns the
	// cache off. Each task needs its own file.
	CacheFile string
	// SubsetSize is how many Distributors the Slicelet prefers: it streams
	// from the SubsetSize live Distributors subset.Rocksteadier picks for
	// this task, in that order, and only when none answers from the
	// others, then from the Backups (see clerk.Config.SubsetSize). The
	// task's frontend number is its task number (subset.TaskNumber, "kv-7"
	// is 7), or a hash of job/task for a name that does not end in digits.
	// DefaultConfig sets clerk.DefaultSubsetSize; 0 means all
	// Distributors, tried in turn.
	SubsetSize int
	// Consistency is the job's: assign.Strong makes this task use an
	// assignment only under the job's guard and bridge leases, which it
	// reads from the Assigners, so that at most one task owns a key at any
	// instant (Owns, Handle, Handle.Token; see docs/consistency.md). The
	// job must be configured strong too. The default, affinity, needs no
	// lease.
	Consistency assign.Consistency
	// LeaseTTL is the lifetime of the guard and bridge reads asked for in
	// strong mode (default DefaultLeaseTTL; the Assigner may grant less,
	// and etcd rounds up to whole seconds). A task that dies holding the
	// guard holds up a change of assignment for at most this long.
	LeaseTTL time.Duration
	// ClockMargin is the fraction of a lease's TTL given up to the
	// difference between this machine's clock rate and the lease
	// manager's (default lease.DefaultClockMargin): the task stops using a
	// lease at send + TTL×(1−margin).
	ClockMargin float64
	// ReleaseWait bounds how long a key leaving this task in strong mode
	// waits for its outstanding handles (default DefaultReleaseWait).
	ReleaseWait time.Duration
	// TLS, when set, talks to slicerd over TLS with a certificate naming
	// this task (spiffe://slicerd/task/JOB/TASK, or JOB/* for any task of
	// the job): the Slicelet registers the task with every Assigner (which
	// gives slices only to registered tasks), reports load, and watches
	// assignments with it, and accepts only servers whose certificates
	// name them as slicerd agents. Required when slicerd runs with TLS.
	TLS *tlsconfig.Source
	// Logger receives state changes; nil discards.
	Logger *slog.Logger
	// Registerer, when set, receives the Slicelet's Prometheus metrics,
	// labelled with the job and task: the held assignment's generation and
	// age, IsAffinitizedKey lookups, and the requests ReportLoad counted
	// with those for keys this task does not own (misrouted; see
	// docs/operations.md, Metrics). A Slicelet created later for the same
	// job and task replaces an earlier one's metrics. Nil registers none.
	Registerer prometheus.Registerer
}

const defaultGossipAddr = "127.0.0.1:0"

// DefaultConfig returns a configuration with the recommended defaults; fill
// in Job, Task, Addr and Join.
func DefaultConfig() Config {
	return Config{LoadWindow: DefaultLoadWindow, SubsetSize: clerk.DefaultSubsetSize}
}

// DefaultLoadWindow is the load measurement window when Config.LoadWindow
// is 0. Two seconds, with the Assigner deciding as soon as a round of
// reports is in, lets it correct a hot-key shift within about 10 s
// (docs/benchmarks.md): a longer window makes the first decision after a
// shift see mostly old load. The noise this adds to each report is what
// the Assigner's sampling-noise gate discounts (assign.SignificantGain),
// so short windows do not make it chase noise.
const DefaultLoadWindow = 2 * time.Second

// gossipConfig returns the gossip configuration the Slicelet starts with.
func (c Config) gossipConfig(log *slog.Logger) gossip.Config {
	g := c.Gossip
	if reflect.ValueOf(g).IsZero() {
		g = gossip.DefaultConfig()
	}
	g.NodeName = gossip.TaskMemberName(c.Job, c.Task)
	g.BindAddr = c.GossipAddr
	if g.BindAddr == "" {
		g.BindAddr = defaultGossipAddr
	}
	g.Join = c.Join
	g.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: c.Job, Task: c.Task, RPCAddr: c.Addr, HandoffAddr: c.HandoffAddr, NoHandoff: c.ExportState == nil, Capacity: c.Capacity, MemoryLimit: c.MemoryLimit}
	if g.Logger == nil {
		g.Logger = log
	}
	return g
}

// validate reports what is wrong with c, if anything. Gossip settings are
// checked when Run starts gossip.
func (c Config) validate() error {
	if err := assign.ValidateJobName(c.Job); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := assign.ValidateCapacity(c.Capacity); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := assign.ValidateMemoryLimit(float64(c.MemoryLimit)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.ImportState != nil && c.ImportStates != nil {
		return fmt.Errorf("%w: task %s/%s sets both ImportState and ImportStates; set one", ErrInvalidConfig, c.Job, c.Task)
	}
	if (c.ExportState == nil) != (c.ImportState == nil && c.ImportStates == nil) {
		return fmt.Errorf("%w: task %s/%s sets only one of ExportState and ImportState; state handoff needs both", ErrInvalidConfig, c.Job, c.Task)
	}
	if c.HandoffAddr != "" {
		if c.ExportState == nil {
			return fmt.Errorf("%w: task %s/%s has a handoff address but no ExportState; a task serves handoff only with state to export", ErrInvalidConfig, c.Job, c.Task)
		}
		if err := gossip.ValidateRPCAddr(c.HandoffAddr); err != nil {
			return fmt.Errorf("%w: task %s/%s handoff address: %w", ErrInvalidConfig, c.Job, c.Task, err)
		}
	}
	if c.HandoffTimeout < 0 || c.HandoffMaxBytes < 0 {
		return fmt.Errorf("%w: task %s/%s has handoff timeout %v and max bytes %d; use positive values, or 0 for the defaults %v and %d",
			ErrInvalidConfig, c.Job, c.Task, c.HandoffTimeout, c.HandoffMaxBytes, DefaultHandoffTimeout, DefaultHandoffMaxBytes)
	}
	if c.MemoryLimit != 0 && c.StateBytes == nil {
		return fmt.Errorf("%w: task %s/%s has a memory limit but no StateBytes; set StateBytes so the Assigner knows the state it holds, or leave MemoryLimit 0", ErrInvalidConfig, c.Job, c.Task)
	}
	if err := assign.ValidateTaskName(c.Task); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Addr == "" {
		return fmt.Errorf("%w: task %s/%s has no Addr; set it to the host:port clients reach this task at", ErrInvalidConfig, c.Job, c.Task)
	}
	if c.SubsetSize < 0 {
		return fmt.Errorf("%w: task %s/%s has subset size %d; use 0 for all Distributors or clerk.DefaultSubsetSize (%d)", ErrInvalidConfig, c.Job, c.Task, c.SubsetSize, clerk.DefaultSubsetSize)
	}
	if c.LoadWindow < 0 {
		return fmt.Errorf("%w: task %s/%s has load window %v; set a positive LoadWindow, or 0 for the default %v", ErrInvalidConfig, c.Job, c.Task, c.LoadWindow, DefaultLoadWindow)
	}
	if _, err := assign.ParseConsistency(string(c.Consistency)); err != nil {
		return fmt.Errorf("%w: task %s/%s: %w", ErrInvalidConfig, c.Job, c.Task, err)
	}
	switch {
	case c.LeaseTTL < 0 || c.LeaseTTL > lease.MaxTTL:
		return fmt.Errorf("%w: task %s/%s has lease TTL %v; use 0 for the default %v, or up to %v", ErrInvalidConfig, c.Job, c.Task, c.LeaseTTL, DefaultLeaseTTL, lease.MaxTTL)
	case !(c.ClockMargin >= 0 && c.ClockMargin < 0.5):
		return fmt.Errorf("%w: task %s/%s has clock margin %g; it must be in [0, 0.5), 0 meaning the default %g", ErrInvalidConfig, c.Job, c.Task, c.ClockMargin, lease.DefaultClockMargin)
	case c.ReleaseWait < 0:
		return fmt.Errorf("%w: task %s/%s has release wait %v; use 0 for the default %v", ErrInvalidConfig, c.Job, c.Task, c.ReleaseWait, DefaultReleaseWait)
	}
	if err := c.Preference.Validate(); err != nil {
		return fmt.Errorf("%w: task %s/%s: %w", ErrInvalidConfig, c.Job, c.Task, err)
	}
	if len(c.Join) == 0 {
		return fmt.Errorf("%w: task %s/%s has nothing to join; set Join to the gossip address of at least one slicerd node", ErrInvalidConfig, c.Job, c.Task)
	}
	if c.TLS != nil {
		want := identity.Principal{IDs: c.TLS.IDs()}
		if !want.TaskOf(c.Job, c.Task) {
			return fmt.Errorf("%w: task %s/%s: the TLS certificate %s does not name this task (it has %v); it needs %s",
				ErrInvalidConfig, c.Job, c.Task, c.TLS.Files().Cert, want.IDs, identity.ID{Role: identity.Task, Job: c.Job, Task: c.Task})
		}
	}
	// The identity must fit in gossip tags; check it now rather than at Run.
	self := c.gossipConfig(nil).Self
	if _, err := self.Tags(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
