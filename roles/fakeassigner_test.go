package roles

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/tlsconfig"
)

// winningAssignerName returns a gossip name that the preference hash puts ahead
// of real for job, as an attacker would choose it.
func winningAssignerName(job, real string) string {
	pref := lease.DefaultPreference()
	for i := 0; ; i++ {
		name := fmt.Sprintf("assigner-%d", i)
		if pref.Choose(job, []string{real, name}, nil, nil, "") == name {
			return name
		}
	}
}

// joinFakeAssigner joins gossip as name, holding the gossip key keys but no
// certificate, claiming to be an Assigner at an address where nothing
// answers.
func joinFakeAssigner(t *testing.T, name string, keys [][]byte, join string) *gossip.Node {
	t.Helper()
	return joinFakeMember(t, name, keys, join, gossip.Peer{Roles: []gossip.Role{gossip.RoleAssigner}, RPCAddr: "127.0.0.1:1"})
}

// tlsTaskCluster starts a TLS agent a1 with gossip key k1 and a TLS task kv/t0
// holding the same key, logging to log (nil: the test's logger), and waits
// until the task is registered and assigned.
func tlsTaskCluster(t *testing.T, k1 []byte, log *slog.Logger) (*running, *slicelet.Slicelet, string, *testPKI) {
	pki := newTestPKI(t)
	dir := t.TempDir()
	cfg := pki.agentConfig(t, "a1")
	cfg.DataDir = dir
	cfg.Gossip.Keys = [][]byte{k1}
	cfg.Gossip.KeyringFile = filepath.Join(dir, "gossip-keyring.json")
	node := startAgent(t, cfg)
	taskFile := filepath.Join(t.TempDir(), "task-keyring.json")
	sl := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "t0", LoadWindow: 100 * time.Millisecond, Logger: log,
		TLS:    pki.source("task-kv-t0", identity.ID{Role: identity.Task, Job: "kv", Task: "t0"}),
		Gossip: gossip.Config{Keys: [][]byte{k1}, KeyringFile: taskFile}})
	seesTask(t, node, "kv", "t0")
	select {
	case <-sl.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("task not ready")
	}
	return node, sl, taskFile, pki
}

func keyringClient(t *testing.T, node *running, pki *testPKI) slicerv1connect.KeyringServiceClient {
	admin := pki.source("admin-ops", identity.ID{Role: identity.Admin, Name: "ops"})
	hc := api.NewHTTPClient(admin.ClientConfig(tlsconfig.WantAgent()))
	t.Cleanup(hc.CloseIdleConnections)
	return slicerv1connect.NewKeyringServiceClient(hc, api.URL(node.RPCAddr(), true))
}

// A holder of the gossip key, with no certificate, who joins gossip as an
// "Assigner" under a name that wins the job's preference hash does not
// stop a TLS task from taking rotated gossip keys: the Slicelet takes its
// preferred Assigner's registration answer for its keys, and lists an
// Assigner only once a call reached a server whose certificate names it
// (the agents ignore an unverified one too). Preferred, the fake would
// keep the task from the new key, and the rotation meant to shut the key
// holder out would shut the task out instead.
func TestFakeAssignerDoesNotBlockTaskKeyRotation(t *testing.T) {
	for _, withFake := range []bool{false, true} {
		t.Run(fmt.Sprintf("fake=%v", withFake), func(t *testing.T) {
			k1, k2 := gossipKey(t), gossipKey(t)
			e2 := gossip.EncodeKey(k2)
			node, _, taskFile, pki := tlsTaskCluster(t, k1, nil)
			if withFake {
				name := winningAssignerName("kv", "a1")
				joinFakeAssigner(t, name, [][]byte{k1}, node.GossipAddr())
				testwait.For(t, "the fake in gossip", func() bool {
					for _, p := range node.rawPeers() {
						if p.Name == name && p.Status == gossip.StatusAlive {
							return true
						}
					}
					return false
				})
				for _, p := range node.Peers() {
					if p.Name == name {
						t.Fatalf("the agent believes the fake: %+v", p)
					}
				}
				time.Sleep(2 * time.Second) // gossip reaches the task
			}
			client := keyringClient(t, node, pki)
			ctx := context.Background()
			if _, err := client.InstallKey(ctx, connect.NewRequest(&slicerv1.InstallKeyRequest{Key: e2})); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for {
				keys, err := gossip.ReadKeyringFile(taskFile)
				if err == nil && len(keys) == 2 {
					t.Logf("task took the new key")
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("15 s after 'keyring install' the task still holds %d key(s) (%v): it never took the new key, so removing the old one would cut it off from gossip", len(keys), err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// Eight fake "Assigners" of a gossip-key holder without a certificate,
// one under a name that wins the job's preference hash and seven under
// names that sort before the real Assigner's, do not take a TLS task's
// load reports from the real Assigner: a report goes to at most eight
// Assigners, the preferred first and the others by name, of those the
// Slicelet has verified. From its raw gossip view every slot would go to
// a fake, and load balancing of the job would stop.
func TestFakeAssignersDoNotSwallowLoadReports(t *testing.T) {
	k1 := gossipKey(t)
	var logged testlog.Buffer // the task's log: it tells which Assigners it tried
	node, sl, _, _ := tlsTaskCluster(t, k1, slog.New(slog.NewJSONHandler(&logged, nil)))
	testwait.For(t, "load reports to flow", func() bool { return sl.LoadReportsSent() > 3 })
	// Eight names that sort before "a1", one of which the preference hash
	// puts ahead of a1 for job kv.
	var names []string
	for off := 0; ; off++ {
		names = names[:0]
		for i := range 8 {
			names = append(names, fmt.Sprintf("0-fake-%d", off+i))
		}
		if lease.DefaultPreference().Choose("kv", append([]string{"a1"}, names...), nil, nil, "") != "a1" {
			break
		}
	}
	for _, name := range names {
		joinFakeAssigner(t, name, [][]byte{k1}, node.GossipAddr())
	}
	testwait.For(t, "the fakes in gossip", func() bool {
		n := 0
		for _, p := range node.rawPeers() {
			for _, name := range names {
				if p.Name == name && p.Status == gossip.StatusAlive {
					n++
				}
			}
		}
		return n == len(names)
	})
	// The task's gossip has the fakes once it has tried to register
	// with each (and failed: nothing answers at their address).
	testwait.Until(t, 30*time.Second, "the task to try every fake", func() bool {
		out := logged.String()
		for _, name := range names {
			if !strings.Contains(out, `"assigner":"`+name+`"`) {
				return false
			}
		}
		return true
	})
	before := sl.LoadReportsSent()
	time.Sleep(10 * time.Second) // 100 windows of 100 ms: room for the registration attempts with the fakes, slow under -race
	after := sl.LoadReportsSent()
	if after == before {
		t.Fatalf("no load report reached the real Assigner in 10 s (100 windows) once the fakes joined: reports sent stayed at %d", after)
	}
	t.Logf("load reports accepted in 10 s: %d", after-before)
}

// With --metrics-addr equal to --ui-addr the UI's port also answers GET
// /metrics, behind the same Host check as the UI (DNS rebinding): a web
// page an operator opens must not rebind its name to 127.0.0.1 and read
// every job's and task's name, load and slice counts from the scrape.
func TestUIPortMetricsHostCheck(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.UIAddr = "127.0.0.1:0"
	reg := metrics.NewRegistry()
	cfg.Registerer, cfg.UIMetrics = reg, metrics.Handler(reg, nil)
	node := startAgent(t, cfg)
	taskMember(t, "kv", "kv-0", node.GossipAddr())
	seesTask(t, node, "kv", "kv-0")
	watchJob(t, node.RPCAddr(), "kv", false).until(t, "an assignment to kv-0", hasTasks("kv-0"))
	get := func(path, host string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+node.UIAddr()+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/ui/", "attacker.example"); code == 200 {
		t.Fatalf("the UI page answered Host attacker.example")
	}
	code, body := get("/metrics", "attacker.example")
	if code == 200 {
		var leak []string
		for _, l := range strings.Split(body, "\n") {
			if strings.Contains(l, `task="kv-0"`) && len(leak) < 3 {
				leak = append(leak, l)
			}
		}
		t.Errorf("GET /metrics on the UI port with Host attacker.example = %d (the UI itself refuses that Host); it serves e.g.\n%s", code, strings.Join(leak, "\n"))
	}
}

// logLine reports whether a line of log holds each of parts.
func logLine(log string, parts ...string) bool {
	for l := range strings.SplitSeq(log, "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return true
		}
	}
	return false
}

// A holder of the gossip key without a certificate who rejoins gossip
// under the name of an Assigner that has stopped, advertising the roles
// and the RPC address that Assigner's certificate was verified at, is
// not believed for that earlier verification: the member at its gossip
// address is another one, and nothing at the address names it now.
// Neither the agents list it (nobody defers to it or pulls from it) nor
// does a task list it among its Assigners, from which it picks its
// preferred one (whose answer gives it the gossip keys of a rotation) and
// those its load reports go to.
func TestFakeUnderAStoppedAssignersNameIsNotBelieved(t *testing.T) {
	k1 := gossipKey(t)
	pki := newTestPKI(t)
	var logged testlog.Buffer // the task's log: it tells which Assigners it registered with and reported to
	var a1Log testlog.Buffer  // a1's: it tells which members it could not verify
	a2Name := winningAssignerName("kv", "a1")
	var agents []*running
	for _, name := range []string{"a1", a2Name} {
		cfg := pki.agentConfig(t, name)
		cfg.Gossip.Keys = [][]byte{k1}
		if len(agents) > 0 {
			cfg.Gossip.Join = []string{agents[0].GossipAddr()}
		} else {
			cfg.Logger = slog.New(slog.NewJSONHandler(&a1Log, nil))
		}
		agents = append(agents, startAgent(t, cfg))
	}
	a1, a2 := agents[0], agents[1]
	testwait.For(t, "a1 to verify "+a2Name, seesAlive(a1, a2Name))
	a2Roles, a2RPC := a2.cfg.Roles, a2.RPCAddr()
	taskFile := filepath.Join(t.TempDir(), "task-keyring.json")
	sl := runSlicelet(t, a1, slicelet.Config{Job: "kv", Task: "t0", LoadWindow: 100 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})),
		TLS:    pki.source("task-kv-t0", identity.ID{Role: identity.Task, Job: "kv", Task: "t0"}),
		Gossip: gossip.Config{Keys: [][]byte{k1}, KeyringFile: taskFile}})
	testwait.For(t, "the task to register with "+a2Name, func() bool {
		return logLine(logged.String(), `"msg":"slicelet: registered with assigner"`, `"assigner":"`+a2Name+`"`)
	})

	a2.stop(t)
	testwait.For(t, a2Name+" gone from a1's gossip", func() bool {
		for _, p := range a1.rawPeers() {
			if p.Name == a2Name && p.Status == gossip.StatusAlive {
				return false
			}
		}
		return true
	})
	// The fake joins the task's gossip directly, so that the task has it
	// when the join returns; it tries to register with it next.
	from, a1From := logged.Len(), a1Log.Len()
	cfg := gossip.TestConfig(a2Name)
	cfg.Keys = [][]byte{k1}
	cfg.Self = gossip.Peer{Roles: a2Roles, RPCAddr: a2RPC}
	fake, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Shutdown() })
	if _, err := fake.Join([]string{sl.GossipAddr(), a1.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the task to try the fake", func() bool {
		return strings.Contains(logged.String()[from:], `"assigner":"`+a2Name+`"`)
	})

	testwait.For(t, "a1 to judge the fake", func() bool {
		return logLine(a1Log.String()[a1From:], `"msg":"ignoring a gossip member whose certificate does not back its claims"`, `"member":"`+a2Name+`"`) ||
			seesAlive(a1, a2Name)()
	})
	if seesAlive(a1, a2Name)() {
		t.Errorf("a1 lists the fake %s (gossip %s, rpc %s) as a live agent: the verification of the stopped %s stood for it",
			a2Name, fake.GossipAddr(), a2RPC, a2Name)
	}

	// The task's view of the Assigners is where its preferred one, whose
	// answer gives it its gossip keys, and its load reports' Assigners
	// are chosen from: its next load report goes to a1 alone.
	reported := `"msg":"slicelet: load reported"`
	from = logged.Len()
	testwait.For(t, "the task's next load report", func() bool { return logLine(logged.String()[from:], reported) })
	if !logLine(logged.String()[from:], reported, `"assigners":1,`) {
		t.Errorf("the task lists the fake %s among its Assigners: its load report went to more than a1", a2Name)
	}
}
