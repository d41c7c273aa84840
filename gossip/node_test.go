package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/serf/serf"

	"github.com/slicerd/slicerd/internal/testlog"
	"github.com/slicerd/slicerd/internal/testwait"
)

// waitSignal waits until ch delivers a signal after which cond holds.
func waitSignal(t *testing.T, ch <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(testwait.Scale(testwait.Timeout))
	for {
		select {
		case <-ch:
			if cond() {
				return
			}
		case <-timeout:
			t.Fatalf("timed out after %v waiting for a change signal with %s", testwait.Scale(testwait.Timeout), what)
		}
	}
}

func start(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeName, err)
	}
	t.Cleanup(func() {
		if err := n.Shutdown(); err != nil {
			t.Errorf("Shutdown(%s): %v", cfg.NodeName, err)
		}
	})
	return n
}

func testNode(t *testing.T, name string, self Peer, mutate ...func(*Config)) *Node {
	t.Helper()
	cfg := TestConfig(name)
	cfg.Self = self
	for _, m := range mutate {
		m(&cfg)
	}
	return start(t, cfg)
}

func join(t *testing.T, n *Node, to ...*Node) {
	t.Helper()
	var addrs []string
	for _, m := range to {
		addrs = append(addrs, m.GossipAddr())
	}
	if num, err := n.Join(addrs); err != nil || num != len(addrs) {
		t.Fatalf("Join(%v) = %d, %v", addrs, num, err)
	}
}

func peer(n *Node, name string) (Peer, bool) {
	for _, p := range n.Peers() {
		if p.Name == name {
			return p, true
		}
	}
	return Peer{}, false
}

func hasStatus(n *Node, name string, s Status) func() bool {
	return func() bool {
		p, ok := peer(n, name)
		return ok && p.Status == s
	}
}

// waitAlive waits until n sees every named member alive, and on timeout
// says what n sees instead.
func waitAlive(t *testing.T, n *Node, names ...string) {
	t.Helper()
	if waited, ok := testwait.Poll(t, testwait.Timeout, allAlive(n, names...)); !ok {
		t.Fatalf("timed out after %v waiting for %s to see %v alive; it sees %+v", waited.Round(time.Millisecond), n.Self().Name, names, n.Peers())
	}
}

func allAlive(n *Node, names ...string) func() bool {
	return func() bool {
		for _, name := range names {
			if !hasStatus(n, name, StatusAlive)() {
				return false
			}
		}
		return true
	}
}

var (
	selfAssigner = Peer{Roles: []Role{RoleAssigner, RoleDistributor}, RPCAddr: "127.0.0.1:7070"}
	selfBackup   = Peer{Roles: []Role{RoleBackup}, RPCAddr: "127.0.0.1:7071"}
	selfTask     = Peer{Roles: []Role{RoleTask}, Job: "kv", Task: "kv-0", RPCAddr: "127.0.0.1:9000"}
)

func TestThreeNodesSeeEachOther(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfBackup)
	c := testNode(t, "c", selfTask)
	for _, n := range []*Node{a, b, c} {
		host, port, err := net.SplitHostPort(n.GossipAddr())
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("GossipAddr() = %q, want 127.0.0.1 with a real port", n.GossipAddr())
		}
		if n.Self().GossipAddr != n.GossipAddr() || n.Self().Status != StatusAlive {
			t.Fatalf("Self() = %+v, GossipAddr() = %q", n.Self(), n.GossipAddr())
		}
	}
	join(t, b, a)
	join(t, c, a)

	want := map[string]Peer{
		"a": {Name: "a", Roles: selfAssigner.Roles, RPCAddr: selfAssigner.RPCAddr, GossipAddr: a.GossipAddr(), Status: StatusAlive},
		"b": {Name: "b", Roles: selfBackup.Roles, RPCAddr: selfBackup.RPCAddr, GossipAddr: b.GossipAddr(), Status: StatusAlive},
		"c": {Name: "c", Roles: selfTask.Roles, Job: "kv", Task: "kv-0", RPCAddr: selfTask.RPCAddr, GossipAddr: c.GossipAddr(), Status: StatusAlive},
	}
	for _, n := range []*Node{a, b, c} {
		waitAlive(t, n, "a", "b", "c")
		peers := n.Peers()
		if !slices.IsSortedFunc(peers, func(x, y Peer) int { return cmpString(x.Name, y.Name) }) {
			t.Errorf("Peers() not sorted: %v", peers)
		}
		for _, p := range peers {
			if !peersEqual(p, want[p.Name]) {
				t.Errorf("%s sees %+v, want %+v", n.Self().Name, p, want[p.Name])
			}
		}
	}
	if p, _ := peer(a, "c"); !p.Has(RoleTask) || p.Has(RoleAssigner) {
		t.Errorf("Has: %+v", p)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestShutdownWithoutLeaveIsFailed(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfBackup)
	c := testNode(t, "c", selfTask)
	join(t, b, a)
	join(t, c, a)
	testwait.For(t, "a and b to see c", func() bool { return allAlive(a, "b", "c")() && allAlive(b, "a", "c")() })

	changes, unsubscribe := a.Changes()
	defer unsubscribe()
	// A SIGKILLed task never leaves; to the others it stops answering.
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, changes, "c failed at a", hasStatus(a, "c", StatusFailed))
	testwait.For(t, "b to see c failed", hasStatus(b, "c", StatusFailed))
	if !allAlive(a, "a", "b")() {
		t.Errorf("a's view after c failed: %+v", a.Peers())
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done() not closed after Shutdown")
	}
}

func TestLeaveIsLeft(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfBackup)
	c := testNode(t, "c", selfTask)
	join(t, b, a)
	join(t, c, b)
	testwait.For(t, "a and b to see c", func() bool { return allAlive(a, "b", "c")() && allAlive(b, "a", "c")() })

	changes, unsubscribe := b.Changes()
	defer unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Scale(testwait.Timeout))
	defer cancel()
	if err := c.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if got := c.Self().Status; got != StatusLeft {
		t.Errorf("c.Self().Status = %v after Leave", got)
	}
	waitSignal(t, changes, "c left at b", hasStatus(b, "c", StatusLeft))
	testwait.For(t, "a to see c left", hasStatus(a, "c", StatusLeft))
	if err := c.Shutdown(); err != nil {
		t.Fatalf("Shutdown after Leave: %v", err)
	}
	if err := c.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	// A left member stays left, never failed, once it stops.
	for range 20 {
		if p, _ := peer(a, "c"); p.Status != StatusLeft {
			t.Fatalf("a sees c as %v after c shut down", p.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Leave(ctx); err != nil {
		t.Errorf("Leave after Leave and Shutdown: %v", err)
	}
}

func TestLeftNodeRefusesJoinAndUpdate(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfBackup)
	join(t, b, a)
	if err := b.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join([]string{a.GossipAddr()}); !errors.Is(err, ErrJoin) {
		t.Errorf("Join after Leave = %v", err)
	}
	if err := b.RetryJoin(context.Background(), []string{a.GossipAddr()}, time.Millisecond); !errors.Is(err, ErrJoin) {
		t.Errorf("RetryJoin after Leave = %v", err)
	}
	if err := b.SetRPCAddr("127.0.0.1:1"); err == nil {
		t.Error("SetRPCAddr after Leave succeeded")
	}
}

func TestClosedNode(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfBackup)
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := a.Leave(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Shutdown: %v", err)
	}
	if _, err := a.Join([]string{b.GossipAddr()}); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after Shutdown: %v", err)
	}
	if err := a.RetryJoin(context.Background(), []string{b.GossipAddr()}, time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Errorf("RetryJoin after Shutdown: %v", err)
	}
	if err := a.SetRPCAddr("127.0.0.1:1"); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRPCAddr after Shutdown: %v", err)
	}
}

func TestLeaveBoundedByContext(t *testing.T) {
	a := testNode(t, "a", selfAssigner, func(c *Config) {
		c.ProbeInterval = 500 * time.Millisecond // a leave then stays up for 500 ms
	})
	b := testNode(t, "b", selfBackup)
	join(t, b, a)
	waitAlive(t, a, "b")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Leave(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Leave with a cancelled context: %v", err)
	}
	// Shutdown waits for the leave still in progress.
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "b to see a left", hasStatus(b, "a", StatusLeft))
}

func TestChangesSignalsEveryKind(t *testing.T) {
	a := testNode(t, "a", selfAssigner, func(c *Config) {
		c.ReconnectTimeout = time.Millisecond
		c.TombstoneTimeout = time.Millisecond
	})
	changes, unsubscribe := a.Changes()
	defer unsubscribe()

	before := a.Version()
	b := testNode(t, "b", selfTask)
	join(t, b, a)
	waitSignal(t, changes, "join", allAlive(a, "b"))
	testwait.For(t, "Version to count the join", func() bool { return a.Version() > before })

	if err := b.SetRPCAddr("127.0.0.1:9999"); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, changes, "update", func() bool { p, _ := peer(a, "b"); return p.RPCAddr == "127.0.0.1:9999" })

	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// The failure and the reap can land in one coalesced signal; either way
	// the member must end up gone.
	waitSignal(t, changes, "fail then reap", func() bool { _, ok := peer(a, "b"); return !ok })

	c := testNode(t, "c", selfBackup)
	join(t, c, a)
	waitSignal(t, changes, "second join", allAlive(a, "c"))
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Scale(testwait.Timeout))
	defer cancel()
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, changes, "leave then reap", func() bool { _, ok := peer(a, "c"); return !ok })

	// After unsubscribing, the channel gets nothing more.
	unsubscribe()
	unsubscribe()
	for len(changes) > 0 {
		<-changes
	}
	d := testNode(t, "d", selfBackup)
	join(t, d, a)
	waitAlive(t, a, "d")
	if len(changes) != 0 {
		t.Error("signal after unsubscribe")
	}
}

func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	_, unsubscribeIdle := a.Changes() // never read
	defer unsubscribeIdle()
	for i := range 4 {
		n := testNode(t, fmt.Sprintf("n%d", i), selfBackup)
		join(t, n, a)
	}
	waitAlive(t, a, "n0", "n1", "n2", "n3")
	changes, unsubscribe := a.Changes()
	defer unsubscribe()
	n := testNode(t, "n4", selfBackup)
	join(t, n, a)
	waitSignal(t, changes, "a later join", allAlive(a, "n4"))
}

func TestUpdateSelfPropagates(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", Peer{Roles: []Role{RoleTask}, Job: "kv", Task: "kv-1"}) // not serving yet
	join(t, b, a)
	waitAlive(t, a, "b")
	if p, _ := peer(a, "b"); p.RPCAddr != "" {
		t.Fatalf("RPCAddr before serving = %q", p.RPCAddr)
	}
	if err := b.SetRPCAddr("127.0.0.1:9001"); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a to see b's RPC address", func() bool { p, _ := peer(a, "b"); return p.RPCAddr == "127.0.0.1:9001" })

	next := Peer{Roles: []Role{RoleTask, RoleBackup}, Job: "kv", Task: "kv-1", RPCAddr: "127.0.0.1:9002"}
	if err := b.UpdateSelf(next); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a to see b's new roles", func() bool {
		p, _ := peer(a, "b")
		return slices.Equal(p.Roles, []Role{RoleBackup, RoleTask}) && p.RPCAddr == "127.0.0.1:9002"
	})

	for _, bad := range []Peer{{Roles: []Role{"worker"}}, {Roles: []Role{RoleTask}, Job: "kv"}} {
		if err := b.UpdateSelf(bad); !errors.Is(err, ErrInvalidPeer) {
			t.Errorf("UpdateSelf(%+v) = %v, want ErrInvalidPeer", bad, err)
		}
	}
	if err := b.SetRPCAddr("not-an-address"); !errors.Is(err, ErrInvalidPeer) {
		t.Errorf("SetRPCAddr(bad) = %v", err)
	}
	if p := b.Self(); p.RPCAddr != "127.0.0.1:9002" || !p.Has(RoleBackup) {
		t.Errorf("rejected update changed Self: %+v", p)
	}
}

func TestStartRejectsInvalidConfig(t *testing.T) {
	valid := func() Config { c := TestConfig("x"); c.Self = selfBackup; return c }
	for name, mutate := range map[string]func(*Config){
		"empty name":          func(c *Config) { c.NodeName = "" },
		"name with space":     func(c *Config) { c.NodeName = "a b" },
		"bind without port":   func(c *Config) { c.BindAddr = "127.0.0.1" },
		"bind host name":      func(c *Config) { c.BindAddr = "localhost:0" },
		"bind empty host":     func(c *Config) { c.BindAddr = ":7946" },
		"bind bad port":       func(c *Config) { c.BindAddr = "127.0.0.1:70000" },
		"advertise port zero": func(c *Config) { c.AdvertiseAddr = "10.0.0.1:0" },
		"advertise host name": func(c *Config) { c.AdvertiseAddr = "example.com:7946" },
		"bad join address":    func(c *Config) { c.Join = []string{"127.0.0.1"} },
		"unknown profile":     func(c *Config) { c.Profile = "wan" },
		"negative timer":      func(c *Config) { c.ProbeInterval = -time.Second },
		"negative push-pull":  func(c *Config) { c.PushPullInterval = -time.Second },
		"negative suspicion":  func(c *Config) { c.SuspicionMult = -1 },
		"negative settle":     func(c *Config) { c.SettleSamples = -1 },
		"no roles":            func(c *Config) { c.Self = Peer{} },
		"unknown role":        func(c *Config) { c.Self.Roles = []Role{"worker"} },
		"task without job":    func(c *Config) { c.Self = Peer{Roles: []Role{RoleTask}, Task: "t"} },
		"bad rpc address":     func(c *Config) { c.Self.RPCAddr = "nope" },
	} {
		cfg := valid()
		mutate(&cfg)
		n, err := Start(cfg)
		if err == nil {
			n.Shutdown()
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Start error = %v, want ErrConfig", name, err)
		}
	}
}

func TestStartBindFailure(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	cfg := TestConfig("b")
	cfg.Self = selfBackup
	cfg.BindAddr = a.GossipAddr() // taken
	if n, err := Start(cfg); err == nil {
		n.Shutdown()
		t.Fatal("Start on a port in use succeeded")
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.BindAddr != "127.0.0.1:7946" || c.Profile != ProfileLAN {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	c.NodeName, c.Self = "n", selfBackup
	if _, err := c.validate(); err != nil {
		t.Errorf("DefaultConfig with a name and roles does not validate: %v", err)
	}
	sc := c.serfConfig(slog.New(slog.DiscardHandler), nil, nil, &mergeGuard{}, nil)
	if sc.MemberlistConfig.ProbeInterval != 400*time.Millisecond || sc.MemberlistConfig.ProbeTimeout != 200*time.Millisecond ||
		sc.MemberlistConfig.SuspicionMult != 3 || sc.MemberlistConfig.BindPort != 7946 ||
		sc.EnableNameConflictResolution || sc.SnapshotPath != "" || sc.DisableCoordinates || sc.ReconnectInterval != DefaultReconnectInterval {
		t.Errorf("lan serf config: %+v / %+v", sc, sc.MemberlistConfig)
	}
	tc := TestConfig("t")
	tc.Self = selfBackup
	sc = tc.serfConfig(slog.New(slog.DiscardHandler), nil, nil, &mergeGuard{}, nil)
	if sc.MemberlistConfig.ProbeInterval != 150*time.Millisecond || sc.MemberlistConfig.TCPTimeout != time.Second ||
		sc.MemberlistConfig.SuspicionMult != 2 || sc.LeavePropagateDelay != 150*time.Millisecond {
		t.Errorf("test serf config: %+v / %+v", sc, sc.MemberlistConfig)
	}
}

func TestJoinErrors(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	if _, err := a.Join(nil); !errors.Is(err, ErrJoin) {
		t.Errorf("Join(nil) = %v", err)
	}
	if _, err := a.Join([]string{"no-port"}); !errors.Is(err, ErrJoin) {
		t.Errorf("Join(no port) = %v", err)
	}
	if num, err := a.Join([]string{freeAddr(t)}); !errors.Is(err, ErrJoin) || num != 0 {
		t.Errorf("Join(nobody) = %d, %v", num, err)
	}
}

// freeAddr returns a loopback address with a port nobody listens on at the
// moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRetryJoinWaitsForTarget(t *testing.T) {
	rec := &recorder{level: slog.LevelWarn}
	a := testNode(t, "a", selfAssigner, func(c *Config) { c.Logger = slog.New(rec) })
	target := freeAddr(t)

	ctx, cancel := context.WithTimeout(context.Background(), testwait.Scale(testwait.Timeout))
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- a.RetryJoin(ctx, []string{target}, 10*time.Millisecond) }()
	testwait.For(t, "a failed join attempt", func() bool { return rec.count(slog.LevelWarn, "gossip join failed; retrying") > 0 })

	b := testNode(t, "b", selfBackup, func(c *Config) { c.BindAddr = target })
	if err := <-result; err != nil {
		t.Fatalf("RetryJoin: %v", err)
	}
	waitAlive(t, b, "a")
}

func TestRetryJoinCancelled(t *testing.T) {
	rec := &recorder{level: slog.LevelWarn}
	a := testNode(t, "a", selfAssigner, func(c *Config) { c.Logger = slog.New(rec) })
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- a.RetryJoin(ctx, []string{freeAddr(t)}, 10*time.Millisecond) }()
	testwait.For(t, "two failed attempts", func() bool { return rec.count(slog.LevelWarn, "gossip join failed; retrying") >= 2 })
	cancel()
	err := <-result
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrJoin) {
		t.Fatalf("RetryJoin after cancel = %v, want context.Canceled and ErrJoin", err)
	}
	if err := a.RetryJoin(ctx, []string{"127.0.0.1:1"}, time.Millisecond); !errors.Is(err, context.Canceled) {
		t.Errorf("RetryJoin with a done context = %v", err)
	}
	if err := a.RetryJoin(context.Background(), []string{"127.0.0.1:1"}, 0); !errors.Is(err, ErrJoin) {
		t.Errorf("RetryJoin with zero interval = %v", err)
	}
}

func TestRetryJoinStopsOnShutdown(t *testing.T) {
	rec := &recorder{level: slog.LevelWarn}
	a := testNode(t, "a", selfAssigner, func(c *Config) { c.Logger = slog.New(rec) })
	result := make(chan error, 1)
	go func() { result <- a.RetryJoin(context.Background(), []string{freeAddr(t)}, 10*time.Millisecond) }()
	testwait.For(t, "a failed attempt", func() bool { return rec.count(slog.LevelWarn, "gossip join failed; retrying") > 0 })
	a.Shutdown()
	if err := <-result; !errors.Is(err, ErrClosed) {
		t.Fatalf("RetryJoin after Shutdown = %v", err)
	}
}

func TestNameConflict(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfBackup)
	join(t, b, a)
	waitAlive(t, a, "b")

	impostor := testNode(t, "b", selfTask)
	_, err := impostor.Join([]string{a.GossipAddr()})
	if !errors.Is(err, ErrNameConflict) {
		t.Fatalf("Join with a taken name = %v, want ErrNameConflict", err)
	}
	// The first holder keeps the name.
	for range 20 {
		if p, _ := peer(a, "b"); p.GossipAddr != b.GossipAddr() || !p.Has(RoleBackup) {
			t.Fatalf("a sees b as %+v after the conflict", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRestartedTaskRejoinsFromNewAddress(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "kv-0", selfTask)
	join(t, b, a)
	waitAlive(t, a, "kv-0")
	old := b.GossipAddr()
	b.Shutdown()
	testwait.For(t, "a to see kv-0 failed", hasStatus(a, "kv-0", StatusFailed))

	b2 := testNode(t, "kv-0", selfTask)
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Scale(testwait.Timeout))
	defer cancel()
	if err := b2.RetryJoin(ctx, []string{a.GossipAddr()}, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a to see kv-0 alive at its new address", func() bool {
		p, ok := peer(a, "kv-0")
		return ok && p.Status == StatusAlive && p.GossipAddr == b2.GossipAddr()
	})
	if old == b2.GossipAddr() {
		t.Logf("the kernel reused port %s; the rejoin was tested without an address change", old)
	}
}

func TestRefusesForeignCluster(t *testing.T) {
	a := testNode(t, "a", selfAssigner)

	// A plain serf agent, such as Consul's, with its own tags.
	sc := serf.DefaultConfig()
	sc.NodeName = "consul-1"
	sc.Tags = map[string]string{"role": "consul"}
	sc.MemberlistConfig.BindAddr = "127.0.0.1"
	sc.MemberlistConfig.BindPort = 0
	sc.MemberlistConfig.LogOutput = discardWriter{}
	sc.LogOutput = discardWriter{}
	sc.DisableCoordinates = true
	foreign, err := serf.Create(sc)
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Shutdown()
	ln := foreign.Memberlist().LocalNode()
	foreignAddr := net.JoinHostPort(ln.Addr.String(), strconv.Itoa(int(ln.Port)))

	if _, err := a.Join([]string{foreignAddr}); !errors.Is(err, ErrJoin) {
		t.Fatalf("joining a foreign cluster = %v, want ErrJoin", err)
	}
	// The foreign agent joining us is not listed either.
	_, _ = foreign.Join([]string{a.GossipAddr()}, true)
	for range 20 {
		if peers := a.Peers(); len(peers) != 1 {
			t.Fatalf("a lists %+v", peers)
		}
		for _, m := range a.serf.Members() {
			if m.Name == "consul-1" && m.Status == serf.StatusAlive {
				t.Fatalf("foreign member merged: %+v", m)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// A task whose only server leaves and comes back on the same address finds
// it again: serf alone never reconnects to a member that left.
func TestKeepJoinedFindsRestartedServer(t *testing.T) {
	addr := freeAddr(t)
	server := testNode(t, "server", selfAssigner, func(c *Config) { c.BindAddr = addr })
	task := testNode(t, "task", selfTask)
	join(t, task, server)
	waitAlive(t, task, "server")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- task.KeepJoined(ctx, []string{addr}, 20*time.Millisecond, func(peers []Peer) bool {
			return HasLiveServer("task", peers)
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("KeepJoined: %v", err)
		}
	}()

	if err := server.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	server.Shutdown()
	testwait.For(t, "task to see the server leave", hasStatus(task, "server", StatusLeft))

	restarted := testNode(t, "server-2", selfAssigner, func(c *Config) { c.BindAddr = addr })
	waitAlive(t, task, "server-2")
	waitAlive(t, restarted, "task")
}

func TestHasLiveServer(t *testing.T) {
	peers := []Peer{
		{Name: "me", Roles: []Role{RoleAssigner}, Status: StatusAlive},
		{Name: "t", Roles: []Role{RoleTask}, Status: StatusAlive},
		{Name: "d", Roles: []Role{RoleDistributor}, Status: StatusFailed},
	}
	if HasLiveServer("me", peers) {
		t.Error("only self and a failed distributor are servers, yet HasLiveServer is true")
	}
	peers[2].Status = StatusAlive
	if !HasLiveServer("me", peers) {
		t.Error("an alive distributor is not seen")
	}
}

// A node started with SettleSamples advertises its network coordinate as
// settling until it has been updated that many times, then as settled,
// once; an update of its identity keeps what the node says, whatever the
// caller passes. A node without SettleSamples never advertises settling.
func TestSettlingUntilCoordinateSettles(t *testing.T) {
	a := testNode(t, "a", selfAssigner)
	b := testNode(t, "b", selfAssigner, func(c *Config) { c.SettleSamples = 5 })
	if a.Self().Settling {
		t.Error("a node without SettleSamples advertises settling")
	}
	if !b.Self().Settling {
		t.Fatal("a node with SettleSamples does not advertise settling at its start")
	}
	// b has probed nobody yet, so it cannot have settled before a hears of it.
	join(t, b, a)
	// a merges b's state on its own side of the join, which may end just
	// after b's: the first it sees of b must say settling.
	var first Peer
	testwait.For(t, "a to see b", func() bool {
		p, ok := peer(a, "b")
		first = p
		return ok
	})
	if !first.Settling {
		t.Fatalf("a first sees b as %+v; want settling", first)
	}
	testwait.For(t, "a to see b settled", func() bool { p, _ := peer(a, "b"); return !p.Settling })
	if b.Self().Settling {
		t.Error("b still advertises settling itself")
	}
	if err := b.UpdateSelf(Peer{Roles: selfAssigner.Roles, RPCAddr: "127.0.0.1:7072", Settling: true}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "a to see b's new address", func() bool { p, _ := peer(a, "b"); return p.RPCAddr == "127.0.0.1:7072" })
	if p, _ := peer(a, "b"); p.Settling {
		t.Error("an update of b's identity made it settling again")
	}
}

// A lone server whose join list holds its own address (every node of a
// shared SLICERD_JOIN does) does not claim, every interval, to have
// rejoined: a join that reached only itself rejoined nothing.
func TestKeepJoinedAloneDoesNotClaimRejoins(t *testing.T) {
	var buf testlog.Buffer
	addr := freeAddr(t)
	n := testNode(t, "n1", selfAssigner, func(c *Config) {
		c.BindAddr = addr
		c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	ctx, cancel := context.WithCancel(context.Background())
	var rounds atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- n.KeepJoined(ctx, []string{addr}, 5*time.Millisecond, func(peers []Peer) bool {
			rounds.Add(1)
			return HasLiveServer("n1", peers)
		})
	}()
	testwait.For(t, "twenty rejoin rounds", func() bool { return rounds.Load() >= 20 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "gossip rejoined") {
		t.Errorf("a lone node claimed to have rejoined:\n%s", buf.String())
	}
}
