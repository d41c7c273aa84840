package cli

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

func init() {
	for _, cmd := range []string{"drain", "undrain", "cordon", "uncordon"} {
		servedBy[cmd] = gossip.RoleAssigner
	}
}

// TaskCommand drains and cordons a job's tasks over RPC.
func TaskCommand() *cli.Command {
	const admin = "It is a configuration write, stored with the job's configuration (so it survives restarts and\n" +
		"Assigner failover, and 'slicerd job get' shows it): with TLS it needs an admin identity\n" +
		"(certificate or --token-file), as 'job set' does, and the audit log records it."
	controlFlags := func(cmd string) []cli.Flag { return append(clientFlags(), addrFlag(cmd)) }
	return &cli.Command{
		Name:  "task",
		Usage: "drain or cordon a job's tasks (talks to an assigner)",
		Subcommands: []*cli.Command{
			{
				Name:      "drain",
				Usage:     "move every key off a task while it keeps serving, and give it no new ones",
				ArgsUsage: "JOB TASK",
				Description: "The task's slices go to the job's other tasks in one decision, as if it had left, but it stays\n" +
					"in the job and serves until its clients hold the new assignment; it then serves nothing until\n" +
					"'slicerd task undrain'. By default the command waits until the assignment gives the task no key\n" +
					"and prints how long that took. A task drains itself on SIGTERM (slicelet.Slicelet.Drain); this\n" +
					"is for taking one out for maintenance. The task must be live.\n" + admin,
				Flags: append(controlFlags("drain"),
					&cli.BoolFlag{Name: "wait", Value: true, Usage: "wait until the task serves no key (--wait=false returns once the drain is stored)"},
					&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "with --wait, give up (exit 1) after this long; the drain stays stored"},
				),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return taskControl(c, true, drainedList) },
			},
			{
				Name:         "undrain",
				Usage:        "let a drained task take slices again",
				ArgsUsage:    "JOB TASK",
				Description:  "The task takes its fair share again at the next decision. Any task name is accepted, live or not.\n" + admin,
				Flags:        controlFlags("undrain"),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return taskControl(c, false, drainedList) },
			},
			{
				Name:      "cordon",
				Usage:     "give a task no new slices; it keeps the ones it serves",
				ArgsUsage: "JOB TASK",
				Description: "No decision gives a cordoned task a slice or replica it does not serve, unless a slice's\n" +
					"minimum redundancy cannot be met otherwise; load may still move keys off it. The task must be\n" +
					"live.\n" + admin,
				Flags:        controlFlags("cordon"),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return taskControl(c, true, cordonedList) },
			},
			{
				Name:         "uncordon",
				Usage:        "let a cordoned task take new slices again",
				ArgsUsage:    "JOB TASK",
				Description:  "Any task name is accepted, live or not.\n" + admin,
				Flags:        controlFlags("uncordon"),
				OnUsageError: subcommandUsageError,
				Action:       func(c *cli.Context) error { return taskControl(c, false, cordonedList) },
			},
		},
	}
}

// drainedList and cordonedList select the list a task subcommand edits.
func drainedList(p *slicerv1.JobConfig) *[]string  { return &p.DrainedTasks }
func cordonedList(p *slicerv1.JobConfig) *[]string { return &p.CordonedTasks }

// taskArgs reads the JOB TASK arguments.
func taskArgs(c *cli.Context) (job, task string, err error) {
	args := c.Args().Slice()
	if len(args) != 2 {
		return "", "", usageError("task %s needs two arguments, JOB and TASK", c.Command.Name)
	}
	if err := assign.ValidateJobName(args[0]); err != nil {
		return "", "", usageError("invalid JOB: %s", plainMessage(err.Error()))
	}
	if err := assign.ValidateTaskName(args[1]); err != nil {
		return "", "", usageError("invalid TASK: %s", plainMessage(err.Error()))
	}
	return args[0], args[1], nil
}

// taskControl adds task to (or, with set false, removes it from) the list
// of the job's configuration that list selects. Adding needs the task to
// be live; a drain then waits for the task to be empty, with --wait.
func taskControl(c *cli.Context, set bool, list func(*slicerv1.JobConfig) *[]string) error {
	job, task, err := taskArgs(c)
	if err != nil {
		return err
	}
	if set {
		if err := needLiveTask(c, job, task); err != nil {
			return err
		}
	}
	err = updateConfigOf(c, job, false, func(p *slicerv1.JobConfig) error {
		l := list(p)
		i, found := slices.BinarySearch(*l, task)
		switch {
		case set && !found:
			*l = slices.Insert(*l, i, task)
		case !set && found:
			*l = slices.Delete(*l, i, i+1)
		}
		return nil
	})
	if err != nil || !set || c.Command.Name != "drain" || !c.Bool("wait") {
		return err
	}
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	return waitDrained(c, client, job, task)
}

// undrainedOthers lists the job's live tasks other than task that are not
// drained: those a drain of task can move its keys to.
func undrainedOthers(info *slicerv1.JobInfo, task string) []string {
	var out []string
	for _, t := range info.GetLiveTasks() {
		if t.GetName() != task && !slices.Contains(info.GetConfig().GetDrainedTasks(), t.GetName()) {
			out = append(out, t.GetName())
		}
	}
	return out
}

// liveList names the job's live tasks, marking the drained ones.
func liveList(info *slicerv1.JobInfo) string {
	var names []string
	for _, t := range info.GetLiveTasks() {
		n := t.GetName()
		if slices.Contains(info.GetConfig().GetDrainedTasks(), n) {
			n += " (drained)"
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// waitDrained polls the job until its assignment gives task no key, or
// no other live task can take its keys.
func waitDrained(c *cli.Context, client slicerv1connect.JobServiceClient, job, task string) error {
	start := time.Now()
	deadline := start.Add(c.Duration("timeout"))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := rpcContext(c)
		resp, err := client.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
		cancel()
		if err != nil {
			return rpcError(c, err)
		}
		info := resp.Msg.GetJob()
		if !slices.ContainsFunc(info.GetTaskLoads(), func(t *slicerv1.TaskLoad) bool { return t.GetTask() == task }) {
			fmt.Fprintf(c.App.Writer, "%s drained in %v (generation %d)\n", task, time.Since(start).Round(time.Millisecond), info.GetGeneration())
			return nil
		}
		if takers := undrainedOthers(info, task); len(takers) == 0 {
			// A drain with no task to move the keys to gives way (the
			// keys stay), so waiting cannot end it.
			return cli.Exit(fmt.Sprintf("%s still serves keys of job %q: no other live task can take them, every other one being drained "+
				"(live: %s); the drain stays stored and moves the keys once a task that is not drained is live "+
				"(start one, or 'slicerd task undrain %s TASK')", task, job, liveList(info), job), 1)
		}
		if time.Now().After(deadline) {
			return cli.Exit(fmt.Sprintf("%s still serves keys of job %q after %v (generation %d); the drain stays stored: "+
				"check that other tasks are live with 'slicerd job get %s'", task, job, c.Duration("timeout"), info.GetGeneration(), job), 1)
		}
		select {
		case <-c.Context.Done():
			return cli.Exit("interrupted; the drain stays stored", 1)
		case <-tick.C:
		}
	}
}
