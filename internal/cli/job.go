package cli

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
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
	"github.com/slicerd/slicerd/internal/demo"
)

// servedBy names the role whose RPC service each job subcommand calls.
var servedBy = map[string]gossip.Role{
	"list":     gossip.RoleAssigner,
	"get":      gossip.RoleAssigner,
	"set":      gossip.RoleAssigner,
	"freeze":   gossip.RoleAssigner,
	"unfreeze": gossip.RoleAssigner,
	"watch":    gossip.RoleDistributor,
	"delete":   gossip.RoleAssigner,
}

// addrFlag is the --addr flag of the job subcommand cmd.
func addrFlag(cmd string) *cli.StringFlag {
	return &cli.StringFlag{
		Name: "addr", Value: "127.0.0.1:7070", EnvVars: []string{"SLICERD_ADDR"},
		Usage: fmt.Sprintf("RPC address of a slicerd node running the %s role", servedBy[cmd]),
	}
}

// JobCommand inspects and configures jobs over RPC.
func JobCommand() *cli.Command {
	return &cli.Command{
		Name:  "job",
		Usage: "inspect and configure sharded jobs over RPC (list, get, set and delete talk to an assigner; watch to a distributor)",
		Subcommands: append([]*cli.Command{
			{
				Name:         "list",
				Usage:        "list known jobs",
				Flags:        append(clientFlags(), addrFlag("list")),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return jobList(c) },
			},
			{
				Name:         "get",
				Usage:        "show one job: configuration, generation, live tasks, and its load and balance as the assigner sees them",
				ArgsUsage:    "JOB",
				Flags:        append(clientFlags(), addrFlag("get")),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return jobGet(c) },
			},
			{
				Name:      "freeze",
				Usage:     "stop a job's load-driven moves; task failures, joins and leaves are still handled",
				ArgsUsage: "JOB",
				Description: "A frozen job keeps its assignment whatever its load does: the Assigner decides again only\n" +
					"when a task fails, leaves or joins, or the configuration changes. The flag is stored with\n" +
					"the job's configuration, so it survives restarts and Assigner failover. 'unfreeze' clears it.\n" +
					"It is a configuration write: with TLS it needs an admin identity (certificate or --token-file),\n" +
					"as 'job set' does, and the audit log records it.",
				Flags:        append(clientFlags(), addrFlag("freeze")),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return jobFreeze(c, true) },
			},
			{
				Name:         "unfreeze",
				Usage:        "let a frozen job's load move its keys again",
				ArgsUsage:    "JOB",
				Flags:        append(clientFlags(), addrFlag("unfreeze")),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return jobFreeze(c, false) },
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
				Name:         "watch",
				Usage:        "stream a job's assignments from a distributor as they change",
				ArgsUsage:    "JOB",
				Flags:        append(clientFlags(), addrFlag("watch")),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return jobWatch(c) },
			},
			jobDeleteCommand(),
		}, append(pinCommands(), historyCommands()...)...),
	}
}

func jobArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usageError("job %s needs exactly one JOB argument", c.Command.Name)
	}
	return c.Args().First(), nil
}

// rpcError turns a failed call of a job subcommand into a message that
// says what to do.
func rpcError(c *cli.Context, err error) error {
	addr := c.String("addr")
	if msg, ok := notSlicerdAPI(c, err); ok {
		return cli.Exit(msg, 1)
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return cli.Exit(fmt.Sprintf("cannot reach slicerd at %s: %s (is it running? set --addr)", addr, plainMessage(connectMessage(err))), 1)
	case connect.CodeUnimplemented:
		// slicerd serves a role's RPC service only on nodes running that
		// role; other nodes answer HTTP 404.
		role := servedBy[c.Command.Name]
		return cli.Exit(fmt.Sprintf("job %s is served by the %s role; %s runs no %s: point --addr at a node started with "+
			"--role including %s, or without --role (all roles)", c.Command.Name, role, addr, role, role), 1)
	}
	subject := commandPath(c)
	if c.Args().Present() {
		subject += " " + c.Args().First()
	}
	return cli.Exit(subject+": "+serverMessage(err), 1)
}

func jobClient(c *cli.Context) (slicerv1connect.JobServiceClient, error) {
	hc, url, opts, err := rpcClient(c)
	if err != nil {
		return nil, err
	}
	return slicerv1connect.NewJobServiceClient(hc, url, opts...), nil
}

func rpcContext(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, 10*time.Second)
}

func jobList(c *cli.Context) error {
	if c.Args().Present() {
		return usageError("job list takes no arguments, got %q (see 'slicerd job list --help')", c.Args().First())
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	resp, err := client.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
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
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	resp, err := client.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
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
	return append(clientFlags(),
		addrFlag("set"),
		&cli.IntFlag{Name: "min-redundancy", DefaultText: "unchanged", Usage: "tasks each slice is assigned to, when that many are live (1-64)"},
		&cli.IntFlag{Name: "max-redundancy", DefaultText: "unchanged", Usage: "most tasks a hot slice may be replicated to (min-redundancy to 64)"},
		&cli.IntFlag{Name: "min-slices-per-task", DefaultText: "unchanged", Usage: fmt.Sprintf("merge cold slices only while the job has more slices per task than this; 0 means %d", d.MinSlicesPerTask)},
		&cli.IntFlag{Name: "max-slices-per-task", DefaultText: "unchanged", Usage: fmt.Sprintf("split hot slices only while the job has fewer slices per task than this; 0 means %d", d.MaxSlicesPerTask)},
		&cli.Float64Flag{Name: "merge-churn", DefaultText: "unchanged", Usage: fmt.Sprintf("fraction of the key space merging may move per decision, 0-1; 0 means %g", d.MergeChurn)},
		&cli.Float64Flag{Name: "move-churn", DefaultText: "unchanged", Usage: fmt.Sprintf("fraction of the key space load-balancing moves may move per decision, 0-1; 0 means %g", d.MoveChurn)},
		&cli.Float64Flag{Name: "merge-load-factor", DefaultText: "unchanged", Usage: fmt.Sprintf("merge two adjacent slices only if their load is below this times the mean slice load; 0 means %g", d.MergeLoadFactor)},
		&cli.Float64Flag{Name: "split-load-factor", DefaultText: "unchanged", Usage: fmt.Sprintf("split a slice whose load is at least this times the mean slice load (above 1); 0 means %g", d.SplitLoadFactor)},
		&cli.Float64Flag{Name: "suppress-below", DefaultText: "unchanged", Usage: "leave the job alone while its hottest task's load per second is below this; 0 means never"},
		&cli.IntFlag{Name: "max-slices", DefaultText: "unchanged", Usage: "most slices the job may have, whatever its task count; 0 means the assigner's --max-slices-per-job, which also caps it"},
		&cli.StringFlag{Name: "algorithm", DefaultText: "unchanged", Usage: "sharding algorithm of the job's decisions: " + strings.Join(assign.AlgorithmNames(), ", ") + " (weighted-move is the default and the only one that balances load; the others are baselines)"},
		&cli.StringFlag{Name: "victim", DefaultText: "unchanged", Usage: "what a load-balancing move costs when moves are ranked: gain-per-key (the default: the keys it moves) or gain-per-byte (the state it moves, for jobs that report state and hand it over)"},
		&cli.DurationFlag{Name: "handoff-deadline", DefaultText: "unchanged", Usage: "make-before-break moves: a task gaining keys serves them beside the task losing them for this long (fetching their state) before that task lets go; 0 moves keys at once (the default); at most 10m; not for strong jobs"},
		&cli.StringFlag{Name: "consistency", DefaultText: "unchanged", Usage: "affinity (the default: keys go to tasks that likely hold their state) or strong (at most one task owns a key at any instant, under leases; needs --max-redundancy 1; see docs/consistency.md)"},
	)
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
		{"max-slices", &p.MaxSlices},
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
	if c.IsSet("consistency") {
		switch cons, err := assign.ParseConsistency(c.String("consistency")); {
		case err != nil:
			return usageError("invalid --consistency %q: use affinity or strong", c.String("consistency"))
		case cons == assign.Strong:
			p.Consistency = slicerv1.Consistency_CONSISTENCY_STRONG
		default:
			p.Consistency = slicerv1.Consistency_CONSISTENCY_AFFINITY
		}
	}
	if c.IsSet("algorithm") {
		name := c.String("algorithm")
		if _, err := assign.AlgorithmByName(name); err != nil {
			return usageError("invalid --algorithm %q: use one of %s", name, strings.Join(assign.AlgorithmNames(), ", "))
		}
		p.Algorithm = name
		if name == assign.AlgorithmWeightedMove {
			p.Algorithm = "" // the default, stored as configurations from before the field are
		}
	}
	if c.IsSet("victim") {
		switch v := c.String("victim"); v {
		case assign.VictimGainPerKey:
			p.Victim = "" // the default
		case assign.VictimGainPerByte:
			p.Victim = v
		default:
			return usageError("invalid --victim %q: use %s or %s", v, assign.VictimGainPerKey, assign.VictimGainPerByte)
		}
	}
	if c.IsSet("handoff-deadline") {
		d := c.Duration("handoff-deadline")
		if d < 0 || d > assign.MaxHandoffDeadlineMS*time.Millisecond || d%time.Millisecond != 0 {
			return usageError("invalid --handoff-deadline %v: use 0 to 10m, in whole milliseconds", d)
		}
		p.HandoffDeadlineMs = uint32(d / time.Millisecond)
	}
	if c.IsSet("min-redundancy") && !c.IsSet("max-redundancy") && p.MinRedundancy > p.MaxRedundancy {
		return usageError("--min-redundancy %d is above the job's max redundancy %d; give --max-redundancy as well", p.MinRedundancy, p.MaxRedundancy)
	}
	return nil
}

// jobSet reads the job's stored configuration, changes the fields whose
// flags were given, and stores the result; the Assigner validates it.
func jobSet(c *cli.Context) error {
	return updateJobConfig(c, true, func(p *slicerv1.JobConfig) error { return mergeConfigFlags(c, p) })
}

// jobFreeze sets or clears a job's frozen flag. Unlike set it never
// creates a job: freezing a name with no job is a mistake to report.
func jobFreeze(c *cli.Context, frozen bool) error {
	return updateJobConfig(c, false, func(p *slicerv1.JobConfig) error {
		p.Frozen = frozen
		return nil
	})
}

// updateJobConfig reads the stored configuration of the job named by the
// argument (the default for a job with none, if create), applies change
// and stores the result, printing the job as stored.
func updateJobConfig(c *cli.Context, create bool, change func(*slicerv1.JobConfig) error) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	return updateConfigOf(c, job, create, change)
}

// updateConfigOf is updateJobConfig for the job named job.
func updateConfigOf(c *cli.Context, job string, create bool, change func(*slicerv1.JobConfig) error) error {
	ctx, cancel := rpcContext(c)
	defer cancel()
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	// The change is written only over the configuration it was applied
	// to (if_config_version): another change written meanwhile (a second
	// operator, or a drain of another task) makes the write fail with
	// ABORTED, and the change is applied again to what is stored then,
	// so neither is lost.
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cfg := api.ConfigToProto(assign.Config{MinRedundancy: 1, MaxRedundancy: 1})
		var version uint64
		resp, err := client.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
		switch {
		case err == nil && resp.Msg.GetJob().GetConfig() != nil:
			cfg, version = resp.Msg.GetJob().GetConfig(), resp.Msg.GetJob().GetConfigVersion()
		case err != nil && connect.CodeOf(err) == connect.CodeNotFound && !create:
			return cli.Exit(fmt.Sprintf("%s: no job %q; 'slicerd job list' shows the jobs", commandPath(c), job), 1)
		case err != nil && connect.CodeOf(err) != connect.CodeNotFound:
			return rpcError(c, err)
		}
		if err := change(cfg); err != nil {
			return err
		}
		set, err := client.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: job, Config: cfg, IfConfigVersion: &version}))
		if connect.CodeOf(err) == connect.CodeAborted && attempt < maxConfigAttempts {
			select {
			case <-ctx.Done():
				return rpcError(c, ctx.Err())
			case <-time.After(backoff + rand.N(backoff)):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		if err != nil {
			return rpcError(c, err)
		}
		printJob(c.App.Writer, set.Msg.GetJob())
		return nil
	}
}

// maxConfigAttempts bounds how often updateConfigOf applies its change
// again to a configuration changed meanwhile.
const maxConfigAttempts = 8

// jobWatch streams the job's assignments until the stream fails or the
// user stops it: SIGINT or SIGTERM end it quietly, with exit status 0, as
// the end of what was asked for rather than a failure.
func jobWatch(c *cli.Context) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hc, url, opts, err := rpcClient(c)
	if err != nil {
		return err
	}
	client := slicerv1connect.NewDistributorServiceClient(hc, url, opts...)
	stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job}))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return rpcError(c, err)
	}
	defer stream.Close()
	for stream.Receive() {
		a, err := api.FromProto(stream.Msg().GetAssignment())
		if err != nil {
			return cli.Exit(fmt.Sprintf("received an invalid assignment: %v", err), 1)
		}
		demo.PrintAssignment(c.App.Writer, a)
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return rpcError(c, err)
	}
	return nil
}
