// Command slicerd is an auto-sharding service: it assigns the keys of
// sharded jobs to their live tasks, balances them, and streams the
// assignment to clients and servers. See README.md.
//
// With no command slicerd runs a node; the commands are defined in
// internal/cli.
package main

import (
	"context"
	"os"

	"github.com/slicerd/slicerd/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	app := cli.NewApp(version, os.Stdout, os.Stderr,
		cli.VersionCommand(),
		cli.JobCommand(),
		cli.DemoCommand(),
		cli.SimulateCommand(),
		cli.TraceCommand(),
	)
	os.Exit(cli.Run(context.Background(), app, os.Args))
}
