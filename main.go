// Command slicerd is an auto-sharding service: it assigns the keys of
// sharded jobs to their live tasks, balances them, and streams the
// assignment to clients and servers. See README.md.
//
// With no command slicerd runs a node; the commands are defined in
// internal/cli.
package main

import (
	"context"
	"io"
	"os"

	ucli "github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/internal/cli"
)

//go:generate go run . docs flags --update docs/operations.md

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	os.Exit(cli.Run(context.Background(), newApp(os.Stdout, os.Stderr), os.Args))
}

func newApp(stdout, stderr io.Writer) *ucli.App {
	return cli.NewApp(version, stdout, stderr,
		cli.VersionCommand(),
		cli.JobCommand(),
		cli.TaskCommand(),
		cli.SidecarCommand(),
		cli.KeyringCommand(),
		cli.DemoCommand(),
		cli.SimulateCommand(),
		cli.TraceCommand(),
		cli.TLSCommand(),
		cli.DocsCommand(),
	)
}
