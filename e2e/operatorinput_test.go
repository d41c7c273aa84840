package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/slicelet"
)

// docs/operations.md: "Invalid values are refused before anything starts,
// with exit status 2 and a message naming the flag." Malformed gossip
// settings and --ui-addr too: noticed only after the store was opened,
// they left a slicerd.db behind and exited 1 (which
// systemd's Restart=on-failure retries), mostly without naming the flag.
func TestInvalidGossipFlagsRefusedBeforeStart(t *testing.T) {
	for _, tc := range []struct {
		name, flag string
		args       []string
	}{
		{"join without port", "--join", []string{"--join", "nope"}},
		{"join port out of range", "--join", []string{"--join", "127.0.0.1:99999"}},
		{"gossip addr host name", "--gossip-addr", []string{"--gossip-addr", "localhost:7946"}},
		{"node name with a space", "--node-name", []string{"--node-name", "a b"}},
		{"ui addr without port", "--ui-addr", []string{"--ui-addr", "nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
				"--data-dir", dir}, tc.args...)
			code, out := runSlicerd(t, args...)
			// The store is what must not be created (the secure runs put
			// their keys and certificates in the data dir beforehand).
			_, statErr := os.Stat(filepath.Join(dir, "slicerd.db"))
			if code != 2 || !strings.Contains(out, tc.flag) || statErr == nil {
				t.Errorf("slicerd %v: exit %d, store created: %v, output:\n%s\nwant exit 2, a message naming %s, and no store",
					tc.args, code, statErr == nil, lastLine(out), tc.flag)
			}
		})
	}
}

// A data file that is a symbolic link whose target does not exist (a
// volume not mounted yet, a restore not done) is refused as such, and
// nothing is created at the target: a store created there would be
// refused as corrupt on this and every later start, and the operator sent
// to restore from a backup for the wrong reason.
func TestDanglingDataFileSymlink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	target := filepath.Join(t.TempDir(), "volume", "slicerd.db")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "slicerd.db")); err != nil {
		t.Fatal(err)
	}
	code, out := runSlicerd(t, "--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--data-dir", dir)
	fi, statErr := os.Stat(target)
	if statErr == nil {
		t.Errorf("slicerd created the link's target %s (%d bytes)", target, fi.Size())
	}
	if code == 0 || !strings.Contains(out, "link") || strings.Contains(out, "corrupt") {
		t.Errorf("exit %d: %s\nwant a failure that says the data file is a link to a missing file, not that it is corrupt", code, lastLine(out))
	}
}

// The keyring file holds the cluster's gossip keys (written mode 0600);
// one that other users may read is warned about, naming it, as the etcd
// password file is.
func TestWorldReadableKeyringFileIsWarned(t *testing.T) {
	if secure {
		t.Skip("secure mode gives its own keys")
	}
	dir := t.TempDir()
	code, key := runSlicerd(t, "keyring", "generate")
	if code != 0 {
		t.Fatalf("keyring generate: exit %d: %s", code, key)
	}
	file := filepath.Join(dir, "gossip-keyring.json")
	if err := os.WriteFile(file, fmt.Appendf(nil, "[%q]", strings.TrimSpace(key)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	n := startSlicerd(t, "n1", "--data-dir", dir)
	n.signal(15)
	n.wait(30 * time.Second)
	out := n.output()
	warned := false
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, file) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning names the world-readable keyring file %s", file)
	}
}

// The help of --max-load-reports-per-second states the Slicelet's default
// load window, slicelet.DefaultLoadWindow.
func TestHelpStatesTheLoadWindowDefault(t *testing.T) {
	code, out := runSlicerd(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	want := fmt.Sprintf("once per load window, %v by default", slicelet.DefaultLoadWindow)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
		i := strings.Index(out, "once per load window")
		t.Errorf("slicerd --help does not say %q; it says %q", want, out[i:min(len(out), i+40)])
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
