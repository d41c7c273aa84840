package cli

import (
	"context"
	"io"
)

// run runs slicerd's command line in-process with every command, as main
// does, and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := NewApp("", stdout, stderr, VersionCommand(), JobCommand(), DemoCommand(), SimulateCommand(), TraceCommand(), TLSCommand())
	return Run(ctx, app, args)
}
