package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
)

// jobDeleteCommand is 'slicerd job delete'.
func jobDeleteCommand() *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete a job: its stored assignments and configuration, everywhere (admin only)",
		ArgsUsage: "JOB",
		Description: "Refused while a task of the job is alive in gossip (it would create the job again at once):\n" +
			"stop the job's tasks first. Every stream of the job ends with NOT_FOUND. This cannot be undone,\n" +
			"so it asks for confirmation on a terminal and needs --yes otherwise.",
		Flags: append(clientFlags(),
			addrFlag("delete"),
			&cli.BoolFlag{Name: "yes", EnvVars: []string{"SLICERD_JOB_DELETE_YES"},
				Usage: "delete without asking for confirmation (needed when stdin is not a terminal)"},
		),
		OnUsageError: subcommandUsageError,
		Action:       func(c *cli.Context) error { return jobDelete(c) },
	}
}

func jobDelete(c *cli.Context) error {
	job, err := jobArg(c)
	if err != nil {
		return err
	}
	if !c.Bool("yes") {
		if !interactive(c.App.Reader) {
			return usageError("refusing to delete job %s without confirmation: deleting removes its stored assignments and "+
				"configuration and cannot be undone; run 'slicerd job delete --yes %s' to confirm", job, job)
		}
		fmt.Fprintf(c.App.Writer, "Delete job %s, its stored assignments and configuration? This cannot be undone. [y/N] ", job)
		answer, _ := bufio.NewReader(c.App.Reader).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return cli.Exit("job "+job+" not deleted", 1)
		}
	}
	ctx, cancel := rpcContext(c)
	defer cancel()
	client, err := jobClient(c)
	if err != nil {
		return err
	}
	resp, err := client.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: job}))
	if err != nil {
		return rpcError(c, err)
	}
	fmt.Fprintf(c.App.Writer, "deleted job %s (it was at generation %d)\n", job, resp.Msg.GetJob().GetGeneration())
	return nil
}

// interactive reports whether r is a terminal a person can answer on.
func interactive(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
