package cli

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFlagReferenceCoversEveryFlag(t *testing.T) {
	app := NewApp("", io.Discard, io.Discard, VersionCommand(), JobCommand(), DemoCommand(), SimulateCommand(), TraceCommand(), DocsCommand())
	ref := FlagReference(app)
	for _, want := range []string{
		"`slicerd`: a node (no command), its flags by category\n\n*Roles and store*\n\n| flag |",
		"\n*Security: TLS and tokens*\n\n| flag | environment | default | meaning |\n|---|---|---|---|\n| `--tls-cert` |",
		"| `--role` | `SLICERD_ROLE` |  | roles to run",
		"| `--node-name` | `SLICERD_NODE_NAME` | the host name |",
		"| `--rebalance-interval` | `SLICERD_REBALANCE_INTERVAL` | `4s` |",
		"`slicerd job watch`:",
		"| `--addr` | `SLICERD_ADDR` | `127.0.0.1:7070` | RPC address of a slicerd node running the distributor role |",
		"| `--move-churn` |  | unchanged |",
		"`slicerd demo`:", "| `--once` |  | `false` |",
		"`slicerd simulate`:", "`slicerd trace generate`:", "| `--keys` |  | the workload's own |",
	} {
		if !strings.Contains(ref, want) {
			t.Errorf("flag reference lacks %q:\n%s", want, ref)
		}
	}
	for _, flag := range agentFlags() {
		if !strings.Contains(ref, "| `--"+flag.Names()[0]+"` |") {
			t.Errorf("flag reference lacks --%s", flag.Names()[0])
		}
	}
	// Each agent flag is in exactly one category, and no category names
	// a flag there is not.
	seen := map[string]int{}
	for _, c := range agentFlagCategories {
		for _, name := range c.flags {
			seen[name]++
		}
	}
	for _, flag := range agentFlags() {
		name := flag.Names()[0]
		if seen[name] != 1 {
			t.Errorf("--%s is in %d categories of agentFlagCategories; want 1", name, seen[name])
		}
		delete(seen, name)
	}
	for name := range seen {
		t.Errorf("agentFlagCategories names --%s, which is not an agent flag", name)
	}
	for _, absent := range []string{"slicerd docs", "--help", "slicerd version`"} {
		if strings.Contains(ref, absent) {
			t.Errorf("flag reference has %q, which is hidden, the library's, or flagless:\n%s", absent, ref)
		}
	}
}

func TestReplaceFlagReference(t *testing.T) {
	doc := "intro\n" + flagRefBegin + "\nold\n" + flagRefEnd + "\noutro\n"
	got, err := ReplaceFlagReference(doc, "\nnew\n")
	if want := "intro\n" + flagRefBegin + "\n\nnew\n" + flagRefEnd + "\noutro\n"; err != nil || got != want {
		t.Errorf("ReplaceFlagReference = %q, %v; want %q", got, err, want)
	}
	again, err := ReplaceFlagReference(got, "\nnew\n")
	if err != nil || again != got {
		t.Errorf("replacing again changed the document: %q, %v", again, err)
	}
	for _, bad := range []string{"no markers", flagRefBegin + " only"} {
		if _, err := ReplaceFlagReference(bad, "x"); !errors.Is(err, ErrNoMarkers) {
			t.Errorf("ReplaceFlagReference(%q): %v; want ErrNoMarkers", bad, err)
		}
	}
}
