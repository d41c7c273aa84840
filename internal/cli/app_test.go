package cli

import (
	"context"
	"io"
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
