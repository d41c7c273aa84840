// Package cli defines slicerd's commands: the agent (the default command),
// job, demo, simulate, trace, version and the hidden docs, one file per
// command group. main lists the commands; each command turns its flags
// into the validated configuration of the package that does the work.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// NewApp returns slicerd's command line: with no command it runs the agent;
// commands are the subcommands, in the order 'slicerd --help' lists them.
// version is the release version ("" for a development build).
func NewApp(version string, stdout, stderr io.Writer, commands ...*cli.Command) *cli.App {
	for _, c := range commands {
		refuseUnknownSubcommands(c)
	}
	return &cli.App{
		Name:    "slicerd",
		Usage:   "auto-sharding service: assigns keys to live tasks and streams the assignment to clients",
		Version: versionString(version),
		Description: "With no command, slicerd runs a node. With no --role it runs the assigner, distributor and backup\n" +
			"on an embedded store in --data-dir: a complete single-node service. Every flag can also be set\n" +
			"through the SLICERD_* environment variable shown beside it.",
		Writer:               stdout,
		ErrWriter:            stderr,
		HideVersion:          true,
		Flags:                append(agentFlags(), versionFlag),
		Action:               runRoot,
		EnableBashCompletion: true,
		// Run reports errors and picks the exit status; the default handler
		// would exit the process from inside the library.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError("%v (see 'slicerd --help')", err)
		},
		Commands: commands,
	}
}

// Run runs app with args (args[0] is the program name) until it finishes
// or ctx ends (a command's flags may follow its arguments), reports an error on app's ErrWriter, and returns the exit
// status: 0, 1 for a failure, 2 for a usage error.
func Run(ctx context.Context, app *cli.App, args []string) int {
	if err := app.RunContext(ctx, flagsFirst(app, args)); err != nil {
		err = helpTopicError(app, args, err)
		fmt.Fprintf(app.ErrWriter, "slicerd: %v\n", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

// helpTopicError turns the library's answer to 'slicerd [CMD...] help X'
// for an unknown X ("No help topic for 'X'", exit 3) into the usage error
// an unknown command gets; other errors pass.
func helpTopicError(app *cli.App, args []string, err error) error {
	var ec cli.ExitCoder
	if !errors.As(err, &ec) || ec.ExitCode() != 3 {
		return err
	}
	name, ok := strings.CutPrefix(err.Error(), "No help topic for '")
	if !ok || !strings.HasSuffix(name, "'") {
		return err
	}
	name = strings.TrimSuffix(name, "'")
	parent, cmds := "slicerd", app.Commands
	for _, a := range args[1:] {
		if a == "help" || a == "h" {
			break
		}
		for _, cmd := range cmds {
			if cmd.HasName(a) {
				parent, cmds = parent+" "+cmd.Name, cmd.Subcommands
				break
			}
		}
	}
	return unknownCommandIn(name, parent, cmds)
}

// versionFlag is slicerd --version, which 'slicerd version' answers too.
var versionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version, the VCS revision it was built from, and the Go version, and exit"}

// runRoot runs slicerd with no command: the agent, or --version.
func runRoot(c *cli.Context) error {
	if c.Args().Present() {
		return unknownCommand(c, c.App.Commands)
	}
	if c.Bool(versionFlag.Name) {
		printVersion(c.App.Writer, c.App.Version)
		return nil
	}
	return runAgent(c)
}

// VersionCommand prints the version.
func VersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the VCS revision it was built from, and the Go version",
		Action: func(c *cli.Context) error {
			printVersion(c.App.Writer, c.App.Version)
			return nil
		},
	}
}

func versionString(version string) string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// printVersion writes version and what the binary's build information
// says about where it came from: the module and its version, the VCS
// revision, whether the tree had uncommitted changes, and the commit time
// (Go records no build time).
func printVersion(w io.Writer, version string) {
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprint(w, versionText(version, bi))
}

func versionText(version string, bi *debug.BuildInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "slicerd %s\n", version)
	if bi == nil {
		return b.String()
	}
	if bi.Main.Path != "" {
		fmt.Fprintf(&b, "  module    %s %s\n", bi.Main.Path, bi.Main.Version)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		switch settings["vcs.modified"] {
		case "true":
			rev += " (modified: built with uncommitted changes)"
		case "false":
			rev += " (clean)"
		}
		fmt.Fprintf(&b, "  revision  %s\n", rev)
	}
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "  committed %s\n", t)
	}
	goVersion := bi.GoVersion
	if os, arch := settings["GOOS"], settings["GOARCH"]; os != "" && arch != "" {
		goVersion += " " + os + "/" + arch
	}
	fmt.Fprintf(&b, "  go        %s\n", goVersion)
	return b.String()
}

// refuseUnknownSubcommands makes cmd and each of its descendants that has
// subcommands and no action of its own report an unknown subcommand as a
// usage error; urfave/cli would show "No help topic" and exit 3.
func refuseUnknownSubcommands(cmd *cli.Command) {
	if len(cmd.Subcommands) == 0 {
		return
	}
	if cmd.Action == nil {
		cmd.Action = func(c *cli.Context) error {
			if !c.Args().Present() {
				return cli.ShowSubcommandHelp(c)
			}
			return unknownCommand(c, c.Command.Subcommands)
		}
	}
	for _, sub := range cmd.Subcommands {
		refuseUnknownSubcommands(sub)
	}
}

// unknownCommand reports c's first argument, which none of cmds is named,
// with the name it most likely misspells and the names there are.
func unknownCommand(c *cli.Context, cmds []*cli.Command) error {
	return unknownCommandIn(c.Args().First(), strings.TrimSpace("slicerd "+commandPath(c)), cmds)
}

// unknownCommandIn reports name, which none of cmds, the commands of
// parent, is named.
func unknownCommandIn(name, parent string, cmds []*cli.Command) error {
	var names []string
	for _, cmd := range cmds {
		if !cmd.Hidden && cmd.Name != "help" {
			names = append(names, cmd.Name)
		}
	}
	hint := ""
	if near := nearest(name, names); near != "" {
		hint = fmt.Sprintf(": did you mean '%s'?", near)
	}
	return usageError("unknown command %q for '%s'%s (commands: %s; see '%s --help')", name, parent, hint, strings.Join(names, ", "), parent)
}

// nearest returns the name of names that s most likely misspells or
// abbreviates: the first that starts with s, else the closest by edit
// distance if it is close for its length, else "".
func nearest(s string, names []string) string {
	for _, n := range names {
		if len(s) >= 2 && strings.HasPrefix(n, s) {
			return n
		}
	}
	best, bestDist := "", len(s)/3+2
	for _, n := range names {
		if d := editDistance(s, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev = cur
	}
	return prev[len(b)]
}

func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 2)
}

// withEnvSource adds to each flag msg names as "(--NAME)" the variable of
// the environment that holds its value, when one does: an operator who
// set SLICERD_MAX_JOBS in a unit file finds the setting at fault there,
// not on the command line. A flag given on the command line too (with
// another value) is named alone.
func withEnvSource(c *cli.Context, msg string) string {
	for _, f := range c.Command.Flags {
		env, ok := f.(interface{ GetEnvVars() []string })
		if !ok {
			continue
		}
		name := f.Names()[0]
		cited := "(--" + name + ")"
		if !strings.Contains(msg, cited) {
			continue
		}
		for _, v := range env.GetEnvVars() {
			val, set := os.LookupEnv(v)
			if set && fmt.Sprint(c.Value(name)) == strings.TrimSpace(val) {
				msg = strings.ReplaceAll(msg, cited, fmt.Sprintf("(--%s, set by %s=%s in the environment)", name, v, strings.TrimSpace(val)))
				break
			}
		}
	}
	return msg
}

// subcommandUsageError gives flag errors of a subcommand exit status 2.
func subcommandUsageError(c *cli.Context, err error, _ bool) error {
	return usageError("%v (see 'slicerd %s --help')", err, commandPath(c))
}

// commandPath names the command c runs with its parents, such as "job set".
func commandPath(c *cli.Context) string {
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != c.App.Name {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	// A subcommand's context and its parent's can carry the same command.
	names = slices.Compact(names)
	return strings.Join(names, " ")
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
)

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

// signalContext is cancelled by the first SIGINT or SIGTERM, which starts a
// graceful shutdown, or when parent ends; a second signal exits at once.
func signalContext(parent context.Context, log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
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
