package gossip

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io/fs"
	"maps"
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

// rotate runs op with key on every node, as the agents do when an admin
// asks one of them, and checks that every member stays alive.
func rotate(t *testing.T, nodes map[string]*Node, op string, key []byte) {
	t.Helper()
	for name, n := range nodes {
		var err error
		switch op {
		case "install":
			err = n.InstallKey(key)
		case "use":
			err = n.UseKey(key)
		case "remove":
			err = n.RemoveKey(key)
		}
		if err != nil {
			t.Fatalf("%s key on %s: %v", op, name, err)
		}
	}
	for _, n := range nodes {
		waitAlive(t, n, slices.Sorted(maps.Keys(nodes))...)
	}
}

func TestKeyRotationKeepsMembersAndPersists(t *testing.T) {
	dir := t.TempDir()
	k1, k2 := newKey(t), newKey(t)
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
		if err != nil || len(got) != 1 || !bytes.Equal(got[0], k1) {
			t.Fatalf("%s's keyring file after start = %v, %v; want [k1]", name, got, err)
		}
	}

	rotate(t, nodes, "install", k2)
	if keys := b.LocalKeys(); len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Fatalf("b's keys after install = %x; want k1 (primary), k2", keys)
	}
	rotate(t, nodes, "use", k2)
	rotate(t, nodes, "remove", k1)
	for name, f := range files {
		got, err := ReadKeyringFile(f)
		if err != nil || len(got) != 1 || !bytes.Equal(got[0], k2) {
			t.Fatalf("%s's keyring file after rotation = %v, %v; want [k2]", name, got, err)
		}
	}
	if fi, err := os.Stat(files["a"]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file mode = %v, %v; want 0600", fi.Mode(), err)
	}

	// The retired key no longer opens the cluster, and a counts what it
	// could not open.
	before, _ := a.Refusals()
	old := testNode(t, "old", selfTask, withKeys(k1))
	if _, err := old.Join([]string{a.GossipAddr()}); !errors.Is(err, ErrJoin) {
		t.Fatalf("joining with the removed key = %v, want ErrJoin", err)
	}
	if after, _ := a.Refusals(); after <= before {
		t.Fatalf("a counted %d refused messages before the old key's join and %d after", before, after)
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

// SetKeys makes a keyring exactly what it is given, whatever it held.
func TestSetKeys(t *testing.T) {
	k1, k2, k3 := newKey(t), newKey(t), newKey(t)
	file := filepath.Join(t.TempDir(), "keyring")
	n := testNode(t, "t", selfTask, withKeys(k1, k2), withKeyringFile(file))
	changed, err := n.SetKeys([][]byte{k3, k1})
	if err != nil || !changed {
		t.Fatalf("SetKeys = %v, %v; want a change", changed, err)
	}
	if keys := n.LocalKeys(); len(keys) != 2 || !bytes.Equal(keys[0], k3) || !bytes.Equal(keys[1], k1) {
		t.Fatalf("keys = %x; want k3 (primary), k1", keys)
	}
	if got, err := ReadKeyringFile(file); err != nil || len(got) != 2 || !bytes.Equal(got[0], k3) {
		t.Fatalf("keyring file = %x, %v; want k3 first of 2", got, err)
	}
	if changed, err := n.SetKeys([][]byte{k3, k1}); err != nil || changed {
		t.Fatalf("SetKeys of the same keys = %v, %v; want no change", changed, err)
	}
	if changed, err := n.SetKeys([][]byte{k1, k3}); err != nil || !changed || !bytes.Equal(n.LocalKeys()[0], k1) {
		t.Fatalf("SetKeys with another primary = %v, %v, primary %x", changed, err, n.LocalKeys()[0])
	}
	for _, bad := range [][][]byte{nil, {k1, k1}, {[]byte("short")}} {
		if _, err := n.SetKeys(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("SetKeys(%x) = %v, want ErrConfig", bad, err)
		}
	}
	plain := testNode(t, "plain", selfTask)
	if _, err := plain.SetKeys([][]byte{k1}); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("SetKeys on an unencrypted node = %v, want ErrNotEncrypted", err)
	}
}

func TestKeyringOperationErrors(t *testing.T) {
	plain := testNode(t, "plain", selfAssigner)
	if err := plain.InstallKey(newKey(t)); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("InstallKey on an unencrypted node = %v, want ErrNotEncrypted", err)
	}
	key := newKey(t)
	enc := testNode(t, "enc", selfAssigner, withKeys(key))
	for _, bad := range [][]byte{nil, []byte("short"), make([]byte, 33)} {
		if err := enc.InstallKey(bad); !errors.Is(err, ErrKeyring) || !errors.Is(err, ErrConfig) {
			t.Errorf("InstallKey(%x) = %v, want ErrKeyring wrapping ErrConfig", bad, err)
		}
	}
	if err := enc.RemoveKey(key); !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("removing the primary key = %v; want ErrKeyring saying it is the primary key", err)
	}
	if err := enc.UseKey(newKey(t)); !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("using a key not installed = %v; want ErrKeyring saying so", err)
	}
	if keys := enc.LocalKeys(); len(keys) != 1 || !bytes.Equal(keys[0], key) {
		t.Fatalf("keys after refused changes = %x; want only the first key", keys)
	}
	if err := enc.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := enc.InstallKey(newKey(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("InstallKey after Shutdown = %v, want ErrClosed", err)
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
