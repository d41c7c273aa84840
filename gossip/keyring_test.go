package gossip

import (
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/internal/testwait"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func withKeys(keys ...[]byte) func(*Config) {
	return func(c *Config) { c.Keys = keys }
}

func withKeyringFile(path string) func(*Config) {
	return func(c *Config) { c.KeyringFile = path }
}

// memberNames lists every member n's serf knows, slicerd's or not, in
// any status.
func memberNames(n *Node) []string {
	var names []string
	for _, m := range n.serf.Members() {
		names = append(names, m.Name)
	}
	return names
}

// A member without the key, and one with a wrong key, cannot join an
// encrypted cluster, and the cluster never lists them.
func TestEncryptedClusterRefusesStrangers(t *testing.T) {
	key := newKey(t)
	a := testNode(t, "a", selfAssigner, withKeys(key))
	b := testNode(t, "b", selfBackup, withKeys(key))
	join(t, b, a)
	waitAlive(t, a, "a", "b")
	if !a.Encrypted() {
		t.Fatal("a with a key does not encrypt")
	}

	plain := testNode(t, "plain", selfTask)
	wrong := testNode(t, "wrong", selfTask, withKeys(newKey(t)))
	if plain.Encrypted() {
		t.Fatal("a node without keys encrypts")
	}
	for _, n := range []*Node{plain, wrong} {
		if num, err := n.Join([]string{a.GossipAddr()}); !errors.Is(err, ErrJoin) {
			t.Fatalf("%s joining the encrypted cluster = %d, %v; want ErrJoin", n.cfg.NodeName, num, err)
		}
	}
	// The strangers' own gossip toward a also goes nowhere: a member with
	// the key joins after them and is seen, while they never are.
	late := testNode(t, "late", selfTask, withKeys(key))
	join(t, late, b)
	waitAlive(t, a, "a", "b", "late")
	for _, n := range []*Node{a, b, late} {
		if names := memberNames(n); slices.Contains(names, "plain") || slices.Contains(names, "wrong") {
			t.Fatalf("%s lists %v, a stranger among them", n.cfg.NodeName, names)
		}
	}
	for _, n := range []*Node{plain, wrong} {
		if names := memberNames(n); len(names) != 1 {
			t.Fatalf("%s lists %v; it should know only itself", n.cfg.NodeName, names)
		}
	}
}

func keyCounts(t *testing.T, n *Node) (keys, primary map[string]int) {
	t.Helper()
	res, err := n.ListKeys()
	if err != nil {
		t.Fatalf("ListKeys: %v (%+v)", err, res)
	}
	return res.Keys, res.PrimaryKeys
}

func TestKeyRotationKeepsMembersAndPersists(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := newKey(t), newKey(t)
	e1, e2 := EncodeKey(k1), EncodeKey(k2)
	files := map[string]string{}
	nodes := map[string]*Node{}
	for _, name := range []string{"a", "b", "c"} {
		files[name] = filepath.Join(dir, name+".keyring")
		nodes[name] = testNode(t, name, selfAssigner, withKeys(k1), withKeyringFile(files[name]))
	}
	a, b, c := nodes["a"], nodes["b"], nodes["c"]
	join(t, b, a)
	join(t, c, a)
	for _, n := range nodes {
		waitAlive(t, n, "a", "b", "c")
	}
	for name, f := range files {
		got, err := ReadKeyringFile(f)
		if err != nil || len(got) != 1 || EncodeKey(got[0]) != e1 {
			t.Fatalf("%s's keyring file after start = %v, %v; want [k1]", name, got, err)
		}
	}

	keys, primary := keyCounts(t, b)
	if !maps1(keys, e1, 3) || !maps1(primary, e1, 3) {
		t.Fatalf("before rotation: keys %v, primary %v; want k1 on all 3", keys, primary)
	}
	for _, step := range []struct {
		op  func(string) (KeyResult, error)
		key string
	}{{a.InstallKey, e2}, {b.UseKey, e2}, {c.RemoveKey, e1}} {
		res, err := step.op(step.key)
		if err != nil || res.NumNodes != 3 || res.NumResp != 3 || res.NumErr != 0 {
			t.Fatalf("keyring step = %+v, %v; want 3 nodes answering without errors", res, err)
		}
		for _, n := range nodes {
			waitAlive(t, n, "a", "b", "c")
		}
	}
	keys, primary = keyCounts(t, a)
	if len(keys) != 1 || !maps1(keys, e2, 3) || !maps1(primary, e2, 3) {
		t.Fatalf("after rotation: keys %v, primary %v; want only k2 on all 3", keys, primary)
	}
	for name, f := range files {
		got, err := ReadKeyringFile(f)
		if err != nil || len(got) != 1 || EncodeKey(got[0]) != e2 {
			t.Fatalf("%s's keyring file after rotation = %v, %v; want [k2]", name, got, err)
		}
	}
	if fi, err := os.Stat(files["a"]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file mode = %v, %v; want 0600", fi.Mode(), err)
	}

	// The retired key no longer opens the cluster.
	old := testNode(t, "old", selfTask, withKeys(k1))
	if _, err := old.Join([]string{a.GossipAddr()}); !errors.Is(err, ErrJoin) {
		t.Fatalf("joining with the removed key = %v, want ErrJoin", err)
	}

	// c restarts with its original key on the command line: the keyring
	// file wins, and it rejoins with the rotated key.
	if err := c.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitSignalStatus(t, a, "c", StatusLeft)
	c2 := testNode(t, "c", selfAssigner, withKeys(k1), withKeyringFile(files["c"]))
	join(t, c2, a)
	waitAlive(t, a, "a", "b", "c")
	waitAlive(t, c2, "a", "b", "c")
	if names := memberNames(a); slices.Contains(names, "old") {
		t.Fatalf("a lists %v, including the member with the removed key", names)
	}
}

func waitSignalStatus(t *testing.T, n *Node, name string, s Status) {
	t.Helper()
	testwait.For(t, name+" "+s.String(), hasStatus(n, name, s))
}

func maps1(m map[string]int, key string, count int) bool { return m[key] == count }

func TestRemovePrimaryKeyReportsEachMember(t *testing.T) {
	key := newKey(t)
	a := testNode(t, "a", selfAssigner, withKeys(key))
	b := testNode(t, "b", selfBackup, withKeys(key))
	join(t, b, a)
	waitAlive(t, a, "a", "b")
	res, err := a.RemoveKey(EncodeKey(key))
	if !errors.Is(err, ErrKeyring) || res.NumErr != 2 || len(res.Messages) != 2 {
		t.Fatalf("removing the primary key = %+v, %v; want ErrKeyring with a message from each member", res, err)
	}
	if msg := res.Messages["b"]; !strings.Contains(msg, "primary") {
		t.Fatalf("b's message %q does not say the key is the primary one", msg)
	}
	if keys, _ := keyCounts(t, b); !maps1(keys, EncodeKey(key), 2) {
		t.Fatalf("keys after the refused removal = %v", keys)
	}
}

func TestKeyringOperationErrors(t *testing.T) {
	plain := testNode(t, "plain", selfAssigner)
	if _, err := plain.ListKeys(); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("ListKeys on an unencrypted node = %v, want ErrNotEncrypted", err)
	}
	enc := testNode(t, "enc", selfAssigner, withKeys(newKey(t)))
	for _, bad := range []string{"", "not base64!", EncodeKey([]byte("short"))} {
		if _, err := enc.InstallKey(bad); !errors.Is(err, ErrKeyring) || !errors.Is(err, ErrConfig) {
			t.Errorf("InstallKey(%q) = %v, want ErrKeyring wrapping ErrConfig", bad, err)
		}
	}
	if err := enc.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := enc.ListKeys(); !errors.Is(err, ErrClosed) {
		t.Fatalf("ListKeys after Shutdown = %v, want ErrClosed", err)
	}
}

func TestParseKey(t *testing.T) {
	for _, n := range KeySizes {
		k := make([]byte, n)
		got, err := ParseKey(EncodeKey(k))
		if err != nil || len(got) != n {
			t.Errorf("ParseKey of %d bytes = %d bytes, %v", n, len(got), err)
		}
	}
	for _, bad := range []string{"", "%%%", EncodeKey(make([]byte, 31)), EncodeKey(make([]byte, 64))} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseKey(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestStartRejectsBadKeyring(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := newKey(t)
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"short key", withKeys(make([]byte, 10)), "must be 16, 24 or 32 bytes"},
		{"repeated key", withKeys(good, good), "given twice"},
		{"corrupt file", withKeyringFile(write("corrupt", "{not json")), "corrupt"},
		{"empty file", withKeyringFile(write("empty", "[]")), "holds no keys"},
		{"bad base64 in file", withKeyringFile(write("b64", `["!!"]`)), "not valid base64"},
		{"short key in file", withKeyringFile(write("short", `["`+EncodeKey(make([]byte, 8))+`"]`)), "16, 24 or 32"},
		{"directory as file", withKeyringFile(dir), "directory"},
		{"no file and no key", withKeyringFile(filepath.Join(dir, "missing")), "does not exist and no gossip key"},
		{"file in missing dir", func(c *Config) {
			c.Keys = [][]byte{good}
			c.KeyringFile = filepath.Join(dir, "nodir", "keyring")
		}, "cannot create keyring file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := TestConfig("n")
			cfg.Self = selfAssigner
			tc.mutate(&cfg)
			n, err := Start(cfg)
			if err == nil {
				n.Shutdown()
				t.Fatal("Start succeeded")
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v; want ErrConfig saying %q", err, tc.want)
			}
		})
	}
	if _, err := ReadKeyringFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadKeyringFile of a missing file = %v, want fs.ErrNotExist", err)
	}
}

func FuzzReadKeyringFile(f *testing.F) {
	f.Add([]byte(`["` + EncodeKey(make([]byte, 32)) + `"]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "k")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := ReadKeyringFile(p)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if len(keys) == 0 {
			t.Fatal("accepted an empty keyring")
		}
		for _, k := range keys {
			if !slices.Contains(KeySizes, len(k)) {
				t.Fatalf("accepted a %d-byte key", len(k))
			}
		}
	})
}
