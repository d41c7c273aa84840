package cli

import (
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/tlsconfig"
)

func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "slicerd"
	}
	return h
}

// agentFlagCategories group the agent's flags in 'slicerd --help' (which
// sorts the groups by name) and in the flag reference (in this order).
var agentFlagCategories = []struct {
	name  string
	flags []string
}{
	{"Roles and store", []string{"role", "data-dir", "store", "etcd-ca", "etcd-cert", "etcd-key", "etcd-username", "etcd-password-file"}},
	{"Network", []string{"rpc-addr", "advertise-rpc-addr", "ui-addr", "allowed-hosts"}},
	{"Distributor: fan-out tree", []string{"distributor-upstream"}},
	{"Gossip", []string{"gossip-addr", "join", "node-name", "gossip-profile", "gossip-key", "gossip-keyring-file", "gossip-delay"}},
	{"Security: TLS and tokens", []string{"tls-cert", "tls-key", "tls-ca", "token-file", "insecure"}},
	{"Assigner: timers, leases and preference", []string{"rebalance-delay", "rebalance-interval", "startup-grace", "job-lease-ttl",
		"standby-poll-interval", "preference-margin", "preference-min-gain", "preference-recheck", "bridge-wait", "disable-bridge"}},
	{"Limits: jobs and load reports", []string{"max-jobs", "max-slices-per-job", "max-load-reports-per-second", "load-report-burst"}},
	{"Limits: RPC connections and streams", []string{"max-connections", "max-connections-per-ip", "idle-timeout", "read-header-timeout",
		"ping-interval", "ping-timeout", "max-streams", "max-streams-per-connection", "max-starting-rpcs", "stream-write-timeout", "stream-send-budget-mib"}},
	{"Logs and metrics", []string{"log-level", "log-format", "metrics-addr"}},
}

// agentFlags are the flags of slicerd without a command: a node, each in
// its category of agentFlagCategories.
func agentFlags() []cli.Flag {
	category := map[string]string{}
	for _, c := range agentFlagCategories {
		for _, name := range c.flags {
			category[name] = c.name
		}
	}
	flags := agentFlagList()
	for i, f := range flags {
		flags[i] = withCategory(f, category[f.Names()[0]])
	}
	return flags
}

// withCategory returns a copy of f in category; f may be shared with other
// commands, which list their flags without categories.
func withCategory(f cli.Flag, category string) cli.Flag {
	v := reflect.ValueOf(f).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	c.Elem().FieldByName("Category").SetString(category)
	return c.Interface().(cli.Flag)
}

func agentFlagList() []cli.Flag {
	d := roles.DefaultConfig()
	return append([]cli.Flag{
		&cli.StringFlag{
			Name: "role", EnvVars: []string{"SLICERD_ROLE"},
			Usage: "roles to run, comma-separated: assigner, distributor, backup (default: all three on the embedded store)",
		},
		&cli.StringFlag{
			Name: "data-dir", Value: d.DataDir, EnvVars: []string{"SLICERD_DATA_DIR"},
			Usage: "directory of the embedded assignment store (assigner and backup roles)",
		},
		&cli.StringFlag{
			Name: "store", Value: "bolt", EnvVars: []string{"SLICERD_STORE"},
			Usage: "assignment store of the assigner and backup roles: bolt (a file in --data-dir, for one node) or " +
				"etcd://host:2379[,host2:2379][/prefix] to share one store among several assigners and backups " +
				"(keys under the prefix, default /slicerd/); etcds:// for etcd over TLS",
		},
		&cli.StringFlag{
			Name: "etcd-ca", EnvVars: []string{"SLICERD_ETCD_CA"},
			Usage: "PEM file of the CAs that sign etcd's server certificates (etcdctl's --cacert); turns TLS toward etcd on. " +
				"Default: none (plaintext, or the system's roots with etcds://). Read again when it changes",
		},
		&cli.StringFlag{
			Name: "etcd-cert", EnvVars: []string{"SLICERD_ETCD_CERT"},
			Usage: "PEM client certificate for an etcd with --client-cert-auth (etcdctl's --cert); turns TLS toward etcd on, needs --etcd-key. " +
				"With etcd's authentication on, its common name is the etcd user. Default: none. Read again when it changes",
		},
		&cli.StringFlag{
			Name: "etcd-key", EnvVars: []string{"SLICERD_ETCD_KEY"},
			Usage: "PEM key of --etcd-cert (etcdctl's --key). Default: none. Read again when it changes",
		},
		&cli.StringFlag{
			Name: "etcd-username", EnvVars: []string{"SLICERD_ETCD_USERNAME"},
			Usage: "etcd user to log in as when etcd's authentication is on (etcdctl's --user); needs --etcd-password-file. " +
				"Default: none (no login, or the client certificate's user)",
		},
		&cli.StringFlag{
			Name: "etcd-password-file", EnvVars: []string{"SLICERD_ETCD_PASSWORD_FILE"},
			Usage: "file whose first line is the password of --etcd-username, read at start, so that the password is in neither " +
				"the process list nor the environment (chmod 600). Default: none",
		},
		&cli.StringFlag{
			Name: "rpc-addr", Value: d.RPCAddr, EnvVars: []string{"SLICERD_RPC_ADDR"},
			Usage: "host:port the RPC API listens on: Connect, gRPC and gRPC-Web, over HTTP/1.1 or cleartext HTTP/2",
		},
		&cli.StringFlag{
			Name: "advertise-rpc-addr", EnvVars: []string{"SLICERD_ADVERTISE_RPC_ADDR"},
			Usage: "RPC address other members use to reach this node (default: the bound --rpc-addr)",
		},
		&cli.StringFlag{
			Name: "ui-addr", EnvVars: []string{"SLICERD_UI_ADDR"},
			Usage: "host:port of the read-only web UI (jobs, load heatmap, assignment, decision history, 'why' lookups), " +
				"plain HTTP with no authentication of its own; needs the assigner role, and an address other than loopback needs --insecure. " +
				"The same address as --metrics-addr serves both on one port. Default: off",
		},
		&cli.StringFlag{
			Name: "gossip-addr", Value: d.Gossip.BindAddr, EnvVars: []string{"SLICERD_GOSSIP_ADDR"},
			Usage: "host:port gossip binds to, TCP and UDP",
		},
		&cli.StringSliceFlag{
			Name: "distributor-upstream", EnvVars: []string{"SLICERD_DISTRIBUTOR_UPSTREAM"},
			Usage: "make this node's distributor a relay: stream each job from one of these distributors (host:port; repeat or " +
				"comma-separate, at most 16) instead of from assigners, for a second level of fan-out (docs/architecture.md); " +
				"the job's preferred assigner when all of them fail",
		},
		&cli.StringSliceFlag{
			Name: "join", EnvVars: []string{"SLICERD_JOIN"},
			Usage: "gossip address of an existing member to join; repeat or comma-separate for several",
		},
		&cli.StringFlag{
			Name: "node-name", Value: defaultNodeName(), EnvVars: []string{"SLICERD_NODE_NAME"},
			Usage: "this node's unique name in gossip",
		},
		gossipProfileFlag(),
		&cli.Float64Flag{
			Name: "preference-margin", Value: lease.DefaultPreference().Margin, EnvVars: []string{"SLICERD_PREFERENCE_MARGIN"},
			Usage: "hysteresis of the preferred assigner: another assigner takes a job over only when its estimated round trip " +
				"to the job's tasks is lower by more than this fraction (and by --preference-min-gain); use the same value on every node",
		},
		&cli.DurationFlag{
			Name: "preference-min-gain", Value: lease.DefaultPreference().MinGain, EnvVars: []string{"SLICERD_PREFERENCE_MIN_GAIN"},
			Usage: "hysteresis of the preferred assigner: the least round-trip improvement that moves a job to another assigner",
		},
		&cli.DurationFlag{
			Name: "preference-recheck", Value: lease.DefaultPreference().Recheck, EnvVars: []string{"SLICERD_PREFERENCE_RECHECK"},
			Usage: "how often each node re-evaluates every job's preferred assigner while membership is quiet (network coordinates move without membership events)",
		},
		&cli.DurationFlag{
			Name: "standby-poll-interval", Value: d.StandbyPollInterval, EnvVars: []string{"SLICERD_STANDBY_POLL_INTERVAL"},
			Usage: "how often an assigner that is not preferred for a job re-reads it from a store that cannot push changes (bolt); etcd pushes them",
		},
		&cli.DurationFlag{
			Name: "bridge-wait", Value: d.BridgeWait, EnvVars: []string{"SLICERD_BRIDGE_WAIT"},
			Usage: "how long moving a strongly consistent job's guard waits for its tasks to take the bridge lease, which keeps their unchanged keys available, before recalling the guard",
		},
		&cli.BoolFlag{
			Name: "disable-bridge", EnvVars: []string{"SLICERD_DISABLE_BRIDGE"},
			Usage: "benchmarking aid: move strongly consistent jobs' guards without a bridge lease, so every key waits for each recall (never in production)",
		},
		&cli.DurationFlag{
			Name: "job-lease-ttl", Value: d.JobLeaseTTL, EnvVars: []string{"SLICERD_JOB_LEASE_TTL"},
			Usage: "lifetime of the job leases an assigner holds (one writer per job; renewed every third of it): a failed assigner's jobs move once it has run out (etcd rounds it up to whole seconds and to its least lease TTL, 2s by default; at most 1m)",
		},
		&cli.DurationFlag{
			Name: "gossip-delay", EnvVars: []string{"SLICERD_GOSSIP_DELAY"},
			Usage: "testing aid: delay everything this node sends over gossip by this long, so that it looks far away " +
				"to network-proximity estimates (0 = off; leave it off in production)",
		},
		gossipKeyFlag(),
		gossipKeyringFileFlag(),
		&cli.DurationFlag{
			Name: "rebalance-delay", Value: d.RebalanceDelay, EnvVars: []string{"SLICERD_REBALANCE_DELAY"},
			Usage: "how long the assigner waits for membership changes to settle before deciding",
		},
		&cli.DurationFlag{
			Name: "rebalance-interval", Value: d.RebalanceInterval, EnvVars: []string{"SLICERD_REBALANCE_INTERVAL"},
			Usage: "how often, at most, the assigner waits to rebalance each job on its tasks' reported load; a job whose every task has reported since its last load decision is decided on at once, if half this has passed (0 turns load balancing off; membership changes are still handled)",
		},
		&cli.DurationFlag{
			Name: "startup-grace", Value: d.StartupGrace, EnvVars: []string{"SLICERD_STARTUP_GRACE"},
			Usage: "how long a starting assigner serves the stored assignment unchanged while gossip converges",
		},
		&cli.IntFlag{
			Name: "max-connections", Value: d.MaxConnections, EnvVars: []string{"SLICERD_MAX_CONNECTIONS"},
			Usage: "most connections the RPC port keeps open; one more is closed as soon as it is accepted " +
				"(keep it well below the process's file descriptor limit, LimitNOFILE in the systemd units)",
		},
		&cli.IntFlag{
			Name: "max-connections-per-ip", Value: d.MaxConnectionsPerIP, EnvVars: []string{"SLICERD_MAX_CONNECTIONS_PER_IP"},
			Usage: "most connections the RPC port keeps open from one remote IP address, so that one host cannot take them all",
		},
		&cli.DurationFlag{
			Name: "idle-timeout", Value: d.IdleTimeout, EnvVars: []string{"SLICERD_IDLE_TIMEOUT"},
			Usage: "how long an RPC connection with no call or stream in flight stays open; watch streams are never idle",
		},
		&cli.DurationFlag{
			Name: "read-header-timeout", Value: d.ReadHeaderTimeout, EnvVars: []string{"SLICERD_READ_HEADER_TIMEOUT"},
			Usage: "how long a new RPC connection may take to send its first request's headers (HTTP/1.1) or the HTTP/2 preface, and a call the rest of its request body once it started (reflection streams excepted)",
		},
		&cli.DurationFlag{
			Name: "ping-interval", Value: d.PingInterval, EnvVars: []string{"SLICERD_PING_INTERVAL"},
			Usage: "how long an HTTP/2 connection, streams included, may stay silent before the server pings it",
		},
		&cli.DurationFlag{
			Name: "ping-timeout", Value: d.PingTimeout, EnvVars: []string{"SLICERD_PING_TIMEOUT"},
			Usage: "how long the server waits for a ping's answer before closing the connection and its streams",
		},
		&cli.DurationFlag{
			Name: "stream-write-timeout", Value: d.StreamWriteTimeout, EnvVars: []string{"SLICERD_STREAM_WRITE_TIMEOUT"},
			Usage: "how long one send on an assignment watch stream may wait for a client that does not read; " +
				"the stream is then reset, freeing the memory the send held, and the client resumes from the generation it has",
		},
		&cli.IntFlag{
			Name: "stream-send-budget-mib", Value: int(d.StreamSendBudget >> 20), EnvVars: []string{"SLICERD_STREAM_SEND_BUDGET_MIB"},
			Usage: "MiB of assignment copies that watch stream sends may hold at once; sends beyond it share one encoding " +
				"per generation, so slow subscribers cannot pin a copy each (0: always share)",
		},
		&cli.StringFlag{
			Name: "allowed-hosts", EnvVars: []string{"SLICERD_ALLOWED_HOSTS"},
			Usage: "host names the RPC port answers to, comma-separated (name, *.domain, or * for any, behind a proxy); " +
				"IP addresses, localhost and the host names of --rpc-addr and --advertise-rpc-addr always pass. " +
				"A request with any other Host header is refused, so that a web page cannot reach slicerd through DNS rebinding",
		},
		&cli.IntFlag{
			Name: "max-streams", Value: d.MaxStreams, EnvVars: []string{"SLICERD_MAX_STREAMS"},
			Usage: "most streams (WatchAssignment on every role, server reflection) this node serves at once; one more fails at once " +
				"with RESOURCE_EXHAUSTED (each holds a goroutine and its subscriber's state: see docs/operations.md)",
		},
		&cli.IntFlag{
			Name: "max-streams-per-connection", Value: d.MaxStreamsPerConnection, EnvVars: []string{"SLICERD_MAX_STREAMS_PER_CONNECTION"},
			Usage: "most streams one HTTP/2 connection may carry at once (SETTINGS_MAX_CONCURRENT_STREAMS); a client over it waits or opens another connection",
		},
		&cli.IntFlag{
			Name: "max-starting-rpcs", Value: d.MaxStartingRPCs, EnvVars: []string{"SLICERD_MAX_STARTING_RPCS"},
			Usage: "most RPCs this node serves at once until they answer or wait (for their request body, a job's change, another node); " +
				"the others wait in arrival order, out of the run queue, so that many streams opening at once do not starve gossip. " +
				"One holding its place 100 ms stops counting (slicerd_rpc_parked_handlers_total). 0: 32 per CPU, at least 64",
		},
		&cli.IntFlag{
			Name: "max-jobs", Value: d.MaxJobs, EnvVars: []string{"SLICERD_MAX_JOBS"},
			Usage: "most jobs an assigner holds: setting the configuration of one more fails with RESOURCE_EXHAUSTED, " +
				"and jobs announced only by tasks beyond it are ignored (logged); jobs already stored are always served. " +
				"A distributor holds at most twice this many jobs: a watch of one more fails with RESOURCE_EXHAUSTED",
		},
		&cli.IntFlag{
			Name: "max-slices-per-job", Value: d.MaxSlicesPerJob, EnvVars: []string{"SLICERD_MAX_SLICES_PER_JOB"},
			Usage: "most slices an assigner's decisions give one job, however hot its load, and most entries in one load report; " +
				"an assignment stored with more is still served and only merged down",
		},
		&cli.Float64Flag{
			Name: "max-load-reports-per-second", Value: d.MaxLoadReportsPerSecond, EnvVars: []string{"SLICERD_MAX_LOAD_REPORTS_PER_SECOND"},
			Usage: "load reports per second an assigner accepts from one task; one more fails with RESOURCE_EXHAUSTED " +
				"and the task keeps its load for the next report (a Slicelet reports once per load window, " + slicelet.DefaultLoadWindow.String() + " by default)",
		},
		&cli.IntFlag{
			Name: "load-report-burst", Value: d.LoadReportBurst, EnvVars: []string{"SLICERD_LOAD_REPORT_BURST"},
			Usage: "load reports an assigner accepts from one task in a row above --max-load-reports-per-second",
		},
		metricsAddrFlag(),
		flagLogLevel,
		flagLogFormat,
	}, agentSecurityFlags()...)
}

// agentConfig turns flags into a validated agent configuration.
func agentConfig(c *cli.Context, log *slog.Logger) (roles.Config, error) {
	if c.Args().Present() {
		return roles.Config{}, unknownCommand(c, c.App.Commands)
	}
	cfg := roles.DefaultConfig()
	cfg.Logger = log
	if s := c.String("role"); s != "" {
		cfg.Roles = nil
		for _, part := range strings.Split(s, ",") {
			r, err := gossip.ParseRole(strings.TrimSpace(part))
			if err != nil || r == gossip.RoleTask {
				return cfg, usageError("invalid --role %q: use assigner, distributor or backup, comma-separated", part)
			}
			cfg.Roles = append(cfg.Roles, r)
		}
	}
	cfg.NodeName = c.String("node-name")
	cfg.DataDir = c.String("data-dir")
	cfg.Store = c.String("store")
	cfg.Etcd = roles.EtcdSecurity{
		CAFile: c.String("etcd-ca"), CertFile: c.String("etcd-cert"), KeyFile: c.String("etcd-key"),
		Username: c.String("etcd-username"), PasswordFile: c.String("etcd-password-file"),
	}
	cfg.RPCAddr = c.String("rpc-addr")
	cfg.AdvertiseRPCAddr = c.String("advertise-rpc-addr")
	cfg.UIAddr = c.String("ui-addr")
	cfg.RebalanceDelay = c.Duration("rebalance-delay")
	cfg.StartupGrace = c.Duration("startup-grace")
	cfg.RebalanceInterval = c.Duration("rebalance-interval")
	cfg.Gossip.BindAddr = c.String("gossip-addr")
	for _, j := range c.StringSlice("join") {
		for _, addr := range strings.Split(j, ",") {
			if addr = strings.TrimSpace(addr); addr != "" {
				cfg.Gossip.Join = append(cfg.Gossip.Join, addr)
			}
		}
	}
	for _, u := range c.StringSlice("distributor-upstream") {
		for _, addr := range strings.Split(u, ",") {
			if addr = strings.TrimSpace(addr); addr != "" {
				cfg.DistributorUpstreams = append(cfg.DistributorUpstreams, addr)
			}
		}
	}
	cfg.Gossip.SendDelay = c.Duration("gossip-delay")
	if d := cfg.Gossip.SendDelay; d < 0 || d > time.Minute {
		return cfg, usageError("invalid --gossip-delay %v: use a duration from 0 (off) to 1m", d)
	}
	cfg.Preference.Margin = c.Float64("preference-margin")
	cfg.Preference.MinGain = c.Duration("preference-min-gain")
	cfg.Preference.Recheck = c.Duration("preference-recheck")
	cfg.StandbyPollInterval = c.Duration("standby-poll-interval")
	cfg.JobLeaseTTL = c.Duration("job-lease-ttl")
	cfg.BridgeWait = c.Duration("bridge-wait")
	cfg.DisableBridge = c.Bool("disable-bridge")
	cfg.MaxConnections = c.Int("max-connections")
	cfg.MaxConnectionsPerIP = c.Int("max-connections-per-ip")
	cfg.IdleTimeout = c.Duration("idle-timeout")
	cfg.ReadHeaderTimeout = c.Duration("read-header-timeout")
	cfg.PingInterval = c.Duration("ping-interval")
	cfg.PingTimeout = c.Duration("ping-timeout")
	cfg.MaxStreams = c.Int("max-streams")
	cfg.MaxStreamsPerConnection = c.Int("max-streams-per-connection")
	cfg.MaxStartingRPCs = c.Int("max-starting-rpcs")
	cfg.MaxJobs = c.Int("max-jobs")
	cfg.MaxSlicesPerJob = c.Int("max-slices-per-job")
	cfg.MaxLoadReportsPerSecond = c.Float64("max-load-reports-per-second")
	cfg.LoadReportBurst = c.Int("load-report-burst")
	cfg.StreamWriteTimeout = c.Duration("stream-write-timeout")
	mib := c.Int("stream-send-budget-mib")
	if mib < 0 || mib > 1<<20 {
		return cfg, usageError("invalid --stream-send-budget-mib %d: use 0 to %d MiB", mib, 1<<20)
	}
	cfg.StreamSendBudget = int64(mib) << 20
	for _, h := range strings.Split(c.String("allowed-hosts"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.AllowedHosts = append(cfg.AllowedHosts, h)
		}
	}
	src, err := tlsFlags(c, log)
	if err != nil {
		return cfg, err
	}
	cfg.TLS = src
	if path := c.String("token-file"); path != "" {
		tokens, err := auth.LoadTokenFile(path)
		if err != nil {
			return cfg, usageError("%v", err)
		}
		cfg.AdminTokens = tokens
	}
	cfg.Insecure = c.Bool("insecure")
	if err := gossipKeyConfig(c, &cfg); err != nil {
		return cfg, err
	}
	p, err := gossipProfile(c)
	if err != nil {
		return cfg, err
	}
	cfg.Gossip.Profile = p
	if err := cfg.Validate(); err != nil {
		return cfg, usageError("%s", withEnvSource(c, err.Error()))
	}
	return cfg, nil
}

func runAgent(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	cfg, err := agentConfig(c, log)
	if err != nil {
		return err
	}
	var m *agentMetrics
	if addr := c.String("metrics-addr"); addr != "" && addr == cfg.UIAddr {
		// One port for both: the UI's server answers GET /metrics too.
		reg := metrics.NewRegistry()
		cfg.Registerer, cfg.UIMetrics = reg, metrics.Handler(reg, log.With("component", "metrics"))
	} else if m, err = listenMetrics(c, &cfg, log); err != nil {
		return err
	}
	ctx, stop := signalContext(c.Context, log)
	defer stop()
	// Built by 'go run', which does not pass signals on: stop when it does.
	if selfCommand(os.Args[0]) == "go run ." && !stopWithParent() {
		m.close()
		return cli.Exit("the 'go run' that started slicerd has exited", 1)
	}
	agent, err := roles.New(ctx, cfg)
	if err != nil {
		m.close()
		return err
	}
	stopNotify := startSystemdNotify(agent, systemdStatus(cfg, agent.RPCAddr()), log)
	defer stopNotify()
	return m.run(ctx, agent.Run)
}

// tlsFlags loads the certificate, key and CA that --tls-cert, --tls-key
// and --tls-ca name: nil when none is set, and a usage error when they do
// not go together or cannot be loaded.
func tlsFlags(c *cli.Context, log *slog.Logger) (*tlsconfig.Source, error) {
	files := tlsconfig.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")}
	if !files.Enabled() {
		return nil, nil
	}
	if err := files.Validate("tls-", true); err != nil {
		return nil, usageError("%v", err)
	}
	src, err := tlsconfig.Load(files, log.With("component", "tls"))
	if err != nil {
		return nil, usageError("%v", err)
	}
	return src, nil
}
