package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

func init() {
	servedBy["pin"] = gossip.RoleAssigner
	servedBy["move"] = gossip.RoleAssigner
	servedBy["unpin"] = gossip.RoleAssigner
}

// pinCommands are job pin and job unpin, and job move, pin's name before
// it had unpin's, kept working but hidden.
func pinCommands() []*cli.Command {
	rangeFlags := func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "the application key (its slice key, XXH64 of the key shifted right by one)"},
			&cli.StringFlag{Name: "slice", Usage: "a slice-key range START-END (END exclusive; decimal or 0x hex), as 'job get' and 'job watch' print slices"},
		}
	}
	pin := func(name string, hidden bool) *cli.Command {
		return &cli.Command{
			Name:      name,
			Hidden:    hidden,
			Usage:     "pin a key or slice-key range to a task: its keys are served there whatever load or membership would decide",
			ArgsUsage: "JOB",
			Description: "The pin is stored with the job's configuration (with --reason, shown by 'job get' and in the moves'\n" +
				"reasons) and applied at once. It holds while the task is live and not draining; when the task\n" +
				"is gone the keys go elsewhere, and come back when it returns. A pin over a range another pin\n" +
				"covers replaces it. The task must be live. 'job unpin' removes pins; 'job move' is an older\n" +
				"name of 'job pin'. It is a configuration write: with TLS it needs an admin identity, and the\n" +
				"audit log records it.",
			Flags: append(append(clientFlags(), addrFlag(name)), append(rangeFlags(),
				&cli.StringFlag{Name: "to", Usage: "the task to serve the keys (required)"},
				&cli.StringFlag{Name: "reason", Usage: fmt.Sprintf("why, recorded with the pin (at most %d bytes)", assign.MaxPinReasonLen)})...),
			OnUsageError: subcommandUsageError,
			Action:       jobPin,
		}
	}
	return []*cli.Command{
		pin("pin", false),
		pin("move", true),
		{
			Name:         "unpin",
			Usage:        "remove the pins over a key or slice-key range",
			ArgsUsage:    "JOB",
			Flags:        append(append(clientFlags(), addrFlag("unpin")), rangeFlags()...),
			OnUsageError: subcommandUsageError,
			Action:       jobUnpin,
		},
	}
}

// pinArgs reads the JOB argument and --key or --slice.
func pinArgs(c *cli.Context) (job string, start, end assign.SliceKey, err error) {
	if job, err = jobArg(c); err != nil {
		return "", 0, 0, err
	}
	start, end, err = pinRange(c)
	return job, start, end, err
}

// pinRange reads --key or --slice.
func pinRange(c *cli.Context) (start, end assign.SliceKey, err error) {
	key, slice := c.String("key"), c.String("slice")
	switch {
	case (key == "") == (slice == ""):
		return 0, 0, usageError("%s needs one of --key or --slice", commandPath(c))
	case key != "":
		h := assign.HashString(key)
		return h, h + 1, nil
	}
	a, b, ok := strings.Cut(slice, "-")
	s, err1 := strconv.ParseUint(strings.TrimSpace(a), 0, 64)
	e, err2 := strconv.ParseUint(strings.TrimSpace(b), 0, 64)
	if !ok || err1 != nil || err2 != nil || s >= e || e > uint64(assign.KeySpaceEnd) {
		return 0, 0, usageError("invalid --slice %q: give START-END with START < END <= %#x, e.g. 0x0-0x1000", slice, uint64(assign.KeySpaceEnd))
	}
	return assign.SliceKey(s), assign.SliceKey(e), nil
}

// withoutOverlap returns pins without those overlapping [start, end).
func withoutOverlap(pins []*slicerv1.KeyPin, start, end assign.SliceKey) []*slicerv1.KeyPin {
	return slices.DeleteFunc(pins, func(p *slicerv1.KeyPin) bool {
		return assign.SliceKey(p.GetStart()) < end && start < assign.SliceKey(p.GetEnd())
	})
}

func jobPin(c *cli.Context) error {
	job, start, end, err := pinArgs(c)
	if err != nil {
		return err
	}
	task := c.String("to")
	if task == "" {
		return usageError("%s needs --to TASK", commandPath(c))
	}
	if err := assign.ValidateTaskName(task); err != nil {
		return usageError("invalid --to: %s", plainMessage(err.Error()))
	}
	if r := c.String("reason"); len(r) > assign.MaxPinReasonLen {
		return usageError("--reason is %d bytes; at most %d", len(r), assign.MaxPinReasonLen)
	}
	if err := needLiveTask(c, job, task); err != nil {
		return err
	}
	return updateConfigOf(c, job, false, func(p *slicerv1.JobConfig) error {
		pins := withoutOverlap(p.Pins, start, end)
		i, _ := slices.BinarySearchFunc(pins, start, func(x *slicerv1.KeyPin, k assign.SliceKey) int {
			return cmp.Compare(assign.SliceKey(x.GetStart()), k)
		})
		p.Pins = slices.Insert(pins, i, &slicerv1.KeyPin{Start: uint64(start), End: uint64(end), Task: task, Reason: c.String("reason")})
		return nil
	})
}

func jobUnpin(c *cli.Context) error {
	job, start, end, err := pinArgs(c)
	if err != nil {
		return err
	}
	return updateConfigOf(c, job, false, func(p *slicerv1.JobConfig) error {
		p.Pins = withoutOverlap(p.Pins, start, end)
		return nil
	})
}

// needLiveTask fails unless task is a live task of job.
func needLiveTask(c *cli.Context, job, task string) error {
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	resp, err := client.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return cli.Exit(fmt.Sprintf("%s: no job %q; 'slicerd job list' shows the jobs", commandPath(c), job), 1)
	}
	if err != nil {
		return rpcError(c, err)
	}
	live := resp.Msg.GetJob().GetLiveTasks()
	if slices.ContainsFunc(live, func(t *slicerv1.Task) bool { return t.GetName() == task }) {
		return nil
	}
	var names []string
	for _, t := range live {
		names = append(names, t.GetName())
	}
	return cli.Exit(fmt.Sprintf("%s: job %q has no live task %q (live: %s); check the name with 'slicerd job get %s'",
		commandPath(c), job, task, strings.Join(names, ", "), job), 1)
}
