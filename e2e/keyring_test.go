package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
)

// keyLine reports whether out lists key as installed and primary on n of
// n members ("KEY  3/3  3/3").
func keyLine(out, key string, n string) bool {
	inst, prim, ok := keyCols(out, key)
	return ok && inst == n+"/"+n && prim == n+"/"+n
}

// keyCols returns the INSTALLED and PRIMARY columns of key's line in a
// keyring listing.
func keyCols(out, key string) (installed, primary string, ok bool) {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == key {
			return f[1], f[2], true
		}
	}
	return "", "", false
}

// An encrypted cluster of real processes keeps out a member without the
// key, rotates its key with the slicerd keyring commands while a task
// stays a member, and takes back an agent restarted with its old key on
// the command line: its keyring file holds the new one.
func TestKeyringCommandsBinary(t *testing.T) {
	code, out := runSlicerd(t, "keyring", "generate")
	k1 := strings.TrimSpace(out)
	if code != 0 || len(k1) != 44 {
		t.Fatalf("keyring generate: exit %d, %q", code, out)
	}
	_, out = runSlicerd(t, "keyring", "generate")
	k2 := strings.TrimSpace(out)

	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir(), "--gossip-key", k1)
	node.waitLine(time.Second, "gossip encryption on")
	dir2 := t.TempDir()
	dist := startSlicerd(t, "node-2", "--role", "distributor", "--data-dir", dir2, "--join", node.gossipAddr, "--gossip-key", k1)
	kvFile := filepath.Join(t.TempDir(), "kv-0-keyring.json")
	kvArgs := []string{"-job", "kv", "-task", "kv-0", "-addr", "127.0.0.1:0",
		"-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local", "-join", node.gossipAddr, "-gossip-key", k1, "-gossip-keyring-file", kvFile}
	kv := start(t, "kv-0", bin.kvserver, kvArgs...)
	kv.waitLine(30*time.Second, "clerk: streaming assignments")

	// A member without the key keeps failing to join.
	stranger := startSlicerd(t, "stranger", "--role", "distributor", "--join", node.gossipAddr)
	stranger.waitLine(30*time.Second, "gossip join failed; retrying")

	list := func(want string) string {
		t.Helper()
		code, out := runSlicerd(t, "keyring", "list", "--addr", dist.rpcAddr)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("keyring list: exit %d, want %q:\n%s", code, want, out)
		}
		return out
	}
	// until runs keyring list until every member shows installed, with
	// primary as the primary key, as an operator does between steps.
	until := func(primary string, installed ...string) {
		t.Helper()
		var out string
		took, ok := testwait.Poll(t, 60*time.Second, func() bool {
			_, out = runSlicerd(t, "keyring", "list", "--addr", dist.rpcAddr)
			if !strings.Contains(out, "list: 3 members, 3 answered, 0 failed") || !keyLine(out, primary, "3") {
				return false
			}
			for _, k := range installed {
				if inst, _, found := keyCols(out, k); !found || inst != "3/3" {
					return false
				}
			}
			return strings.Count(out, "\n") == len(installed)+2 // header, keys, summary
		})
		if !ok {
			t.Fatalf("keyring list did not show %v installed, %s primary, on 3 of 3 members within %v:\n%s", installed, primary, took, out)
		}
		t.Logf("every member showed %v installed, %s primary, %v after the step", installed, primary, took.Round(time.Millisecond))
	}
	until(k1, k1)
	for _, step := range []struct {
		op, key, primary string
		installed        []string
	}{{"install", k2, k1, []string{k1, k2}}, {"use", k2, k2, []string{k1, k2}}, {"remove", k1, k2, []string{k2}}} {
		code, out := runSlicerd(t, "keyring", step.op, "--addr", dist.rpcAddr, step.key)
		if code != 0 || !strings.Contains(out, step.op+": 2 agents, 2 answered, 0 failed") || !strings.Contains(out, "1 task take the change") {
			t.Fatalf("keyring %s: exit %d:\n%s", step.op, code, out)
		}
		until(step.primary, step.installed...)
	}
	if out := list("list: 3 members, 3 answered, 0 failed"); !keyLine(out, k2, "3") || strings.Contains(out, k1) {
		t.Fatalf("keyring list after rotation does not show only %s on 3 of 3:\n%s", k2, out)
	}
	code, out = runSlicerd(t, "keyring", "remove", "--addr", dist.rpcAddr, k2)
	if code != 1 || !strings.Contains(out, "removing the primary key is not allowed") {
		t.Fatalf("keyring remove of the primary key: exit %d:\n%s", code, out)
	}

	// node-2 restarts with the old key in its flags.
	dist.signal(syscall.SIGTERM)
	if code := dist.wait(20 * time.Second); code != 0 {
		t.Fatalf("node-2 exited %d after SIGTERM", code)
	}
	dist = startSlicerd(t, "node-2", "--role", "distributor", "--data-dir", dir2, "--join", node.gossipAddr, "--gossip-key", k1)
	dist.waitLine(time.Second, "gossip key ignored", filepath.Join(dir2, "gossip-keyring.json"))
	dist.waitLine(30*time.Second, "gossip joined")
	// The restarted node asks the agents its view has verified; right
	// after the join that may not yet include node-1.
	until(k2, k2)
	// kv-0 took the rotation into its keyring file: restarted with the old
	// key in its flags, it joins with the new one.
	kv.signal(syscall.SIGTERM)
	if code := kv.wait(20 * time.Second); code != 0 {
		t.Fatalf("kv-0 exited %d after SIGTERM", code)
	}
	kv = start(t, "kv-0", bin.kvserver, kvArgs...)
	kv.waitLine(5*time.Second, "gossip key ignored")
	kv.waitLine(30*time.Second, "clerk: streaming assignments")
	until(k2, k2)
	if strings.Contains(stranger.output(), "gossip joined") {
		t.Fatalf("the member without the key joined:\n%s", stranger.output())
	}
}
