// Command slicerd is an auto-sharding service: it assigns the keys of
// sharded jobs to their live tasks, balances them, and streams the
// assignment to clients and servers. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/sim"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the process exit, so tests can drive the CLI.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	if err := app.Run(args); err != nil {
		fmt.Fprintf(stderr, "slicerd: %v\n", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "slicerd"
	}
	return h
}

func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 2)
}

var (
	flagLogLevel = &cli.StringFlag{
		Name: "log-level", Value: "info", EnvVars: []string{"SLICERD_LOG_LEVEL"},
		Usage: "log verbosity: debug, info, warn or error",
	}
	flagLogFormat = &cli.StringFlag{
		Name: "log-format", Value: "text", EnvVars: []string{"SLICERD_LOG_FORMAT"},
		Usage: "log format: text or json (one object per line)",
	}
	flagAddr = &cli.StringFlag{
		Name: "addr", Value: "127.0.0.1:7070", EnvVars: []string{"SLICERD_ADDR"},
		Usage: "RPC address of a slicerd node running the assigner role",
	}
)

func agentFlags() []cli.Flag {
	d := roles.DefaultConfig()
	return []cli.Flag{
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
				"(keys under the prefix, default /slicerd/)",
		},
		&cli.StringFlag{
			Name: "rpc-addr", Value: d.RPCAddr, EnvVars: []string{"SLICERD_RPC_ADDR"},
			Usage: "host:port the Connect/gRPC API listens on (HTTP/2 cleartext)",
		},
		&cli.StringFlag{
			Name: "advertise-rpc-addr", EnvVars: []string{"SLICERD_ADVERTISE_RPC_ADDR"},
			Usage: "RPC address other members use to reach this node (default: the bound --rpc-addr)",
		},
		&cli.StringFlag{
			Name: "gossip-addr", Value: d.Gossip.BindAddr, EnvVars: []string{"SLICERD_GOSSIP_ADDR"},
			Usage: "host:port gossip binds to, TCP and UDP",
		},
		&cli.StringSliceFlag{
			Name: "join", EnvVars: []string{"SLICERD_JOIN"},
			Usage: "gossip address of an existing member to join; repeat or comma-separate for several",
		},
		&cli.StringFlag{
			Name: "node-name", Value: defaultNodeName(), EnvVars: []string{"SLICERD_NODE_NAME"},
			Usage: "this node's unique name in gossip",
		},
		&cli.StringFlag{
			Name: "gossip-profile", Value: "lan", EnvVars: []string{"SLICERD_GOSSIP_PROFILE"},
			Usage: "gossip timers: lan (memberlist's LAN defaults) or local (shorter probe timeouts, for loopback and tests)",
		},
		&cli.Float64Flag{
			Name: "preference-margin", Value: d.Gossip.Preference.WithDefaults().Margin, EnvVars: []string{"SLICERD_PREFERENCE_MARGIN"},
			Usage: "hysteresis of the preferred assigner: another assigner takes a job over only when its estimated round trip " +
				"to the job's tasks is lower by more than this fraction (and by --preference-min-gain); use the same value on every node",
		},
		&cli.DurationFlag{
			Name: "preference-min-gain", Value: d.Gossip.Preference.WithDefaults().MinGain, EnvVars: []string{"SLICERD_PREFERENCE_MIN_GAIN"},
			Usage: "hysteresis of the preferred assigner: the least round-trip improvement that moves a job to another assigner",
		},
		&cli.DurationFlag{
			Name: "preference-recheck", Value: d.Gossip.Preference.WithDefaults().Recheck, EnvVars: []string{"SLICERD_PREFERENCE_RECHECK"},
			Usage: "how often each node re-evaluates every job's preferred assigner while membership is quiet (network coordinates move without membership events)",
		},
		&cli.DurationFlag{
			Name: "standby-poll-interval", Value: d.StandbyPollInterval, EnvVars: []string{"SLICERD_STANDBY_POLL_INTERVAL"},
			Usage: "how often an assigner that is not preferred for a job re-reads it from a store that cannot push changes (bolt); etcd pushes them",
		},
		&cli.DurationFlag{
			Name: "gossip-delay", EnvVars: []string{"SLICERD_GOSSIP_DELAY"},
			Usage: "testing aid: delay everything this node sends over gossip by this long, so that it looks far away " +
				"to network-proximity estimates (0 = off; leave it off in production)",
		},
		&cli.DurationFlag{
			Name: "rebalance-delay", Value: d.RebalanceDelay, EnvVars: []string{"SLICERD_REBALANCE_DELAY"},
			Usage: "how long the assigner waits for membership changes to settle before deciding",
		},
		&cli.DurationFlag{
			Name: "rebalance-interval", Value: d.RebalanceInterval, EnvVars: []string{"SLICERD_REBALANCE_INTERVAL"},
			Usage: "how often the assigner rebalances each job on its tasks' reported load (0 turns load balancing off; membership changes are still handled)",
		},
		&cli.DurationFlag{
			Name: "startup-grace", Value: d.StartupGrace, EnvVars: []string{"SLICERD_STARTUP_GRACE"},
			Usage: "how long a starting assigner serves the stored assignment unchanged while gossip converges",
		},
		flagLogLevel,
		flagLogFormat,
	}
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:    "slicerd",
		Usage:   "auto-sharding service: assigns keys to live tasks and streams the assignment to clients",
		Version: versionString(),
		Description: "With no command, slicerd runs a node. With no --role it runs the assigner, distributor and backup\n" +
			"on an embedded store in --data-dir: a complete single-node service. Every flag can also be set\n" +
			"through the SLICERD_* environment variable shown beside it.",
		Writer:               stdout,
		ErrWriter:            stderr,
		HideVersion:          true,
		Flags:                agentFlags(),
		Action:               runAgent,
		EnableBashCompletion: true,
		// run reports errors and picks the exit status; the default handler
		// would exit the process from inside the library.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError("%v (see 'slicerd --help')", err)
		},
		Commands: []*cli.Command{
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					fmt.Fprintf(c.App.Writer, "slicerd %s\n", versionString())
					return nil
				},
			},
			jobCommand(),
			demoCommand(),
			simulateCommand(),
			traceCommand(),
		},
	}
}

func newLogger(c *cli.Context) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, usageError("invalid --log-level %q: use debug, info, warn or error", c.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(c.App.ErrWriter, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(c.App.ErrWriter, opts)), nil
	}
	return nil, usageError("invalid --log-format %q: use text or json", c.String("log-format"))
}

// agentConfig turns flags into a validated agent configuration.
func agentConfig(c *cli.Context, log *slog.Logger) (roles.Config, error) {
	if c.Args().Present() {
		return roles.Config{}, usageError("unexpected argument %q; slicerd takes flags only (see 'slicerd --help')", c.Args().First())
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
	cfg.RPCAddr = c.String("rpc-addr")
	cfg.AdvertiseRPCAddr = c.String("advertise-rpc-addr")
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
	cfg.Gossip.SendDelay = c.Duration("gossip-delay")
	if d := cfg.Gossip.SendDelay; d < 0 || d > time.Minute {
		return cfg, usageError("invalid --gossip-delay %v: use a duration from 0 (off) to 1m", d)
	}
	cfg.Gossip.Preference.Margin = c.Float64("preference-margin")
	cfg.Gossip.Preference.MinGain = c.Duration("preference-min-gain")
	cfg.Gossip.Preference.Recheck = c.Duration("preference-recheck")
	cfg.StandbyPollInterval = c.Duration("standby-poll-interval")
	switch p := c.String("gossip-profile"); p {
	case "lan", "local":
		cfg.Gossip.Profile = p
	default:
		return cfg, usageError("invalid --gossip-profile %q: use lan or local", p)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError("%v", err)
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
	agent, err := roles.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(log)
	defer stop()
	return agent.Run(ctx)
}

// signalContext is cancelled by the first SIGINT or SIGTERM, which starts a
// graceful shutdown; a second one exits at once.
func signalContext(log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Info("shutting down gracefully; signal again to exit at once", "signal", s.String())
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			log.Warn("exiting at once", "signal", s.String())
			os.Exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

func jobCommand() *cli.Command {
	return &cli.Command{
		Name:  "job",
		Usage: "inspect and configure sharded jobs (talks to an assigner over RPC)",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list known jobs",
				Flags:  []cli.Flag{flagAddr},
				Action: func(c *cli.Context) error { return jobList(c) },
			},
			{
				Name:      "get",
				Usage:     "show one job: configuration, generation, live tasks, and its load and balance as the assigner sees them",
				ArgsUsage: "JOB",
				Flags:     []cli.Flag{flagAddr},
				Action:    func(c *cli.Context) error { return jobGet(c) },
			},
			{
				Name:      "set",
				Usage:     "set a job's configuration (creates the job)",
				ArgsUsage: "JOB",
				Description: "Only the flags given change; every other setting keeps its stored value (for a new job,\n" +
					"its default). A tuning flag set to 0 restores that setting's default. Invalid values are\n" +
					"refused and nothing is stored. See docs/operations.md for what each setting does.",
				Flags:        jobSetFlags(),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return jobSet(c) },
			},
			{
				Name:      "watch",
				Usage:     "stream a job's assignments from a distributor as they change",
				ArgsUsage: "JOB",
				Flags:     []cli.Flag{flagAddr},
				Action:    func(c *cli.Context) error { return jobWatch(c) },
			},
		},
	}
}

func jobArg(c *cli.Context) (string, error) {
	if c.NArg() > 1 && strings.HasPrefix(c.Args().Get(1), "-") {
		return "", usageError("flags go before JOB: slicerd job %s [flags] %s", c.Command.Name, c.Args().First())
	}
	if c.NArg() != 1 {
		return "", usageError("job %s needs exactly one JOB argument", c.Command.Name)
	}
	return c.Args().First(), nil
}

func rpcError(c *cli.Context, err error) error {
	if connect.CodeOf(err) == connect.CodeUnavailable {
		return cli.Exit(fmt.Sprintf("cannot reach slicerd at %s: %v (is it running? set --addr)", c.String("addr"), err), 1)
	}
	return cli.Exit(err.Error(), 1)
}

func jobClient(c *cli.Context) slicerv1connect.JobServiceClient {
	return slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(c.String("addr")), connect.WithGRPC())
}

func printJob(w io.Writer, j *slicerv1.JobInfo) {
	p := j.GetConfig()
	assigner := j.GetPreferredAssigner()
	if assigner == "" {
		assigner = "(not chosen yet)"
	}
	fmt.Fprintf(w, "job %s\n  generation      %d\n  assigner        %s\n  min redundancy  %d\n  max redundancy  %d\n  configured      %v\n  live tasks      %d\n",
		j.GetName(), j.GetGeneration(), assigner, p.GetMinRedundancy(), p.GetMaxRedundancy(), j.GetConfigured(), len(j.GetLiveTasks()))
	for _, t := range j.GetLiveTasks() {
		fmt.Fprintf(w, "    %-20s %s\n", t.GetName(), t.GetAddress())
	}
	// The effective tuning: stored zeros are the defaults.
	cfg := assign.Config{
		MinSlicesPerTask: int(p.GetMinSlicesPerTask()), MaxSlicesPerTask: int(p.GetMaxSlicesPerTask()),
		MergeChurn: p.GetMergeChurn(), MoveChurn: p.GetMoveChurn(),
		MergeLoadFactor: p.GetMergeLoadFactor(), SplitLoadFactor: p.GetSplitLoadFactor(), SuppressBelow: p.GetSuppressBelow(),
	}.WithDefaults()
	def := assign.DefaultConfig()
	fmt.Fprintf(w, "  tuning\n")
	for _, f := range []struct {
		name       string
		value, std float64
	}{
		{"min slices per task", float64(cfg.MinSlicesPerTask), float64(def.MinSlicesPerTask)},
		{"max slices per task", float64(cfg.MaxSlicesPerTask), float64(def.MaxSlicesPerTask)},
		{"merge churn", cfg.MergeChurn, def.MergeChurn},
		{"move churn", cfg.MoveChurn, def.MoveChurn},
		{"merge load factor", cfg.MergeLoadFactor, def.MergeLoadFactor},
		{"split load factor", cfg.SplitLoadFactor, def.SplitLoadFactor},
		{"suppress below", cfg.SuppressBelow, def.SuppressBelow},
	} {
		note := ""
		if f.value == f.std {
			note = " (default)"
		}
		fmt.Fprintf(w, "    %-20s %g%s\n", f.name, f.value, note)
	}
	printLoad(w, j)
}

// printLoad writes the Assigner's view of the job's load and balance.
func printLoad(w io.Writer, j *slicerv1.JobInfo) {
	if j.GetReportingTasks() == 0 {
		fmt.Fprintf(w, "  load            no reports\n")
		return
	}
	fmt.Fprintf(w, "  load            %.4g/s reported by %d tasks\n  imbalance       %.3f\n",
		j.GetTotalLoad(), j.GetReportingTasks(), j.GetImbalance())
	mean := j.GetTotalLoad() / float64(max(len(j.GetTaskLoads()), 1))
	for _, tl := range j.GetTaskLoads() {
		rel := 0.0
		if mean > 0 {
			rel = tl.GetLoad() / mean
		}
		fmt.Fprintf(w, "    %-20s %10.4g/s  %5.2f x mean\n", tl.GetTask(), tl.GetLoad(), rel)
	}
}

func rpcContext(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, 10*time.Second)
}

func jobList(c *cli.Context) error {
	ctx, cancel := rpcContext(c)
	defer cancel()
	resp, err := jobClient(c).ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil {
		return rpcError(c, err)
	}
	fmt.Fprintf(c.App.Writer, "%-24s %10s %5s %5s %6s %10s %9s\n", "JOB", "GENERATION", "MIN", "MAX", "TASKS", "LOAD/S", "IMBALANCE")
	for _, j := range resp.Msg.GetJobs() {
		load, imbalance := "-", "-"
		if j.GetReportingTasks() > 0 {
			load, imbalance = fmt.Sprintf("%.4g", j.GetTotalLoad()), fmt.Sprintf("%.3f", j.GetImbalance())
		}
		fmt.Fprintf(c.App.Writer, "%-24s %10d %5d %5d %6d %10s %9s\n", j.GetName(), j.GetGeneration(),
			j.GetConfig().GetMinRedundancy(), j.GetConfig().GetMaxRedundancy(), len(j.GetLiveTasks()), load, imbalance)
	}
	return nil
}

func jobGet(c *cli.Context) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	resp, err := jobClient(c).GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
	if err != nil {
		return rpcError(c, err)
	}
	printJob(c.App.Writer, resp.Msg.GetJob())
	return nil
}

// jobSetFlags are the flags of 'job set': one per field of the job's
// configuration. None has a default of its own; an absent flag keeps the
// stored value.
func jobSetFlags() []cli.Flag {
	d := assign.DefaultConfig()
	return []cli.Flag{
		flagAddr,
		&cli.IntFlag{Name: "min-redundancy", DefaultText: "unchanged", Usage: "tasks each slice is assigned to, when that many are live (1-64)"},
		&cli.IntFlag{Name: "max-redundancy", DefaultText: "unchanged", Usage: "most tasks a hot slice may be replicated to (min-redundancy to 64)"},
		&cli.IntFlag{Name: "min-slices-per-task", DefaultText: "unchanged", Usage: fmt.Sprintf("merge cold slices only while the job has more slices per task than this; 0 means %d", d.MinSlicesPerTask)},
		&cli.IntFlag{Name: "max-slices-per-task", DefaultText: "unchanged", Usage: fmt.Sprintf("split hot slices only while the job has fewer slices per task than this; 0 means %d", d.MaxSlicesPerTask)},
		&cli.Float64Flag{Name: "merge-churn", DefaultText: "unchanged", Usage: fmt.Sprintf("fraction of the key space merging may move per decision, 0-1; 0 means %g", d.MergeChurn)},
		&cli.Float64Flag{Name: "move-churn", DefaultText: "unchanged", Usage: fmt.Sprintf("fraction of the key space load-balancing moves may move per decision, 0-1; 0 means %g", d.MoveChurn)},
		&cli.Float64Flag{Name: "merge-load-factor", DefaultText: "unchanged", Usage: fmt.Sprintf("merge two adjacent slices only if their load is below this times the mean slice load; 0 means %g", d.MergeLoadFactor)},
		&cli.Float64Flag{Name: "split-load-factor", DefaultText: "unchanged", Usage: fmt.Sprintf("split a slice whose load is at least this times the mean slice load (above 1); 0 means %g", d.SplitLoadFactor)},
		&cli.Float64Flag{Name: "suppress-below", DefaultText: "unchanged", Usage: "leave the job alone while its hottest task's load per second is below this; 0 means never"},
	}
}

// uintFlag reads a count flag that must fit a uint32.
func uintFlag(c *cli.Context, name string) (uint32, error) {
	v := c.Int(name)
	if v < 0 {
		return 0, usageError("invalid --%s %d: it cannot be negative", name, v)
	}
	if int64(v) > math.MaxUint32 {
		return 0, usageError("invalid --%s %d: it is far above any limit; see 'slicerd job set --help'", name, v)
	}
	return uint32(v), nil
}

// mergeConfigFlags overlays the flags given on p, the stored configuration.
func mergeConfigFlags(c *cli.Context, p *slicerv1.JobConfig) error {
	counts := []struct {
		name string
		dst  *uint32
	}{
		{"min-redundancy", &p.MinRedundancy}, {"max-redundancy", &p.MaxRedundancy},
		{"min-slices-per-task", &p.MinSlicesPerTask}, {"max-slices-per-task", &p.MaxSlicesPerTask},
	}
	for _, f := range counts {
		if !c.IsSet(f.name) {
			continue
		}
		v, err := uintFlag(c, f.name)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	for _, f := range []struct {
		name string
		dst  *float64
	}{
		{"merge-churn", &p.MergeChurn}, {"move-churn", &p.MoveChurn}, {"merge-load-factor", &p.MergeLoadFactor},
		{"split-load-factor", &p.SplitLoadFactor}, {"suppress-below", &p.SuppressBelow},
	} {
		if c.IsSet(f.name) {
			*f.dst = c.Float64(f.name)
		}
	}
	if c.IsSet("min-redundancy") && !c.IsSet("max-redundancy") && p.MinRedundancy > p.MaxRedundancy {
		return usageError("--min-redundancy %d is above the job's max redundancy %d; give --max-redundancy as well", p.MinRedundancy, p.MaxRedundancy)
	}
	return nil
}

// jobSet reads the job's stored configuration, changes the fields whose
// flags were given, and stores the result; the Assigner validates it.
func jobSet(c *cli.Context) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	client := jobClient(c)
	cfg := api.ConfigToProto(assign.Config{MinRedundancy: 1, MaxRedundancy: 1})
	resp, err := client.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
	switch {
	case err == nil && resp.Msg.GetJob().GetConfig() != nil:
		cfg = resp.Msg.GetJob().GetConfig()
	case err != nil && connect.CodeOf(err) != connect.CodeNotFound:
		return rpcError(c, err)
	}
	if err := mergeConfigFlags(c, cfg); err != nil {
		return err
	}
	set, err := client.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: job, Config: cfg}))
	if err != nil {
		return rpcError(c, err)
	}
	printJob(c.App.Writer, set.Msg.GetJob())
	return nil
}

func jobWatch(c *cli.Context) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext(log)
	defer stop()
	client := slicerv1connect.NewDistributorServiceClient(api.NewH2CClient(), api.RPCURL(c.String("addr")), connect.WithGRPC())
	stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job}))
	if err != nil {
		return rpcError(c, err)
	}
	defer stream.Close()
	for stream.Receive() {
		a, err := api.FromProto(stream.Msg().GetAssignment())
		if err != nil {
			return cli.Exit(fmt.Sprintf("received an invalid assignment: %v", err), 1)
		}
		printAssignment(c.App.Writer, a)
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return rpcError(c, err)
	}
	return nil
}

func simulateCommand() *cli.Command {
	return &cli.Command{
		Name:  "simulate",
		Usage: "replay a load trace through a sharding algorithm and report imbalance and churn per window",
		Description: "Reads a trace (one JSON object per line, see 'slicerd trace generate'), takes one decision per\n" +
			"window with --algo and prints one JSON line per window (generation, imbalance, churn, slices,\n" +
			"decision time and the assignment), then a summary line.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trace", Usage: "trace file to replay, or - for stdin (required)"},
			&cli.StringFlag{Name: "algo", Value: assign.AlgorithmWeightedMove, Usage: "sharding algorithm: " + strings.Join(assign.AlgorithmNames(), ", ")},
			&cli.IntFlag{Name: "min-redundancy", Value: 1, Usage: "tasks each slice is assigned to (at least 1)"},
			&cli.IntFlag{Name: "max-redundancy", Value: 0, Usage: "most tasks a hot slice may be replicated to (default: min-redundancy)"},
			&cli.StringFlag{Name: "job", Value: sim.DefaultJob, Usage: "job name the algorithm sees"},
			&cli.StringFlag{Name: "out", Usage: "write the results to this file instead of stdout"},
		},
		OnUsageError: subcommandUsageError,
		Action:       runSimulate,
	}
}

func runSimulate(c *cli.Context) error {
	if c.Args().Present() {
		return usageError("unexpected argument %q; simulate takes flags only (see 'slicerd simulate --help')", c.Args().First())
	}
	if c.String("trace") == "" {
		return usageError("simulate needs --trace FILE (see 'slicerd trace generate' to make one)")
	}
	algo, err := assign.AlgorithmByName(c.String("algo"))
	if err != nil {
		return usageError("invalid --algo: %v", err)
	}
	minR, maxR := c.Int("min-redundancy"), c.Int("max-redundancy")
	if maxR == 0 {
		maxR = minR
	}
	cfg := sim.Config{Algorithm: algo, Job: c.String("job"), Assign: assign.Config{MinRedundancy: minR, MaxRedundancy: maxR}}
	if err := cfg.Assign.Validate(); err != nil {
		return usageError("invalid --min-redundancy/--max-redundancy: %v", err)
	}
	if err := assign.ValidateJobName(cfg.Job); err != nil {
		return usageError("invalid --job: %v", err)
	}
	path := c.String("trace")
	in := io.Reader(os.Stdin)
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return cli.Exit(fmt.Sprintf("cannot read the trace: %v", err), 1)
		}
		defer f.Close()
		in = f
	}
	return writeOutput(c, func(w io.Writer) error {
		if _, err := sim.Replay(in, w, cfg); err != nil {
			return fmt.Errorf("simulate %s: %w", path, err)
		}
		return nil
	})
}

func traceCommand() *cli.Command {
	return &cli.Command{
		Name:  "trace",
		Usage: "work with load traces for 'slicerd simulate'",
		Subcommands: []*cli.Command{
			{
				Name:  "generate",
				Usage: "write a synthetic load trace, the same for the same flags",
				Description: "Workloads: power-law (100 keys, weights 1/rank^1.5, hot keys move every 4 windows),\n" +
					"zipf (1,000 sampled requests a window over 10,000 keys, s=1.1), diurnal (20 keys on\n" +
					"phase-shifted sine waves) and failures (power-law while tasks leave and rejoin).",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "workload", Usage: "workload (required): " + strings.Join(sim.Workloads(), ", ")},
					&cli.IntFlag{Name: "windows", Value: 24, Usage: "measurement windows to generate"},
					&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed"},
					&cli.IntFlag{Name: "tasks", Value: 10, Usage: "live tasks (named t0, t1, ...)"},
					&cli.IntFlag{Name: "keys", DefaultText: "the workload's own", Usage: "number of keys"},
					&cli.StringFlag{Name: "out", Usage: "write the trace to this file instead of stdout"},
				},
				OnUsageError: subcommandUsageError,
				Action:       runTraceGenerate,
			},
		},
	}
}

// subcommandUsageError gives flag errors of a subcommand exit status 2.
func subcommandUsageError(c *cli.Context, err error, _ bool) error {
	return usageError("%v (see 'slicerd %s --help')", err, c.Command.FullName())
}

func runTraceGenerate(c *cli.Context) error {
	if c.Args().Present() {
		return usageError("unexpected argument %q; trace generate takes flags only (see 'slicerd trace generate --help')", c.Args().First())
	}
	if c.String("workload") == "" {
		return usageError("trace generate needs --workload: one of %s", strings.Join(sim.Workloads(), ", "))
	}
	cfg := sim.GenConfig{
		Workload: c.String("workload"), Windows: c.Int("windows"), Seed: c.Uint64("seed"),
		Tasks: c.Int("tasks"), Keys: c.Int("keys"),
	}
	if err := cfg.Validate(); err != nil {
		return usageError("invalid flags: %v", err)
	}
	return writeOutput(c, func(w io.Writer) error { return sim.Generate(w, cfg) })
}

// writeOutput runs write against stdout, or against --out through a
// temporary file renamed into place only when write succeeds, so a failed
// run never leaves a truncated file behind.
func writeOutput(c *cli.Context, write func(io.Writer) error) error {
	path := c.String("out")
	if path == "" {
		if err := write(c.App.Writer); err != nil {
			return cli.Exit(err.Error(), 1)
		}
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return cli.Exit(fmt.Sprintf("cannot write --out %s: %v", path, err), 1)
	}
	defer os.Remove(f.Name())
	// CreateTemp makes the file private; results and traces are not secret.
	err = f.Chmod(0o644)
	if err == nil {
		err = write(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	return nil
}
