package e2e

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/serftest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// intruder joins the cluster of tg as stock serf, encrypting gossip with
// memberlist's own keyring under the gossip key and claiming to be task
// "intruder" of job kv: what a holder of the gossip key without a
// certificate can run. It returns once the intruder sees every task.
func intruder(t *testing.T, tg *target) (*serf.Serf, *memberlist.Keyring) {
	t.Helper()
	tags, err := gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "intruder", RPCAddr: "127.0.0.1:1"}.Tags()
	if err != nil {
		t.Fatal(err)
	}
	name := gossip.TaskMemberName("kv", "intruder")
	s, ring := serftest.Start(t, name, insiderKeys(t)[0], tags, nil)
	if _, err := s.Join([]string{tg.node.gossipAddr}, true); err != nil {
		t.Fatalf("the intruder joining with the gossip key: %v", err)
	}
	testwait.Until(t, 20*time.Second, "the intruder to see node-1 and the three tasks alive", func() bool {
		alive := 0
		for _, m := range s.Members() {
			if m.Status == serf.StatusAlive && (m.Name == "node-1" || strings.HasSuffix(m.Name, "@kv") && m.Name != name) {
				alive++
			}
		}
		return alive == 4
	})
	return s, ring
}

// stealKeys asks the named members for their keys with serf's list-keys
// query and installs every key an answer gives on ring: what the
// intruder does to follow a rotation.
func stealKeys(t *testing.T, s *serf.Serf, ring *memberlist.Keyring, to []string) int {
	t.Helper()
	stolen := 0
	for _, payload := range serftest.KeyQuery(t, s, "list-keys", nil, to...) {
		resp, ok := serftest.DecodeKeyAnswer(payload)
		if !ok {
			continue
		}
		for _, k := range resp.Keys {
			if key, err := gossip.ParseKey(k); err == nil && ring.AddKey(key) == nil {
				stolen++
			}
		}
		if key, err := gossip.ParseKey(resp.PrimaryKey); err == nil && ring.AddKey(key) == nil && ring.UseKey(key) == nil {
			stolen++
		}
	}
	return stolen
}

// TestAttackGossipKeyringQueries sends, with the gossip key alone, serf's
// four keyring queries to the node and the three tasks: list the keys,
// install the attacker's key, make it primary, remove the cluster's key.
// Nobody lists its keys, no keyring changes (the cluster's key is still
// the only one, on every member), nothing moves, and every member logs
// the refusal (and counts it: slicerd_gossip_keyring_queries_refused_total).
func TestAttackGossipKeyringQueries(t *testing.T) {
	tg := startTarget(t)
	in, _ := intruder(t, tg)
	key := insiderKeys(t)[0]
	members := []string{"node-1", gossip.TaskMemberName("kv", "kv-0"), gossip.TaskMemberName("kv", "kv-1"), gossip.TaskMemberName("kv", "kv-2")}
	attackerKey := bytes.Repeat([]byte{0xa7}, 32)
	for _, q := range []struct {
		op  string
		key []byte
	}{{"list-keys", nil}, {"install-key", attackerKey}, {"use-key", attackerKey}, {"remove-key", key}} {
		answers := serftest.KeyQuery(t, in, q.op, q.key, members...)
		for from, payload := range answers {
			if bytes.Contains(payload, []byte(gossip.EncodeKey(key))) || bytes.Contains(payload, key) {
				t.Fatalf("%s query: %s's answer holds the gossip key", q.op, from)
			}
		}
		t.Logf("%s query: %d of %d members answered, none with a key", q.op, len(answers), len(members))
	}
	tg.node.waitLine(10*time.Second, "refused a gossip keyring query")
	for _, name := range []string{"kv-0", "kv-1", "kv-2"} {
		tg.tasks[name].waitLine(10*time.Second, "refused a gossip keyring query")
	}
	// The keyrings: the cluster's key, primary, on the node and the three
	// tasks; the intruder, a member with no registration, reports nothing.
	var out string
	took, ok := testwait.Poll(t, 20*time.Second, func() bool {
		_, out = runSlicerd(t, "keyring", "list", "--addr", tg.node.rpcAddr)
		inst, prim, found := keyCols(out, gossip.EncodeKey(key))
		return found && inst == "4/5" && prim == "4/5"
	})
	if !ok {
		t.Fatalf("keyring list after the attack (%v):\n%s", took, out)
	}
	if strings.Contains(out, gossip.EncodeKey(attackerKey)) || strings.Count(out, "=  ") != 1 {
		t.Fatalf("keyring list after the attack shows another key:\n%s", out)
	}
	if !strings.Contains(out, "intruder@kv: has not reported its keys") {
		t.Errorf("keyring list does not point at the intruder:\n%s", out)
	}
	tg.contained()
}

// TestAttackRotationShutsOutKeyHolder rotates the gossip key while a
// holder of the old key without a certificate (a host whose certificate
// was revoked) is a member. The new key reaches the node over the admin's
// call and the tasks over their registrations, never through gossip: the
// holder, asking every member for its keys after each step, gets none;
// once the old key is removed it hears nothing and cannot rejoin, while
// the tasks keep their keys and the assignment does not move.
func TestAttackRotationShutsOutKeyHolder(t *testing.T) {
	tg := startTarget(t)
	in, ring := intruder(t, tg)
	k1 := testGossipKey
	_, out := runSlicerd(t, "keyring", "generate")
	k2 := strings.TrimSpace(out)
	until := func(step string, cond func(out string) bool) {
		t.Helper()
		var out string
		took, ok := testwait.Poll(t, 60*time.Second, func() bool {
			_, out = runSlicerd(t, "keyring", "list", "--addr", tg.node.rpcAddr)
			return cond(out)
		})
		if !ok {
			t.Fatalf("keyring list did not show %s within %v:\n%s", step, took, out)
		}
		t.Logf("%s shown on every registered member %v after the step", step, took.Round(time.Millisecond))
	}
	on := func(key, inst, prim string) func(string) bool {
		return func(out string) bool {
			i, p, ok := keyCols(out, key)
			return ok && i == inst && p == prim
		}
	}
	for _, step := range []struct {
		op, key string
		done    func(string) bool
	}{
		{"install", k2, on(k2, "4/5", "0/5")},
		{"use", k2, on(k2, "4/5", "4/5")},
		{"remove", k1, func(out string) bool { return on(k2, "4/4", "4/4")(out) && !strings.Contains(out, k1) }},
	} {
		code, out := runSlicerd(t, "keyring", step.op, "--addr", tg.node.rpcAddr, step.key)
		if code != 0 || !strings.Contains(out, step.op+": 1 agent, 1 answered, 0 failed") {
			t.Fatalf("keyring %s: exit %d:\n%s", step.op, code, out)
		}
		until(step.op, step.done)
		// The intruder tries to follow: it asks every member for its keys
		// and takes what it is given.
		if n := stealKeys(t, in, ring, []string{"node-1", gossip.TaskMemberName("kv", "kv-0")}); n > 0 {
			t.Errorf("after %s the intruder took %d keys from gossip answers", step.op, n)
		}
	}
	// The node no longer counts the intruder alive (keyring list counts
	// only live members: 4 of 4 above), and the intruder cannot come back.
	if n, err := in.Join([]string{tg.node.gossipAddr}, true); err == nil {
		t.Fatalf("the intruder rejoined with the old key (%d contacted)", n)
	}
	tg.node.waitLine(10*time.Second, "refused gossip that no installed key opens")
	if got := tg.stored(); !proto.Equal(got, tg.before) {
		t.Errorf("the stored assignment changed:\nbefore %v\nafter  %v", tg.before, got)
	}
	if got := tg.clerk.Assignment(); got.Generation != tg.before.GetGeneration() {
		t.Errorf("routing changed: the Clerk holds generation %d, the store %d", got.Generation, tg.before.GetGeneration())
	}
}
