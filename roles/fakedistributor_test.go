package roles

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/subset"
)

// joinFakeMember joins gossip at join as name, holding the gossip keys
// keys but no certificate, advertising self's roles and RPC address.
func joinFakeMember(t *testing.T, name string, keys [][]byte, join string, self gossip.Peer) *gossip.Node {
	t.Helper()
	cfg := gossip.TestConfig(name)
	cfg.Keys = keys
	cfg.Self = self
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	// A join can time out on a machine busy with other tests; it is not
	// what is tested, so it is tried again.
	for attempt := 1; ; attempt++ {
		_, err := n.Join([]string{join})
		if err == nil {
			return n
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("join of fake %s: %v; trying again", name, err)
	}
}

// fakeDistributorAddrs returns the addresses of n servers that hang the
// TLS handshake, placed around real (an address on 127.0.0.1) so that in
// the address order Clerks number Distributors by, the subset of task
// task (of size clerk.DefaultSubsetSize) is all fakes: each fake on
// 127.0.0.1x sorts before real, each on 127.0.0.y (y >= 2) after it.
func fakeDistributorAddrs(t *testing.T, real, task string, n int) []string {
	t.Helper()
	if !strings.HasPrefix(real, "127.0.0.1:") {
		t.Skipf("the agent's RPC address %s is not on 127.0.0.1", real)
	}
	frontend, ok := subset.TaskNumber(task)
	if !ok {
		t.Fatalf("task %q has no number", task)
	}
	pref := subset.Rocksteadier(frontend, n+1, clerk.DefaultSubsetSize)
	before := 0 // how many fakes sort before real: real's index
	for slices.Contains(pref, before) {
		before++
	}
	var addrs []string
	for i := range n {
		host := fmt.Sprintf("127.0.0.%d", 2+i-before)
		if i < before {
			host = fmt.Sprintf("127.0.0.1%d", i)
		}
		addrs = append(addrs, testnet.Hanging(t, host))
	}
	return addrs
}

// Gossip members of a holder of the gossip key without a certificate,
// claiming the Distributor role at addresses that hang the TLS handshake
// and placed so that a task's subset of preferred Distributors is all
// fakes, are never dialled by a TLS task's Clerk: the task streams its
// assignment from the real Distributor from the start. The Clerk's TLS
// check (a certificate naming some Distributor or Backup) keeps it from
// believing a fake, but the task lists a Distributor only once a
// connection at its advertised RPC address reached a server whose
// certificate names it. Else every reconnect and every recheck of a
// fallback stream tries the fakes first, at the handshake timeout each;
// and since a stream that lasted the Clerk's longest backoff counts as
// healthy, and the handshake timeout is as long, the Clerk goes back to
// its first fake after each and the task receives no assignment at all.
func TestFakeDistributorsAreNotTriedByTasks(t *testing.T) {
	for _, fakes := range []int{0, 6} {
		t.Run(fmt.Sprintf("fakes=%d", fakes), func(t *testing.T) {
			k1 := gossipKey(t)
			pki := newTestPKI(t)
			cfg := pki.agentConfig(t, "a1")
			cfg.Gossip.Keys = [][]byte{k1}
			node := startAgent(t, cfg)
			addrs := fakeDistributorAddrs(t, node.RPCAddr(), "t0", fakes)
			var names []string
			for i, addr := range addrs {
				name := fmt.Sprintf("fake-distributor-%d", i)
				names = append(names, name)
				joinFakeMember(t, name, [][]byte{k1}, node.GossipAddr(),
					gossip.Peer{Roles: []gossip.Role{gossip.RoleDistributor}, RPCAddr: addr})
			}
			testwait.For(t, "the fakes in gossip", func() bool {
				n := 0
				for _, p := range node.rawPeers() {
					if slices.Contains(names, p.Name) && p.Status == gossip.StatusAlive {
						n++
					}
				}
				return n == len(names)
			})

			var logged testlog.Buffer // the task's log: it tells which servers its Clerk tried
			began := time.Now()
			sl := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "t0", SubsetSize: clerk.DefaultSubsetSize,
				Logger: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
				TLS:    pki.source("task-kv-t0", identity.ID{Role: identity.Task, Job: "kv", Task: "t0"}),
				Gossip: gossip.Config{Keys: [][]byte{k1}}})
			_, ready := testwait.Poll(t, 90*time.Second, func() bool {
				select {
				case <-sl.Ready():
					return true
				default:
					return false
				}
			})
			if ready {
				t.Logf("%d fake Distributors: first assignment %v after the task started", fakes, time.Since(began).Round(100*time.Millisecond))
			}
			out := logged.String()
			tried := 0
			for _, addr := range addrs {
				if logLine(out, `"msg":"clerk: `, `"addr":"`+addr+`"`) {
					tried++
				}
			}
			if !ready {
				t.Fatalf("no assignment reached the task in 90 s; its Clerk tried %d of %d fake Distributors", tried, fakes)
			}
			if tried > 0 {
				t.Errorf("before its first assignment the task's Clerk tried %d of %d fake Distributors, whose certificates it never saw", tried, fakes)
			}
			if !logLine(out, `"msg":"clerk: streaming assignments"`, `"addr":"`+node.RPCAddr()+`"`) {
				t.Errorf("the task's first assignment did not come from the real Distributor %s", node.RPCAddr())
			}
		})
	}
}

// With fake Distributors of a gossip-key holder in gossip (at addresses
// that hang the TLS handshake and sort before the real ones), a TLS task
// whose Distributor stops moves its stream to the other real Distributor,
// never to a fake, and receives the assignments committed after.
func TestTaskFailsOverPastFakeDistributors(t *testing.T) {
	k1 := gossipKey(t)
	pki := newTestPKI(t)
	var agents []*running
	for _, name := range []string{"a1", "a2"} {
		cfg := pki.agentConfig(t, name)
		cfg.Gossip.Keys = [][]byte{k1}
		if len(agents) > 0 {
			cfg.Gossip.Join = []string{agents[0].GossipAddr()}
		}
		agents = append(agents, startAgent(t, cfg))
	}
	testwait.For(t, "a1 to verify a2", seesAlive(agents[0], "a2"))
	var fakes []string
	for i := range 6 {
		addr := testnet.Hanging(t, fmt.Sprintf("127.0.0.1%d", i))
		fakes = append(fakes, addr)
		joinFakeMember(t, fmt.Sprintf("fake-distributor-%d", i), [][]byte{k1}, agents[0].GossipAddr(),
			gossip.Peer{Roles: []gossip.Role{gossip.RoleDistributor}, RPCAddr: addr})
	}
	testwait.For(t, "the fakes in gossip", func() bool {
		n := 0
		for _, p := range agents[0].rawPeers() {
			if strings.HasPrefix(p.Name, "fake-distributor-") && p.Status == gossip.StatusAlive {
				n++
			}
		}
		return n == len(fakes)
	})

	var logged testlog.Buffer // the task's log: it tells which servers its Clerk tried
	sl := runSlicelet(t, agents[0], slicelet.Config{Job: "kv", Task: "t0", SubsetSize: clerk.DefaultSubsetSize,
		Logger: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
		TLS:    pki.source("task-kv-t0", identity.ID{Role: identity.Task, Job: "kv", Task: "t0"}),
		Gossip: gossip.Config{Keys: [][]byte{k1}}})
	// lastStream returns the real Distributor the task opened its newest
	// stream on, or nil.
	lastStream := func() *running {
		var last *running
		for l := range strings.SplitSeq(logged.String(), "\n") {
			for _, a := range agents {
				if strings.Contains(l, `"msg":"clerk: streaming assignments"`) && strings.Contains(l, `"addr":"`+a.RPCAddr()+`"`) {
					last = a
				}
			}
		}
		return last
	}
	testwait.For(t, "the task to stream from a real Distributor", func() bool { return lastStream() != nil })

	from := lastStream()
	to := agents[0]
	if to == from {
		to = agents[1]
	}
	from.stop(t)
	runSlicelet(t, to, slicelet.Config{Job: "kv", Task: "t1",
		TLS:    pki.source("task-kv-t1", identity.ID{Role: identity.Task, Job: "kv", Task: "t1"}),
		Gossip: gossip.Config{Keys: [][]byte{k1}}})
	testwait.Until(t, 60*time.Second, "t0 to receive an assignment with t1", func() bool {
		a := sl.Assignment()
		return a != nil && slices.ContainsFunc(a.Tasks, func(task assign.Task) bool { return task.Name == "t1" })
	})
	// The assignment with t1 was committed after from stopped: it came
	// over a stream on to.
	if lastStream() != to {
		t.Errorf("after %s stopped the task's newest stream is not on %s", from.RPCAddr(), to.RPCAddr())
	}
	out := logged.String()
	for _, addr := range fakes {
		if logLine(out, `"msg":"clerk: `, `"addr":"`+addr+`"`) {
			t.Errorf("the task's Clerk tried the fake Distributor at %s", addr)
		}
	}
}
