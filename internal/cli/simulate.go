package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/sim"
)

// SimulateCommand replays a load trace through a sharding algorithm.
func SimulateCommand() *cli.Command {
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
			&cli.StringFlag{Name: "capacity", Usage: "relative task capacities over the trace's, as NAME=C[,NAME=C...] (e.g. t0=2,t1=2); unnamed tasks keep the trace's (1 without)"},
			&cli.StringFlag{Name: "victim", Value: assign.VictimGainPerKey, Usage: "what a load-balancing move costs: gain-per-key or gain-per-byte (the state it moves; needs a trace with \"bytes\")"},
			&cli.StringFlag{Name: "memory", Usage: "task memory limits in bytes over the trace's, as NAME=B[,NAME=B...]; *=B sets every unnamed task's (0: no limit). Needs a trace with \"bytes\""},
			&cli.BoolFlag{Name: "as-assigner", Usage: "decide and commit each window as a live assigner does: a window whose tasks changed gets the membership decision (a departed task's keys and a joiner's share move, nothing else); one with the same tasks gets --algo's, committed only when it lowers the imbalance by more than the sampling noise of the trace's loads, read as request counts (docs/balancing.md)"},
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
	cfg := sim.Config{Algorithm: algo, Job: c.String("job"), Assign: assign.Config{MinRedundancy: minR, MaxRedundancy: maxR}, AsAssigner: c.Bool("as-assigner")}
	if err := cfg.Assign.Validate(); err != nil {
		return usageError("invalid --min-redundancy/--max-redundancy: %v", err)
	}
	switch v := c.String("victim"); v {
	case assign.VictimGainPerKey:
	case assign.VictimGainPerByte:
		cfg.Assign.Victim = v
	default:
		return usageError("invalid --victim %q: use %s or %s", v, assign.VictimGainPerKey, assign.VictimGainPerByte)
	}
	if err := assign.ValidateJobName(cfg.Job); err != nil {
		return usageError("invalid --job: %v", err)
	}
	if s := c.String("capacity"); s != "" {
		caps, err := parseCapacities(s)
		if err != nil {
			return usageError("invalid --capacity: %v", err)
		}
		cfg.Capacity = caps
	}
	if s := c.String("memory"); s != "" {
		mem, err := parseMemory(s)
		if err != nil {
			return usageError("invalid --memory: %v", err)
		}
		cfg.Memory = mem
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

// parseCapacities reads NAME=C[,NAME=C...].
func parseCapacities(s string) (map[string]float64, error) {
	caps := make(map[string]float64)
	for _, item := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not NAME=CAPACITY", item)
		}
		if err := assign.ValidateTaskName(name); err != nil {
			return nil, err
		}
		if _, dup := caps[name]; dup {
			return nil, fmt.Errorf("task %q is given twice", name)
		}
		c, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("capacity of %q: %q is not a number", name, v)
		}
		if err := assign.ValidateCapacity(c); err != nil {
			return nil, fmt.Errorf("capacity of %q: %w", name, err)
		}
		caps[name] = c
	}
	return caps, nil
}

// parseMemory reads NAME=B[,NAME=B...], NAME being a task or "*".
func parseMemory(s string) (map[string]float64, error) {
	mem := make(map[string]float64)
	for _, item := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not NAME=BYTES", item)
		}
		if name != "*" {
			if err := assign.ValidateTaskName(name); err != nil {
				return nil, err
			}
		}
		if _, dup := mem[name]; dup {
			return nil, fmt.Errorf("task %q is given twice", name)
		}
		b, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("memory limit of %q: %q is not a number of bytes", name, v)
		}
		if err := assign.ValidateMemoryLimit(b); err != nil {
			return nil, fmt.Errorf("memory limit of %q: %w", name, err)
		}
		mem[name] = b
	}
	return mem, nil
}

// TraceCommand makes load traces for simulate.
func TraceCommand() *cli.Command {
	return &cli.Command{
		Name:  "trace",
		Usage: "work with load traces for 'slicerd simulate'",
		Subcommands: []*cli.Command{
			{
				Name:  "generate",
				Usage: "write a synthetic load trace, the same for the same flags",
				Description: "Workloads: power-law (100 keys, weights 1/rank^1.5, hot keys move every 4 windows),\n" +
					"zipf (1,000 sampled requests a window over 10,000 keys, s=1.1), diurnal (20 keys on\n" +
					"phase-shifted sine waves), failures (power-law while tasks leave and rejoin),\n" +
					"flash-crowd (1,000 keys, 1/rank^1.1; every 6 windows 3 cold keys turn the hottest at\n" +
					"once) and low-rate (500 sampled requests a window over 300 keys of a steady load).",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "workload", Usage: "workload (required): " + strings.Join(sim.Workloads(), ", ")},
					&cli.IntFlag{Name: "windows", Value: 24, Usage: "measurement windows to generate"},
					&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random seed"},
					&cli.IntFlag{Name: "tasks", Value: 10, Usage: "live tasks (named t0, t1, ...)"},
					&cli.IntFlag{Name: "keys", DefaultText: "the workload's own", Usage: "number of keys"},
					&cli.Float64Flag{Name: "bytes", Usage: "mean state per key in bytes: each key's first load line gets \"bytes\", drawn log-normally (0: no state)"},
					&cli.StringFlag{Name: "out", Usage: "write the trace to this file instead of stdout"},
				},
				OnUsageError: subcommandUsageError,
				Action:       runTraceGenerate,
			},
		},
	}
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
		Tasks: c.Int("tasks"), Keys: c.Int("keys"), Bytes: c.Float64("bytes"),
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
