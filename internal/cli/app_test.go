package cli

import (
	"context"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

// run runs slicerd's command line in-process with every command, as main
// does, and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := NewApp("", stdout, stderr, VersionCommand(), JobCommand(), TaskCommand(), SidecarCommand(), KeyringCommand(), DemoCommand(), SimulateCommand(), TraceCommand(), TLSCommand())
	return Run(ctx, app, args)
}

// A subcommand's flag error names the whole command to ask for help, and
// exits 2 like every other usage error.
func TestSubcommandUsageErrorNamesTheCommand(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"job set --nope kv", "see 'slicerd job set --help'"},
		{"tls init --nope", "see 'slicerd tls init --help'"},
		{"keyring install --nope", "see 'slicerd keyring install --help'"},
		{"keyring list --nope", "see 'slicerd keyring list --help'"},
	} {
		var out, errOut strings.Builder
		code := run(append([]string{"slicerd"}, strings.Fields(tc.args)...), &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("slicerd %s: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// slicerd --version and slicerd version print the same: the version, then
// what the build information says.
func TestVersion(t *testing.T) {
	code, flag := slicerd(t, "--version")
	if code != 0 || !strings.HasPrefix(flag, "slicerd dev\n") || !strings.Contains(flag, "\n  go        go1.") {
		t.Errorf("slicerd --version: exit %d:\n%s", code, flag)
	}
	if code, cmd := slicerd(t, "version"); code != 0 || cmd != flag {
		t.Errorf("slicerd version: exit %d:\n%s\nwant what --version prints:\n%s", code, cmd, flag)
	}
}

func TestVersionText(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/slicerd/slicerd", Version: "v0.0.0-20261127134056-52cd622f0c1e+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"},
			{Key: "vcs.revision", Value: "52cd622f0c1e3a1c"}, {Key: "vcs.time", Value: "2026-11-27T13:40:56Z"}, {Key: "vcs.modified", Value: "true"},
		},
	}
	want := "slicerd v1.2.3\n" +
		"  module    github.com/slicerd/slicerd v0.0.0-20261127134056-52cd622f0c1e+dirty\n" +
		"  revision  52cd622f0c1e3a1c (modified: built with uncommitted changes)\n" +
		"  committed 2026-11-27T13:40:56Z\n" +
		"  go        go1.26.0 linux/amd64\n"
	if got := versionText("v1.2.3", bi); got != want {
		t.Errorf("versionText:\n%s\nwant:\n%s", got, want)
	}
	bi.Settings = bi.Settings[:2]
	if got := versionText("dev", bi); strings.Contains(got, "revision") || !strings.HasSuffix(got, "  go        go1.26.0 linux/amd64\n") {
		t.Errorf("versionText of a build without VCS information:\n%s", got)
	}
}

// An unknown command, at the top or under a command, is a usage error
// (exit 2) that says so, suggests the command meant and lists the others.
func TestUnknownCommand(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"job sett", `unknown command "sett" for 'slicerd job': did you mean 'set'? (commands: list, get, `},
		{"job hist kv", `unknown command "hist" for 'slicerd job': did you mean 'history'?`},
		{"jobs list", `unknown command "jobs" for 'slicerd': did you mean 'job'? (commands: version, job, task, `},
		{"--log-level debug jbo", `unknown command "jbo" for 'slicerd': did you mean 'job'?`},
		{"task drian kv kv-0", `unknown command "drian" for 'slicerd task': did you mean 'drain'?`},
		{"keyring lst", `unknown command "lst" for 'slicerd keyring': did you mean 'list'?`},
		{"help jbo", `unknown command "jbo" for 'slicerd': did you mean 'job'?`},
		{"job help sett", `unknown command "sett" for 'slicerd job': did you mean 'set'?`},
		{"job xyzzy", `unknown command "xyzzy" for 'slicerd job' (commands: list, get, freeze, unfreeze, set, watch, delete, pin, unpin, history, why; see 'slicerd job --help')`},
	} {
		code, out := slicerd(t, strings.Fields(tc.args)...)
		if code != 2 || !strings.Contains(out, tc.want) || strings.Contains(out, "help topic") {
			t.Errorf("slicerd %s: exit %d:\n%s\nwant exit 2 and %q", tc.args, code, out, tc.want)
		}
	}
	// A command with subcommands and no argument shows its help.
	if code, out := slicerd(t, "job"); code != 0 || !strings.Contains(out, "COMMANDS:") {
		t.Errorf("slicerd job: exit %d:\n%s", code, out)
	}
}
