package slicelet

import (
	"crypto/rand"
	"errors"
	"maps"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/tlsconfig"
	"github.com/slicerd/slicerd/tlsconfig/tlstest"
)

// tlsHandoffServer serves st's HandoffService over TLS and HTTP/2 with
// src's certificate, asking for client certificates, as a task with TLS
// serves it, and returns its address.
func tlsHandoffServer(t *testing.T, st *storeTask, src *tlsconfig.Source) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(st.HandoffHandler())
	srv := &http.Server{Handler: mux, TLSConfig: src.ServerConfig()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("handoff server of %s: %v", st.cfg.Task, err)
		}
	}()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// gossipMember starts a gossip member named name that says self, sealed
// with key, joined to join when it is not "", and shut down at the end of
// the test.
func gossipMember(t *testing.T, name string, self gossip.Peer, key []byte, join string) *gossip.Node {
	t.Helper()
	cfg := gossip.TestConfig(name)
	cfg.Self = self
	cfg.Keys = [][]byte{key}
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	if join != "" {
		if _, err := n.Join([]string{join}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestHandoffIgnoresOtherMembersClaimsForATask: a member holding the
// gossip key but no certificate, under a name of its own, that claims to
// be a task of the job (its job and task tags) and says that task serves
// no state handoff, or serves it at another address, does not make the
// task that gains the keys skip the fetch or send it elsewhere: the
// keys arrive with the state of the task that held them. Only the task's
// own member (gossip.TaskMemberName) speaks for its handoff.
func TestHandoffIgnoresOtherMembersClaimsForATask(t *testing.T) {
	for name, claim := range map[string]gossip.Peer{
		"no handoff":      {NoHandoff: true},
		"handoff address": {HandoffAddr: "127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			pki := tlstest.New(t, "ca")
			key := make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				t.Fatal(err)
			}
			state := map[string]string{}
			for _, k := range testKeys(200) {
				state[k] = "v-" + k
			}
			srcs := map[string]*tlsconfig.Source{}
			tasks := map[string]*storeTask{}
			for task, st := range map[string]map[string]string{"a": state, "b": nil} {
				srcs[task] = pki.Source("task-"+task, identity.ID{Role: identity.Task, Job: "j", Task: task})
				tasks[task] = newStoreTask(t, task, st, nil, func(c *Config) { c.TLS = srcs[task] })
			}
			a, b := tasks["a"], tasks["b"]
			addrs := map[string]string{"a": tlsHandoffServer(t, a, srcs["a"]), "b": tlsHandoffServer(t, b, srcs["b"])}

			// b's own member, and a's, each saying what it serves.
			nb := gossipMember(t, gossip.TaskMemberName("j", "b"),
				gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "j", Task: "b", RPCAddr: addrs["b"]}, key, "")
			b.node.Store(nb)
			gossipMember(t, gossip.TaskMemberName("j", "a"),
				gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "j", Task: "a", RPCAddr: addrs["a"]}, key, nb.GossipAddr())
			// The impostor: the gossip key, no certificate.
			self := claim
			self.Roles, self.Job, self.Task, self.RPCAddr = []gossip.Role{gossip.RoleTask}, "j", "a", "127.0.0.1:1"
			gossipMember(t, "impostor", self, key, nb.GossipAddr())
			testwait.For(t, "b's gossip lists a and the impostor alive", func() bool {
				alive := 0
				for _, p := range nb.Peers() {
					if p.Task == "a" && p.Status == gossip.StatusAlive {
						alive++
					}
				}
				return alive == 2
			})

			g5, g6 := allOn(5, "a", addrs), allOn(6, "b", addrs)
			a.install(nil, g5)
			b.install(nil, g5)
			a.install(g5, g6)
			b.install(g5, g6) // the keys move a → b: b fetches their state from a
			var imps []*importRange
			if p := b.handoff.importing.Load(); p != nil {
				imps = *p
			}
			for _, imp := range imps {
				select {
				case <-imp.done:
				case <-time.After(testwait.Scale(10 * time.Second)):
					t.Fatal("b's import from a did not end")
				}
			}
			if got := b.snapshot(); !maps.Equal(got, state) {
				fetches, failed, entries := b.HandoffStats()
				t.Errorf("b holds %d of a's %d keys after the move (%d fetches, %d failed, %d entries): "+
					"a member that is not a's took b's fetch from a away", len(got), len(state), fetches, failed, entries)
			}
		})
	}
}
