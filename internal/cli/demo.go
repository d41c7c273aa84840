package cli

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/internal/demo"
)

// DemoCommand runs slicerd with a sharded example cache in one process.
func DemoCommand() *cli.Command {
	d := demo.DefaultOptions()
	return &cli.Command{
		Name:  "demo",
		Usage: "run a single-node slicerd with a sharded example cache and watch keys move as tasks stop and join",
		Description: "Starts slicerd with every role on a temporary data dir, --tasks tasks of the kvcache example\n" +
			"(each with its own Slicelet), and a client that routes --keys keys through a Clerk. It prints each\n" +
			"new assignment and who owns the keys; after --step it stops a task, then starts a new one.\n" +
			"It keeps running until Ctrl-C, or exits after the script with --once.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "tasks", Value: d.Tasks, Usage: "cache tasks to start"},
			&cli.IntFlag{Name: "python-tasks", Usage: "more tasks, running the kvcache example in Python (examples/kvcache/python) each under a 'slicerd sidecar': " +
				"a job mixing Go and Python tasks (needs the repository's files, see --python-dir, and Python 3 with xxhash)"},
			&cli.StringFlag{Name: "python", Value: d.Python, EnvVars: []string{"SLICERD_PYTHON"}, Usage: "the Python interpreter for --python-tasks"},
			&cli.StringFlag{Name: "python-dir", Value: d.PythonDir, Usage: "the slicerd repository, whose examples/kvcache/python and clients/python --python-tasks run"},
			&cli.IntFlag{Name: "keys", Value: d.Keys, Usage: "keys the client writes"},
			&cli.DurationFlag{Name: "step", Value: d.Step, Usage: "pause between the steps of the script"},
			&cli.BoolFlag{Name: "once", Usage: "run the script once and exit (for tests and CI)"},
			&cli.StringFlag{Name: "data-dir", Usage: "keep the store in this directory (default: a temporary one removed at exit)"},
			&cli.StringFlag{Name: "rpc-addr", Value: d.RPCAddr, Usage: "host:port the RPC API (Connect, gRPC, gRPC-Web) listens on"},
			&cli.StringFlag{Name: "ui-addr", Usage: "host:port of slicerd's read-only web UI on loopback, e.g. 127.0.0.1:7080 (default: off)"},
			&cli.StringFlag{Name: "gossip-addr", Value: d.GossipAddr, Usage: "host:port slicerd's gossip binds to"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "host:port to serve Prometheus metrics on at /metrics: slicerd's, the tasks' and the client's (default: none)"},
			&cli.StringFlag{Name: "gossip-profile", Value: d.GossipProfile, Usage: "gossip timers: lan or local (faster, loopback only)"},
			&cli.DurationFlag{Name: "rebalance-delay", Value: d.RebalanceDelay, Usage: "how long the assigner lets membership changes settle"},
			&cli.DurationFlag{Name: "startup-grace", Value: d.StartupGrace, Usage: "how long the assigner waits for tasks to join before the first assignment"},
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "slicerd's log verbosity on stderr: debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json"},
		},
		Action: runDemo,
	}
}

func runDemo(c *cli.Context) error {
	if c.Args().Present() {
		return usageError("unexpected argument %q; demo takes flags only (see 'slicerd demo --help')", c.Args().First())
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	opts := demo.Options{
		Tasks:          c.Int("tasks"),
		Keys:           c.Int("keys"),
		Step:           c.Duration("step"),
		Once:           c.Bool("once"),
		DataDir:        c.String("data-dir"),
		RPCAddr:        c.String("rpc-addr"),
		UIAddr:         c.String("ui-addr"),
		GossipAddr:     c.String("gossip-addr"),
		MetricsAddr:    c.String("metrics-addr"),
		GossipProfile:  c.String("gossip-profile"),
		RebalanceDelay: c.Duration("rebalance-delay"),
		StartupGrace:   c.Duration("startup-grace"),
		Logger:         log,
		QuietClients:   !c.IsSet("log-level"),
		Command:        selfCommand(os.Args[0]),
		PythonTasks:    c.Int("python-tasks"),
		Python:         c.String("python"),
		PythonDir:      c.String("python-dir"),
	}
	if opts.PythonTasks > 0 {
		if opts.Self, err = os.Executable(); err != nil {
			return cli.Exit(fmt.Sprintf("demo: the path of this binary, for the sidecars: %v", err), 1)
		}
	}
	if err := opts.Validate(); err != nil {
		return usageError("%v", err)
	}
	ctx, stop := signalContext(c.Context, log)
	defer stop()
	// Stop with the process that started the demo, such as 'go run',
	// which would not pass its signal on.
	if !stopWithParent() {
		return cli.Exit("the process that started slicerd demo has exited", 1)
	}
	err = demo.Run(ctx, opts, c.App.Writer)
	if errors.Is(err, demo.ErrOptions) {
		return usageError("%v", err)
	}
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	return nil
}

// selfCommand is how the user ran this binary, for the commands the demo
// suggests: "go run ." when arg0 is a binary that 'go run' built (which the
// user cannot run again by name), else "slicerd". go run builds in a
// go-build* temporary directory, or reuses a binary cached in GOCACHE
// (default .../go-build) under a directory named for its hash, "<hex>-d".
func selfCommand(arg0 string) string {
	parts := strings.Split(strings.ReplaceAll(arg0, `\`, "/"), "/")
	for _, p := range parts[:len(parts)-1] {
		if goBuildDir.MatchString(p) {
			return "go run ."
		}
	}
	if len(parts) >= 2 && cachedExeDir.MatchString(parts[len(parts)-2]) {
		return "go run ."
	}
	return "slicerd"
}

var (
	// goBuildDir matches go's temporary build directory and its default
	// cache directory.
	goBuildDir = regexp.MustCompile(`^go-build[0-9]*$`)
	// cachedExeDir matches the directory of an executable go run cached.
	cachedExeDir = regexp.MustCompile(`^[0-9a-f]{64}-d$`)
)
