package gossip

import (
	"bytes"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/slicerd/slicerd/internal/serftest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// stockSerf starts serf as it ships, encrypting with memberlist's own
// keyring under key and carrying tags, with test timers.
func stockSerf(t *testing.T, name string, key []byte, tags map[string]string) *serf.Serf {
	t.Helper()
	s, _ := serftest.Start(t, name, key, tags, func(ml *memberlist.Config) {
		ml.ProbeInterval, ml.ProbeTimeout, ml.GossipInterval = 150*time.Millisecond, 100*time.Millisecond, 5*time.Millisecond
	})
	return s
}

// The sealed transport speaks memberlist's own encrypted format: a member
// running stock serf with memberlist's keyring joins slicerd's nodes and
// is seen alive (packets and push-pull streams both pass), and slicerd's
// nodes see it as the member it claims to be.
func TestSealedTransportSpeaksMemberlistsFormat(t *testing.T) {
	key := newKey(t)
	a := testNode(t, "a", selfAssigner, withKeys(key))
	b := testNode(t, "b", selfBackup, withKeys(key))
	join(t, b, a)
	tags, err := selfTask.Tags()
	if err != nil {
		t.Fatal(err)
	}
	stock := stockSerf(t, "stock", key, tags)
	if _, err := stock.Join([]string{a.GossipAddr()}, true); err != nil {
		t.Fatalf("stock serf joining a sealed node: %v", err)
	}
	waitAlive(t, a, "a", "b", "stock")
	waitAlive(t, b, "a", "b", "stock")
	testwait.For(t, "stock serf sees a and b alive", func() bool {
		alive := 0
		for _, m := range stock.Members() {
			if m.Status == serf.StatusAlive {
				alive++
			}
		}
		return alive == 3
	})
}

// A holder of the gossip key sends serf's keyring queries (list, install,
// use, remove) from stock serf: slicerd's nodes hold no serf keyring, so
// none of them lists its keys or changes them, and each query is counted
// and logged as refused.
func TestSerfKeyringQueriesAreNotObeyed(t *testing.T) {
	key := newKey(t)
	dir := t.TempDir()
	nodes := map[string]*Node{}
	for _, name := range []string{"a", "b"} {
		nodes[name] = testNode(t, name, selfAssigner, withKeys(key), withKeyringFile(filepath.Join(dir, name)))
	}
	a, b := nodes["a"], nodes["b"]
	join(t, b, a)
	tags, err := selfTask.Tags()
	if err != nil {
		t.Fatal(err)
	}
	intruder := stockSerf(t, "intruder", key, tags)
	if _, err := intruder.Join([]string{a.GossipAddr()}, true); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, a, "a", "b", "intruder")
	waitAlive(t, b, "a", "b", "intruder")

	// serf's own key manager would apply each change to the intruder too,
	// which would then seal its next query with its new key; the queries
	// are sent as the key manager words them, to a and b only.
	attackerKey := newKey(t)
	for _, q := range []struct {
		op  string
		key []byte
	}{{"list-keys", nil}, {"install-key", attackerKey}, {"use-key", attackerKey}, {"remove-key", key}} {
		answers := serftest.KeyQuery(t, intruder, q.op, q.key, "a", "b")
		if len(answers) != 2 {
			t.Fatalf("%s query: %d answers (%v), want one from a and one from b", q.op, len(answers), answers)
		}
		for from, payload := range answers {
			if bytes.Contains(payload, []byte(EncodeKey(key))) || bytes.Contains(payload, key) {
				t.Fatalf("%s query: %s's answer holds the gossip key", q.op, from)
			}
		}
	}
	for name, n := range nodes {
		testwait.For(t, name+" refused 4 keyring queries", func() bool {
			_, q := n.Refusals()
			return q >= 4
		})
		if keys := n.LocalKeys(); len(keys) != 1 || !bytes.Equal(keys[0], key) {
			t.Fatalf("%s's keys after the intruder's queries = %x; want only the gossip key", name, keys)
		}
		if got, err := ReadKeyringFile(filepath.Join(dir, name)); err != nil || len(got) != 1 || !bytes.Equal(got[0], key) {
			t.Fatalf("%s's keyring file after the intruder's queries = %x, %v", name, got, err)
		}
	}
	// The cluster is whole: a and b still hear each other.
	join(t, b, a)
	waitAlive(t, a, "a", "b")
	waitAlive(t, b, "a", "b")
}

// Sealed packets and streams round-trip under any installed key, and
// what no key opens, or what is not sealed at all, is refused.
func TestSealAndUnseal(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	msg := []byte("alive kv-1")
	sealed, err := seal(nil, k2, msg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := unseal([][]byte{k1, k2}, sealed, nil); err != nil || !bytes.Equal(plain, msg) {
		t.Fatalf("unseal = %q, %v", plain, err)
	}
	for name, bad := range map[string][]byte{
		"other key":  sealed,
		"empty":      nil,
		"short":      sealed[:sealOverhead-1],
		"version 0":  append([]byte{0}, sealed[1:]...),
		"flipped":    append(slices.Clone(sealed[:len(sealed)-1]), sealed[len(sealed)-1]^1),
		"plain text": msg,
	} {
		keys := [][]byte{k2}
		if name == "other key" {
			keys = [][]byte{k1}
		}
		if _, err := unseal(keys, bad, nil); !errors.Is(err, errUnsealed) {
			t.Errorf("%s: unseal = %v, want errUnsealed", name, err)
		}
	}
}

// A stream that is not sealed, or is over the size limit, is refused on
// its first read and counted once.
func TestSealedConnRefusesUnsealedStreams(t *testing.T) {
	k := newKey(t)
	ring, err := memberlist.NewKeyring([][]byte{k}, k)
	if err != nil {
		t.Fatal(err)
	}
	for name, first := range map[string][]byte{
		"plain push-pull": {6, 0, 0, 0, 1},
		"too large":       {sealStreamMsg, 0xff, 0xff, 0xff, 0xff},
		"too small":       {sealStreamMsg, 0, 0, 0, 3},
	} {
		t.Run(name, func(t *testing.T) {
			var refused int
			tr := &sealedTransport{ring: ring, refused: func(string, net.Addr, error) { refused++ }}
			client, server := net.Pipe()
			defer client.Close()
			go func() { _, _ = client.Write(append(first, make([]byte, 64)...)) }()
			c := tr.wrap(server)
			defer c.Close()
			buf := make([]byte, 16)
			for range 2 {
				if _, err := c.Read(buf); err == nil {
					t.Fatal("read an unsealed stream")
				}
			}
			if refused != 1 {
				t.Fatalf("refused counted %d times, want 1", refused)
			}
		})
	}
	// A sealed stream reads back message by message.
	tr := &sealedTransport{ring: ring, refused: func(string, net.Addr, error) { t.Error("refused a sealed stream") }}
	client, server := net.Pipe()
	defer client.Close()
	w, r := tr.wrap(client), tr.wrap(server)
	go func() {
		_, _ = w.Write([]byte("first"))
		_, _ = w.Write([]byte("second"))
	}()
	got := make([]byte, 0, 11)
	buf := make([]byte, 64)
	for len(got) < 11 {
		n, err := r.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "firstsecond" {
		t.Fatalf("read %q", got)
	}
}
