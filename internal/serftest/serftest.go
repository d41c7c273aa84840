// Package serftest runs serf as it ships, for tests that play a holder of
// the gossip key: stock serf encrypting with memberlist's own keyring, and
// serf's keyring queries worded as its key manager words them. It owns
// nothing of slicerd's and is imported by tests only.
package serftest

import (
	"bytes"
	"io"
	"log"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// Start runs stock serf named name on a free loopback port, encrypting
// with memberlist's keyring holding only key and advertising tags; tweak,
// if not nil, adjusts memberlist's configuration (memberlist's local
// profile) first. It shuts down when the test ends. The keyring is
// returned so the caller can add keys it learns.
func Start(t testing.TB, name string, key []byte, tags map[string]string, tweak func(*memberlist.Config)) (*serf.Serf, *memberlist.Keyring) {
	t.Helper()
	ml := memberlist.DefaultLocalConfig()
	ml.BindAddr, ml.BindPort, ml.AdvertisePort = "127.0.0.1", 0, 0
	ring, err := memberlist.NewKeyring([][]byte{key}, key)
	if err != nil {
		t.Fatal(err)
	}
	ml.Keyring, ml.GossipVerifyIncoming, ml.GossipVerifyOutgoing = ring, true, true
	ml.Logger = log.New(io.Discard, "", 0)
	if tweak != nil {
		tweak(ml)
	}
	sc := serf.DefaultConfig()
	sc.NodeName, sc.Tags, sc.MemberlistConfig = name, tags, ml
	sc.Logger = log.New(io.Discard, "", 0)
	s, err := serf.Create(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return s, ring
}

// KeyQuery sends one of serf's keyring queries (op "list-keys",
// "install-key", "use-key" or "remove-key") from s to the named members
// only, worded as serf's key manager words it, and returns their answers
// by member name. (serf's key manager would apply a change to the sender
// too, which would then seal its next query with the new key.)
func KeyQuery(t testing.TB, s *serf.Serf, op string, key []byte, to ...string) map[string][]byte {
	t.Helper()
	var payload bytes.Buffer
	payload.WriteByte(7) // serf's messageKeyRequestType
	if err := codec.NewEncoder(&payload, &codec.MsgpackHandle{}).Encode(struct{ Key []byte }{key}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Query("_serf_"+op, payload.Bytes(), &serf.QueryParam{FilterNodes: to, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("%s query: %v", op, err)
	}
	answers := map[string][]byte{}
	for r := range resp.ResponseCh() {
		answers[r.From] = r.Payload
		if len(answers) == len(to) {
			resp.Close()
			break
		}
	}
	return answers
}

// KeyAnswer is serf's answer to a keyring query.
type KeyAnswer struct {
	Result     bool
	Message    string
	Keys       []string
	PrimaryKey string
}

// DecodeKeyAnswer decodes an answer KeyQuery returned.
func DecodeKeyAnswer(payload []byte) (KeyAnswer, bool) {
	var a KeyAnswer
	if len(payload) < 1 || codec.NewDecoderBytes(payload[1:], &codec.MsgpackHandle{}).Decode(&a) != nil {
		return KeyAnswer{}, false
	}
	return a, true
}
