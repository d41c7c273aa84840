package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles"
)

// keyringCLI runs 'slicerd keyring ...' in-process.
func keyringCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	app := NewApp("", &out, &out, KeyringCommand())
	code := Run(context.Background(), app, append([]string{"slicerd", "keyring"}, args...))
	return code, out.String()
}

func TestKeyringGenerate(t *testing.T) {
	seen := map[string]bool{}
	for range 2 {
		code, out := keyringCLI(t, "generate")
		key := strings.TrimSpace(out)
		raw, err := base64.StdEncoding.DecodeString(key)
		if code != 0 || err != nil || len(raw) != 32 {
			t.Fatalf("keyring generate: exit %d, %q (%d bytes, %v)", code, out, len(raw), err)
		}
		if seen[key] {
			t.Fatalf("keyring generate printed %s twice", key)
		}
		seen[key] = true
	}
	if code, out := keyringCLI(t, "generate", "extra"); code != 2 {
		t.Fatalf("keyring generate extra: exit %d: %s", code, out)
	}
}

// startEncryptedNode runs an in-process node with every role and gossip
// encrypted with key, and returns its RPC address.
func startEncryptedNode(t *testing.T, key []byte) string {
	t.Helper()
	cfg := roles.TestConfig("keyring-test")
	cfg.DataDir = t.TempDir()
	cfg.Gossip.Keys = [][]byte{key}
	cfg.Gossip.KeyringFile = filepath.Join(cfg.DataDir, defaultKeyringFile)
	agent, err := roles.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	})
	return agent.RPCAddr()
}

func TestKeyringCommandsRotate(t *testing.T) {
	k1 := make([]byte, 32)
	k1[0] = 1
	k2 := make([]byte, 16)
	k2[0] = 2
	e1, e2 := gossip.EncodeKey(k1), gossip.EncodeKey(k2)
	addr := startEncryptedNode(t, k1)

	code, out := keyringCLI(t, "list", "--addr", addr)
	if code != 0 || !strings.Contains(out, e1) || !strings.Contains(out, "list: 1 members, 1 answered, 0 failed") {
		t.Fatalf("keyring list: exit %d:\n%s", code, out)
	}
	for _, step := range [][]string{{"install", e2}, {"use", e2}, {"remove", e1}} {
		code, out := keyringCLI(t, step[0], "--addr", addr, step[1])
		if code != 0 || !strings.Contains(out, step[0]+": 1 agent, 1 answered, 0 failed") {
			t.Fatalf("keyring %s: exit %d:\n%s", step[0], code, out)
		}
	}
	code, out = keyringCLI(t, "list", "--addr", addr)
	if code != 0 || strings.Contains(out, e1) || !strings.Contains(out, e2+"  ") {
		t.Fatalf("keyring list after rotation: exit %d:\n%s", code, out)
	}
	// Removing the primary key fails on the node asked, which says why.
	code, out = keyringCLI(t, "remove", "--addr", addr, e2)
	if code != 1 || !strings.Contains(out, "removing the primary key is not allowed") {
		t.Fatalf("keyring remove of the primary key: exit %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"install", "--addr", addr}, {"install", "--addr", addr, "nope"}, {"use", "--addr", addr, e1, e2}} {
		if code, out := keyringCLI(t, args...); code != 2 {
			t.Errorf("keyring %v: exit %d, want 2:\n%s", args, code, out)
		}
	}
	if code, out := keyringCLI(t, "list", "--addr", "127.0.0.1:1"); code != 1 || !strings.Contains(out, "cannot reach slicerd at 127.0.0.1:1") {
		t.Errorf("keyring list unreachable: exit %d:\n%s", code, out)
	}
}

func TestKeyringCommandsNeedEncryption(t *testing.T) {
	addr := startNode(t, gossip.RoleDistributor)
	code, out := keyringCLI(t, "list", "--addr", addr)
	if code != 1 || !strings.Contains(out, "gossip encryption is off") {
		t.Fatalf("keyring list on an unencrypted node: exit %d:\n%s", code, out)
	}
}

func TestGossipKeyFlags(t *testing.T) {
	key := gossip.EncodeKey(bytes.Repeat([]byte{7}, 32))
	dir := t.TempDir()

	// No key and no keyring file: gossip stays unencrypted.
	cfg, code, out := agentConfigOf(t, nil, "--data-dir", dir)
	if code != 0 || cfg.Gossip.Keys != nil || cfg.Gossip.KeyringFile != "" {
		t.Fatalf("no key: exit %d, keys %v, file %q: %s", code, cfg.Gossip.Keys, cfg.Gossip.KeyringFile, out)
	}
	// A key alone uses the keyring file in the data dir.
	sub := filepath.Join(dir, "new")
	t.Run("env", func(t *testing.T) {
		cfg, code, out := agentConfigOf(t, map[string]string{"SLICERD_GOSSIP_KEY": key}, "--data-dir", sub)
		if code != 0 || len(cfg.Gossip.Keys) != 1 || cfg.Gossip.KeyringFile != filepath.Join(sub, defaultKeyringFile) {
			t.Fatalf("key: exit %d, keys %v, file %q: %s", code, cfg.Gossip.Keys, cfg.Gossip.KeyringFile, out)
		}
	})
	// A keyring file that exists is used without a key.
	ring := filepath.Join(dir, defaultKeyringFile)
	if err := os.WriteFile(ring, []byte(`["`+key+`"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, code, out = agentConfigOf(t, nil, "--data-dir", dir)
	if code != 0 || cfg.Gossip.KeyringFile != ring {
		t.Fatalf("existing keyring file: exit %d, file %q: %s", code, cfg.Gossip.KeyringFile, out)
	}
	corrupt := filepath.Join(dir, "corrupt.json")
	if err := os.WriteFile(corrupt, []byte(`["`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gossip-key", "not base64!"}, "invalid --gossip-key"},
		{[]string{"--gossip-key", gossip.EncodeKey(make([]byte, 20))}, "must be 16, 24 or 32 bytes"},
		{[]string{"--gossip-keyring-file", ""}, "--gossip-keyring-file is empty"},
		{[]string{"--gossip-keyring-file", corrupt}, "is corrupt"},
		{[]string{"--gossip-keyring-file", filepath.Join(dir, "missing.json")}, "does not exist and --gossip-key is not set"},
	} {
		_, code, out := agentConfigOf(t, nil, append([]string{"--data-dir", dir}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}

// An agent started with a key logs that gossip is encrypted; restarted
// with a different key, the keyring file wins and a warning says so.
func TestKeyringFileWinsOverGossipKey(t *testing.T) {
	dir := t.TempDir()
	k1 := gossip.EncodeKey(bytes.Repeat([]byte{1}, 32))
	k2 := gossip.EncodeKey(bytes.Repeat([]byte{2}, 32))
	logs := runLogs(t, "--data-dir", dir, "--gossip-key", k1)
	if !strings.Contains(logs, "gossip encryption on") || strings.Contains(logs, "gossip key ignored") {
		t.Fatalf("first start:\n%s", logs)
	}
	logs = runLogs(t, "--data-dir", dir, "--gossip-key", k2)
	if !strings.Contains(logs, "gossip key ignored") || !strings.Contains(logs, "given_key_in_file=false") {
		t.Fatalf("restart with another key does not warn that the keyring file wins:\n%s", logs)
	}
	keys, err := gossip.ReadKeyringFile(filepath.Join(dir, defaultKeyringFile))
	if err != nil || len(keys) != 1 || gossip.EncodeKey(keys[0]) != k1 {
		t.Fatalf("keyring file = %v, %v; want the first key", keys, err)
	}
}

// runLogs starts the agent until it logs its start and returns its logs.
func runLogs(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLineWriter()
	done := make(chan int, 1)
	base := []string{"slicerd", "--node-name", "n1", "--rpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--gossip-profile", "local", "--startup-grace", "10ms", "--log-level", "info"}
	go func() {
		app := NewApp("", logs, logs)
		done <- Run(ctx, app, append(base, args...))
	}()
	for !strings.Contains(logs.String(), `msg="slicerd started"`) {
		select {
		case <-logs.written:
		case code := <-done:
			t.Fatalf("slicerd %v exited %d before starting:\n%s", args, code, logs.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("slicerd %v exited %d:\n%s", args, code, logs.String())
	}
	return logs.String()
}
