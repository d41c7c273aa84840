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
	app := NewApp("", stdout, stderr, VersionCommand(), JobCommand(), TaskCommand(), KeyringCommand(), DemoCommand(), SimulateCommand(), TraceCommand(), TLSCommand())
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
