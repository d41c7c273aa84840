package roles

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/hostcheck"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/assigner"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/tlsconfig"
)

// ErrConfig is a configuration the agent cannot run with.
var ErrConfig = errors.New("roles: invalid configuration")

// Config is everything an Agent needs, already parsed; main turns flags into it.
type Config struct {
	// NodeName names this node in gossip; unique in the cluster.
	NodeName string
	// Roles this agent runs: any of assigner, distributor and backup.
	Roles []gossip.Role
	// DataDir holds the embedded store (assigner and backup roles).
	DataDir string
	// Store selects the assignment store: "" or "bolt" = the bbolt file in
	// DataDir (default), etcd://host:2379,host2:2379[/prefix] = etcd, under
	// the key prefix (default /slicerd/). See ParseStore.
	Store string
	// Etcd holds the TLS and login settings of an etcd Store.
	Etcd EtcdSecurity
	// OpenStore, if set, opens the store of the assigner and backup roles
	// instead of the bbolt file in DataDir; readOnly is true for an agent
	// that only runs the backup role. The agent closes what it returns.
	// In-process clusters use it to share one store among agents.
	OpenStore func(readOnly bool) (storage.Store, error)
	// JobLeaseTTL is the lifetime of the job leases the assigner role
	// holds (package lease): exactly one Assigner writes a job, and a
	// failed Assigner's jobs are taken over once its lease has run out.
	// etcd rounds it up to whole seconds, and to its least lease TTL.
	JobLeaseTTL time.Duration
	// BridgeWait bounds how long moving a strong job's guard waits for the
	// guard's readers to take the bridge before recalling the guard; the
	// readers that have not then wait for the guard's next value.
	BridgeWait time.Duration
	// DisableBridge moves strong jobs' guards without a bridge lease, so
	// that every key is unavailable while the guard is recalled: kept to
	// measure what the bridge is worth, never for production.
	DisableBridge bool
	// OpenLeases, if set, returns the assigner role's lease manager for the
	// store the agent opened, instead of the one the store's kind implies
	// (embedded for bbolt, etcdlease for etcd). In-process clusters use it
	// to share one embedded manager among agents that share one store. The
	// agent closes what it returns.
	OpenLeases func(store storage.Store) (lease.Manager, error)
	// RPCAddr is where the Connect/gRPC API listens (host:port; port 0 picks one).
	RPCAddr string
	// AdvertiseRPCAddr is the RPC address other members are told; default
	// the address RPCAddr bound to.
	AdvertiseRPCAddr string
	// Gossip configures the serf member; NodeName, Self and Logger are
	// filled in by the agent.
	Gossip gossip.Config
	// JoinRetryInterval paces attempts to join Gossip.Join.
	JoinRetryInterval time.Duration
	// Preference tunes how each job's preferred Assigner is chosen (see
	// lease.Preference). Every member of a cluster should use the same
	// values; zero fields take lease.DefaultPreference's.
	Preference lease.Preference

	// RebalanceDelay coalesces a burst of membership changes into one decision.
	RebalanceDelay time.Duration
	// StartupGrace is how long a starting Assigner serves stored
	// assignments unchanged while gossip learns which tasks are alive.
	StartupGrace time.Duration
	// BackupPollInterval paces the Backup's reads of the store for streams.
	BackupPollInterval time.Duration
	// StandbyPollInterval paces an Assigner's reads of the store for the
	// jobs it serves but another Assigner generates, when the store cannot
	// report changes itself (storage.Watcher).
	StandbyPollInterval time.Duration
	// PullMinBackoff and PullMaxBackoff bound a Distributor's reconnects to
	// an Assigner.
	PullMinBackoff, PullMaxBackoff time.Duration
	// DistributorUpstreams, when set, makes the Distributor a relay: it
	// streams each job from one of these Distributors (host:port) instead
	// of from Assigners (distributor.Config.Upstreams). At most
	// MaxDistributorUpstreams; needs the distributor role.
	DistributorUpstreams []string
	// LeaveTimeout bounds the graceful gossip leave at shutdown, and
	// ShutdownTimeout the drain of RPC connections after it.
	LeaveTimeout, ShutdownTimeout time.Duration
	// RebalanceInterval paces load-driven decisions: each job with load
	// reports is rebalanced on its measured load every interval, or as
	// soon as every task has reported since its last load decision if
	// half an interval has passed, and the result committed when it lowers
	// the imbalance by more than the load's sampling noise. 0 turns load
	// balancing off: decisions then follow membership only and ignore load.
	RebalanceInterval time.Duration
	// LoadHalfLife is how fast a task's load report fades once its next
	// report is overdue; 0 keeps stale reports at full weight.
	LoadHalfLife time.Duration
	// LoadHistoryInterval is how often an Assigner samples the load of the
	// jobs it leads for JobService.GetLoadHistory (see loadhistory.go);
	// 0 records nothing.
	LoadHistoryInterval time.Duration
	// UIAddr, if set, is a host:port where the agent serves its read-only
	// web UI (UIHandler) over plain HTTP, with no authentication of its
	// own. It needs the assigner role, and an address reachable from other
	// hosts needs Insecure.
	UIAddr string
	// UIMetrics, when set with UIAddr, is served at GET /metrics on the
	// web UI's address too: one port for an operator's UI and the
	// Prometheus scrape (--ui-addr and --metrics-addr the same).
	UIMetrics http.Handler
	// MaxRequestBytes caps a decoded RPC request.
	MaxRequestBytes int

	// MaxConnections caps the open connections to the RPC port, and
	// MaxConnectionsPerIP those from one remote IP address; a connection
	// over either is closed as soon as it is accepted, so that a flood of
	// connections cannot use up file descriptors (see internal/connlimit).
	MaxConnections, MaxConnectionsPerIP int
	// ReadHeaderTimeout bounds the reading of an HTTP/1 request's headers
	// (and so a new connection's first bytes, the HTTP/2 preface included),
	// and the reading of a call's request body from the call's start
	// (reflection streams excepted; see bodyTimeout).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes an RPC connection with no request in flight for
	// this long; a connection carrying a stream, such as WatchAssignment,
	// is not idle.
	IdleTimeout time.Duration
	// PingInterval is how long an HTTP/2 connection may stay silent before
	// the server pings it, and PingTimeout how long it then waits for the
	// answer before closing the connection: this finds peers that vanished
	// without closing their connections, streams included.
	PingInterval, PingTimeout time.Duration
	// AllowedHosts lists the host names the RPC port answers to besides IP
	// addresses, localhost and the host names of RPCAddr and
	// AdvertiseRPCAddr: exact names, "*.suffix", or "*" for any (behind a
	// proxy that checks Host itself). A request with another Host header
	// is refused, so that a web page cannot reach slicerd through DNS
	// rebinding (see internal/hostcheck).
	AllowedHosts []string
	// StreamWriteTimeout bounds one send on a WatchAssignment stream: a
	// stream whose reader has not taken an assignment within it is reset,
	// freeing the copy the send pinned (see sharedsend.go for the memory
	// bound), and its client resumes from the generation it holds.
	StreamWriteTimeout time.Duration
	// StreamSendBudget bounds the bytes of assignment copies that
	// WatchAssignment sends hold at once; sends beyond it share one
	// encoding per generation instead (see sharedsend.go).
	StreamSendBudget int64

	// TLS, when set, serves the RPC port over TLS with its certificate and
	// turns on authentication: every caller is known by the identities in
	// its client certificate (package identity) or by an admin bearer
	// token, and may call only what its identity allows (see
	// docs/security.md). The certificate must name this node in each of
	// its roles. Calls to other agents verify that the certificate behind a
	// gossip member's address names that member. Nil serves cleartext
	// HTTP/2 and trusts every caller, as for the single-node demo.
	TLS *tlsconfig.Source
	// AdminTokens are bearer tokens that make a caller an admin, for the
	// CLI's writes. They need TLS, so that they never cross the network in
	// clear.
	AdminTokens []auth.Token
	// Insecure allows cleartext RPC and gossip on an address other than
	// loopback, where anyone who reaches the port is trusted.
	Insecure bool
	// MaxStreams caps the streaming RPCs (WatchAssignment on every role,
	// server reflection) one agent serves at once; a stream over it fails
	// at once with ResourceExhausted. MaxStreamsPerConnection caps those on one HTTP/2
	// connection (its SETTINGS_MAX_CONCURRENT_STREAMS); a client over it
	// waits for a stream to end or opens another connection.
	MaxStreams, MaxStreamsPerConnection int
	// MaxStartingRPCs caps the RPCs served at once until they answer,
	// wait for their request body or wait for an event
	// (internal/startgate); the others wait at the gate in arrival order.
	// One that holds its place 100 ms stops counting. 0 chooses 32 per
	// CPU, at least 64.
	MaxStartingRPCs int
	// MaxJobs caps the jobs an Assigner holds: SetJobConfig for a new job
	// over it is refused with ResourceExhausted and a job that appears
	// through its tasks' gossip is ignored (and logged). Jobs already in
	// the store are always served.
	MaxJobs int
	// MaxSlicesPerJob caps the slices the Assigner's decisions give one
	// job, whatever its task count and configuration (splits stop there),
	// and the entries of one load report. A stored assignment with more
	// slices is still served; later decisions only merge it down.
	MaxSlicesPerJob int
	// MaxLoadReportsPerSecond is the steady rate of ReportLoad calls the
	// Assigner accepts from one task, and LoadReportBurst how many it
	// accepts in a row above that rate; a report over them is refused with
	// ResourceExhausted, and the Slicelet keeps its load for the next one.
	MaxLoadReportsPerSecond float64
	LoadReportBurst         int

	Logger *slog.Logger

	// Registerer receives the agent's Prometheus metrics (see
	// docs/operations.md, Metrics); nil registers none. Two agents in one
	// process need registerers that tell them apart, such as
	// prometheus.WrapRegistererWith with a node label.
	Registerer prometheus.Registerer
}

// DefaultConfig returns a configuration that runs every role on one node
// with production timers.
func DefaultConfig() Config {
	ad := assigner.DefaultConfig()
	return Config{
		Roles:               []gossip.Role{gossip.RoleAssigner, gossip.RoleDistributor, gossip.RoleBackup},
		DataDir:             "slicerd-data",
		RPCAddr:             "127.0.0.1:7070",
		Gossip:              defaultGossip(),
		JoinRetryInterval:   2 * time.Second,
		RebalanceDelay:      ad.RebalanceDelay,
		StartupGrace:        ad.StartupGrace,
		BackupPollInterval:  time.Second,
		StandbyPollInterval: ad.StandbyPollInterval,
		JobLeaseTTL:         ad.JobLeaseTTL,
		BridgeWait:          ad.BridgeWait,
		PullMinBackoff:      50 * time.Millisecond,
		PullMaxBackoff:      2 * time.Second,
		LeaveTimeout:        5 * time.Second,
		ShutdownTimeout:     5 * time.Second,
		RebalanceInterval:   ad.RebalanceInterval,
		LoadHalfLife:        ad.LoadHalfLife,
		LoadHistoryInterval: ad.LoadHistoryInterval,
		MaxRequestBytes:     1 << 20,
		MaxConnections:      8192,
		MaxConnectionsPerIP: 1024,
		ReadHeaderTimeout:   10 * time.Second,
		IdleTimeout:         5 * time.Minute,
		PingInterval:        time.Minute,
		PingTimeout:         15 * time.Second,
		// A Distributor serves 100,000 subscribers over about 100
		// connections with room to spare.
		MaxStreams:              200_000,
		MaxStreamsPerConnection: 2_000,
		MaxJobs:                 ad.MaxJobs,
		MaxSlicesPerJob:         ad.MaxSlicesPerJob,
		MaxLoadReportsPerSecond: ad.MaxLoadReportsPerSecond,
		LoadReportBurst:         ad.LoadReportBurst,
		StreamWriteTimeout:      30 * time.Second,
		StreamSendBudget:        64 << 20,
	}
}

// defaultGossip is gossip.DefaultConfig with the node's coordinate
// advertised as settling until it has settled, so that a restarted
// Assigner is left out of every member's preferences until distances to
// it can be trusted (lease.Preference).
func defaultGossip() gossip.Config {
	g := gossip.DefaultConfig()
	g.SettleSamples = gossip.DefaultSettleSamples
	return g
}

// TestConfig returns a configuration for tests on loopback: every role, a
// free RPC port, gossip.TestConfig's gossip, and timers short enough that
// joins, hand-overs and stops take milliseconds. DataDir and Logger still
// need setting.
func TestConfig(name string) Config {
	c := DefaultConfig()
	c.NodeName = name
	c.RPCAddr = "127.0.0.1:0"
	c.Gossip = gossip.TestConfig(name)
	c.JoinRetryInterval = 50 * time.Millisecond
	c.Preference = lease.Preference{Recheck: 50 * time.Millisecond}
	c.RebalanceDelay = 20 * time.Millisecond
	c.StartupGrace = 50 * time.Millisecond
	c.BackupPollInterval = 20 * time.Millisecond
	c.StandbyPollInterval = 20 * time.Millisecond
	c.JobLeaseTTL = 500 * time.Millisecond
	c.PullMinBackoff = 10 * time.Millisecond
	c.PullMaxBackoff = 100 * time.Millisecond
	c.LeaveTimeout = time.Second
	c.ShutdownTimeout = time.Second
	c.MaxLoadReportsPerSecond = 1000 // Slicelets in tests report every few milliseconds
	c.LoadReportBurst = 1000
	return c
}

func (c Config) has(r gossip.Role) bool { return slices.Contains(c.Roles, r) }

// Validate reports the first problem with c, saying which setting to fix.
func (c Config) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("%w: node name is empty; set --node-name", ErrConfig)
	}
	if len(c.Roles) == 0 {
		return fmt.Errorf("%w: no role; run at least one of assigner, distributor, backup", ErrConfig)
	}
	for _, r := range c.Roles {
		switch r {
		case gossip.RoleAssigner, gossip.RoleDistributor, gossip.RoleBackup:
		default:
			return fmt.Errorf("%w: role %q cannot run in slicerd; use assigner, distributor or backup", ErrConfig, r)
		}
	}
	store, err := ParseStore(c.Store)
	if err != nil {
		return err
	}
	if err := c.Etcd.validate(store); err != nil {
		return err
	}
	if (c.has(gossip.RoleAssigner) || c.has(gossip.RoleBackup)) && c.DataDir == "" && !store.Etcd && c.OpenStore == nil {
		return fmt.Errorf("%w: the assigner and backup roles need --data-dir (or an etcd --store)", ErrConfig)
	}
	if err := ValidateHostPort("rpc address", c.RPCAddr, true); err != nil {
		return err
	}
	// Gossip checks these only when it starts, after the store is open:
	// refuse them first, naming the flag.
	if err := gossip.ValidateNodeName(c.NodeName); err != nil {
		return fmt.Errorf("%w: %w; fix --node-name", ErrConfig, err)
	}
	if err := gossip.ValidateBindAddr(c.Gossip.BindAddr); err != nil {
		return fmt.Errorf("%w: %w; fix --gossip-addr", ErrConfig, err)
	}
	for _, j := range c.Gossip.Join {
		if err := gossip.ValidateJoinAddr(j); err != nil {
			return fmt.Errorf("%w: %w; fix --join", ErrConfig, err)
		}
	}
	if c.UIAddr != "" {
		if err := ValidateHostPort("web UI address (--ui-addr)", c.UIAddr, true); err != nil {
			return err
		}
	}
	if c.AdvertiseRPCAddr != "" {
		if err := ValidateHostPort("advertised rpc address", c.AdvertiseRPCAddr, false); err != nil {
			return err
		}
	}
	if n := len(c.DistributorUpstreams); n > 0 {
		if !c.has(gossip.RoleDistributor) {
			return fmt.Errorf("%w: upstream distributors (--distributor-upstream) need the distributor role (--role distributor)", ErrConfig)
		}
		if n > MaxDistributorUpstreams {
			return fmt.Errorf("%w: %d upstream distributors (--distributor-upstream); at most %d", ErrConfig, n, MaxDistributorUpstreams)
		}
		seen := map[string]bool{}
		for _, u := range c.DistributorUpstreams {
			if err := ValidateHostPort("upstream distributor address (--distributor-upstream)", u, false); err != nil {
				return err
			}
			if seen[u] {
				return fmt.Errorf("%w: upstream distributor %s (--distributor-upstream) is listed twice", ErrConfig, u)
			}
			if u == c.RPCAddr || u == c.AdvertiseRPCAddr {
				return fmt.Errorf("%w: upstream distributor %s (--distributor-upstream) is this node's own RPC address; list first-level distributors, which pull from Assigners", ErrConfig, u)
			}
			seen[u] = true
		}
	}
	// A list, not a map, so the first bad setting is named every time.
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"join retry interval", c.JoinRetryInterval}, {"rebalance delay (--rebalance-delay)", c.RebalanceDelay},
		{"backup poll interval", c.BackupPollInterval}, {"standby poll interval (--standby-poll-interval)", c.StandbyPollInterval},
		{"pull min backoff", c.PullMinBackoff}, {"pull max backoff", c.PullMaxBackoff},
		{"leave timeout", c.LeaveTimeout}, {"shutdown timeout", c.ShutdownTimeout},
		{"read header timeout (--read-header-timeout)", c.ReadHeaderTimeout}, {"idle timeout (--idle-timeout)", c.IdleTimeout},
		{"ping interval (--ping-interval)", c.PingInterval}, {"ping timeout (--ping-timeout)", c.PingTimeout},
		{"stream write timeout (--stream-write-timeout)", c.StreamWriteTimeout}, {"bridge wait (--bridge-wait)", c.BridgeWait},
	} {
		if d.d <= 0 {
			return fmt.Errorf("%w: %s is %v; it must be positive", ErrConfig, d.name, d.d)
		}
	}
	if c.JobLeaseTTL <= 0 || c.JobLeaseTTL > lease.MaxTTL {
		return fmt.Errorf("%w: job lease TTL (--job-lease-ttl) is %v; it must be above 0 and at most %v", ErrConfig, c.JobLeaseTTL, lease.MaxTTL)
	}
	if err := c.validatePreference(); err != nil {
		return err
	}
	if c.StartupGrace < 0 {
		return fmt.Errorf("%w: startup grace (--startup-grace) is %v; it must not be negative", ErrConfig, c.StartupGrace)
	}
	if c.RebalanceInterval < 0 {
		return fmt.Errorf("%w: rebalance interval (--rebalance-interval) is %v; it must not be negative (0 turns load balancing off)", ErrConfig, c.RebalanceInterval)
	}
	if c.LoadHalfLife < 0 {
		return fmt.Errorf("%w: load half-life is %v; it must not be negative", ErrConfig, c.LoadHalfLife)
	}
	if c.LoadHistoryInterval < 0 {
		return fmt.Errorf("%w: load history interval is %v; it must not be negative (0 records nothing)", ErrConfig, c.LoadHistoryInterval)
	}
	if c.UIAddr != "" && !c.has(gossip.RoleAssigner) {
		return fmt.Errorf("%w: the web UI (--ui-addr) reads jobs from this node's Assigner; run the assigner role too, or serve the UI from a node that does", ErrConfig)
	}
	if c.MaxRequestBytes <= 0 {
		return fmt.Errorf("%w: max request bytes must be positive", ErrConfig)
	}
	if c.MaxConnections <= 0 {
		return fmt.Errorf("%w: max connections (--max-connections) is %d; it must be positive (size it below the file descriptor limit)", ErrConfig, c.MaxConnections)
	}
	if c.MaxConnectionsPerIP <= 0 || c.MaxConnectionsPerIP > c.MaxConnections {
		return fmt.Errorf("%w: max connections per IP (--max-connections-per-ip) is %d; it must be positive and at most max connections (%d)", ErrConfig, c.MaxConnectionsPerIP, c.MaxConnections)
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if c.MaxStreams <= 0 {
		return fmt.Errorf("%w: max streams (--max-streams) is %d; it must be positive (size it for every watcher of this node)", ErrConfig, c.MaxStreams)
	}
	if c.MaxStreamsPerConnection <= 0 || c.MaxStreamsPerConnection > maxStreamsPerConnectionLimit {
		return fmt.Errorf("%w: max streams per connection (--max-streams-per-connection) is %d; it must be in [1, %d]", ErrConfig, c.MaxStreamsPerConnection, maxStreamsPerConnectionLimit)
	}
	if c.MaxStartingRPCs < 0 || c.MaxStartingRPCs > maxStartingRPCsLimit {
		return fmt.Errorf("%w: max starting RPCs (--max-starting-rpcs) is %d; it must be in [0, %d] (0: 32 per CPU)", ErrConfig, c.MaxStartingRPCs, maxStartingRPCsLimit)
	}
	if c.MaxJobs <= 0 {
		return fmt.Errorf("%w: max jobs (--max-jobs) is %d; it must be positive", ErrConfig, c.MaxJobs)
	}
	if c.MaxSlicesPerJob < 1 || c.MaxSlicesPerJob > assign.MaxSlicesLimit {
		return fmt.Errorf("%w: max slices per job (--max-slices-per-job) is %d; it must be in [1, %d]", ErrConfig, c.MaxSlicesPerJob, assign.MaxSlicesLimit)
	}
	if !(c.MaxLoadReportsPerSecond > 0) || math.IsInf(c.MaxLoadReportsPerSecond, 0) {
		return fmt.Errorf("%w: max load reports per second (--max-load-reports-per-second) is %g; it must be a positive number", ErrConfig, c.MaxLoadReportsPerSecond)
	}
	if c.LoadReportBurst < 1 {
		return fmt.Errorf("%w: load report burst (--load-report-burst) is %d; it must be at least 1", ErrConfig, c.LoadReportBurst)
	}
	if c.StreamSendBudget < 0 {
		return fmt.Errorf("%w: stream send budget is %d bytes; it must not be negative (0 makes every assignment send share one encoding)", ErrConfig, c.StreamSendBudget)
	}
	for _, h := range c.AllowedHosts {
		if err := hostcheck.ValidateAllowed(h); err != nil {
			return fmt.Errorf("%w: allowed hosts: %v; list host names, *.domain or *, comma-separated", ErrConfig, err)
		}
	}
	return nil
}

// validatePreference checks Preference one field at a time, so that the
// error names the setting to fix.
func (c Config) validatePreference() error {
	p := c.Preference
	for _, f := range []struct {
		setting string
		p       lease.Preference
	}{
		{"--preference-margin", lease.Preference{Margin: p.Margin}},
		{"--preference-min-gain", lease.Preference{MinGain: p.MinGain}},
		{"Preference.SampleTasks", lease.Preference{SampleTasks: p.SampleTasks}},
		{"--preference-recheck", lease.Preference{Recheck: p.Recheck}},
	} {
		if err := f.p.Validate(); err != nil {
			return fmt.Errorf("%w: %w; fix %s", ErrConfig, err, f.setting)
		}
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// maxStreamsPerConnectionLimit is the most concurrent streams an HTTP/2
// connection may be allowed (2^31-1 is the protocol's own ceiling; past a
// million one connection would hold more than any node serves).
const maxStreamsPerConnectionLimit = 1 << 20

// ValidateHostPort checks a host:port setting; zeroPort allows port 0.
func ValidateHostPort(what, addr string, zeroPort bool) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not host:port (%v); e.g. 127.0.0.1:7070", ErrConfig, what, addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (p == 0 && !zeroPort) {
		return fmt.Errorf("%w: %s %q has an invalid port; use 1-65535", ErrConfig, what, addr)
	}
	return nil
}

// validateSecurity checks the TLS and token settings, and that a node
// reachable from other hosts does not run without them unless told to.
func (c Config) validateSecurity() error {
	if len(c.AdminTokens) > 0 && c.TLS == nil {
		return fmt.Errorf("%w: admin tokens need TLS (--tls-cert, --tls-key, --tls-ca): a bearer token sent in clear can be read off the network", ErrConfig)
	}
	if err := auth.ValidateTokens(c.AdminTokens); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.TLS != nil {
		ids := c.TLS.IDs()
		for _, r := range c.Roles {
			want := identity.ID{Role: identity.Role(r), Node: c.NodeName}
			if !slices.Contains(ids, want) {
				return fmt.Errorf("%w: the certificate %s does not name this node in role %s: it needs the URI %s (it has %v); issue one with slicerd tls init --nodes %s, or fix --node-name",
					ErrConfig, c.TLS.Files().Cert, r, want, ids, c.NodeName)
			}
		}
	}
	if c.Insecure {
		return nil
	}
	if c.TLS == nil && !loopbackOnly(c.RPCAddr) {
		return fmt.Errorf("%w: rpc address %s (--rpc-addr) is reachable from other hosts, but TLS is off, so anyone who reaches it could steer the cluster; set --tls-cert, --tls-key and --tls-ca (see docs/security.md), or pass --insecure on a network you trust",
			ErrConfig, c.RPCAddr)
	}
	if c.UIAddr != "" && !loopbackOnly(c.UIAddr) {
		return fmt.Errorf("%w: web UI address %s (--ui-addr) is reachable from other hosts, but the UI has no authentication, so anyone who reaches it could read every job's tasks, load and history; bind it to 127.0.0.1 (and reach it through an SSH tunnel or an authenticating proxy), or pass --insecure on a network you trust",
			ErrConfig, c.UIAddr)
	}
	if !loopbackOnly(c.Gossip.BindAddr) && len(c.Gossip.Keys) == 0 && !fileExists(c.Gossip.KeyringFile) {
		return fmt.Errorf("%w: gossip address %s (--gossip-addr) is reachable from other hosts, but gossip is not encrypted, so anyone who reaches it could join the cluster; set --gossip-key (make one with slicerd keyring generate; see docs/security.md), or pass --insecure on a network you trust",
			ErrConfig, c.Gossip.BindAddr)
	}
	return nil
}

// loopbackOnly reports whether a host:port is reachable from this host
// only: a loopback IP or localhost.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true // Validate reports it
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func fileExists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

// MaxDistributorUpstreams bounds Config.DistributorUpstreams: a relay
// tries them in turn, so a long list only delays its fallback.
const MaxDistributorUpstreams = 16
