package e2e

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/tlsconfig"
)

// forgedAlive is memberlist's alive message (memberlist/net.go), as an
// attacker holding the gossip key writes it.
type forgedAlive struct {
	Incarnation uint32
	Node        string
	Addr        []byte
	Port        uint16
	Meta        []byte
	Vsn         []uint8
}

// forgeAlive sends to addr, over UDP and encrypted with key as memberlist
// encrypts packets (version 1: AES-GCM, a random nonce, no label), an
// alive message for member p at p's own gossip address with the tags of
// p and the given incarnation.
func forgeAlive(t *testing.T, addr string, key []byte, p gossip.Peer, incarnation uint32) {
	t.Helper()
	tags, err := p.Tags()
	if err != nil {
		t.Fatal(err)
	}
	var meta bytes.Buffer
	meta.WriteByte(255) // serf's tag magic byte
	if err := codec.NewEncoder(&meta, &codec.MsgpackHandle{}).Encode(tags); err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(p.GossipAddr)
	if err != nil {
		t.Fatal(err)
	}
	portN, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	msg := bytes.NewBuffer([]byte{4}) // memberlist's aliveMsg
	if err := codec.NewEncoder(msg, &codec.MsgpackHandle{}).Encode(&forgedAlive{
		Incarnation: incarnation, Node: p.Name, Addr: net.ParseIP(host).To4(), Port: uint16(portN), Meta: meta.Bytes(),
		Vsn: []uint8{1, 5, 2, 2, 5, 5},
	}); err != nil {
		t.Fatal(err)
	}
	sendSealed(t, addr, key, msg.Bytes())
}

// forgedDead is memberlist's dead message (memberlist/net.go).
type forgedDead struct {
	Incarnation uint32
	Node        string
	From        string
}

// forgeDead sends to addr, encrypted with key as forgeAlive does, a dead
// message about member node at the given incarnation, as if from member
// from (a name other than node's: memberlist takes a dead message from
// the member itself for a graceful leave).
func forgeDead(t *testing.T, addr string, key []byte, node, from string, incarnation uint32) {
	t.Helper()
	msg := bytes.NewBuffer([]byte{5}) // memberlist's deadMsg
	if err := codec.NewEncoder(msg, &codec.MsgpackHandle{}).Encode(&forgedDead{Incarnation: incarnation, Node: node, From: from}); err != nil {
		t.Fatal(err)
	}
	sendSealed(t, addr, key, msg.Bytes())
}

// sendSealed sends msg to addr over UDP, encrypted with key as memberlist
// encrypts packets (version 1: AES-GCM, a random nonce, no label).
func sendSealed(t *testing.T, addr string, key, msg []byte) {
	t.Helper()
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	packet := make([]byte, 1+gcm.NonceSize())
	packet[0] = 1 // encryption version 1
	if _, err := rand.Read(packet[1:]); err != nil {
		t.Fatal(err)
	}
	packet = gcm.Seal(packet, packet[1:], msg, nil)
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(packet); err != nil {
		t.Fatal(err)
	}
}

// TestAttackForgedDeadTask declares, with the gossip key alone, task kv-1
// dead at the highest incarnation, which the task's refutations (wrapping
// to 0) cannot outbid: every node then ignores the real member, and
// without a defence kv-1 stays out of its job for good. The task takes its
// membership back by moving its gossip member to a new port: kv-1 is in
// the assignment again, at its own serving address, and the move is
// logged.
func TestAttackForgedDeadTask(t *testing.T) {
	// The task learns that it is locked out from a refused load report,
	// then reclaims after 10 s of refused registrations. With the default
	// 5 s load window that lands at about 15 s, which is also when
	// memberlist (local profile) forgets the dead member, after which the
	// task's next refutation would bring it back without the defence; a
	// 1 s window keeps the reclaim, which the test is about, first.
	tg := startTargetWith(t, []string{"-load-window", "1s"})
	key := insiderKeys(t)[0]
	victim := gossip.TaskMemberName("kv", "kv-1")
	var addr string
	for _, task := range tg.clerk.Assignment().Tasks {
		if task.Name == "kv-1" {
			addr = task.Addr
		}
	}
	forged := time.Now()
	for range 5 {
		forgeDead(t, tg.node.gossipAddr, key, victim, gossip.TaskMemberName("kv", "kv-0"), math.MaxUint32)
	}
	has := func(name string) bool {
		return slices.ContainsFunc(tg.clerk.Assignment().Tasks, func(task assign.Task) bool { return task.Name == name })
	}
	testwait.Until(t, 20*time.Second, "the node to drop kv-1 from the assignment", func() bool { return !has("kv-1") })
	dropped := time.Since(forged)
	// 10 s of refused registrations, a new member and its join, and a
	// membership decision.
	took := testwait.Until(t, 40*time.Second, "kv-1 to be back in the assignment", func() bool { return has("kv-1") })
	t.Logf("kv-1 dropped %v after the forged dead message, back %v later", dropped.Round(time.Millisecond), took.Round(time.Millisecond))
	for _, task := range tg.clerk.Assignment().Tasks {
		if task.Name == "kv-1" && task.Addr != addr {
			t.Errorf("kv-1 came back at %s, not at its serving address %s", task.Addr, addr)
		}
	}
	tg.tasks["kv-1"].waitLine(10*time.Second, "moved the member to a new gossip address")
}

// spyOn joins gossip as an attacker holding the gossip key (its member
// stops with the test) and returns it with task's gossip state as it sees
// it: its gossip address and tags.
func spyOn(t *testing.T, tg *target, task string) (*gossip.Node, gossip.Peer) {
	t.Helper()
	cfg := gossip.TestConfig(gossip.TaskMemberName("kv", "spy"))
	cfg.Keys = insiderKeys(t)
	cfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "kv", Task: "spy", RPCAddr: "127.0.0.1:1"}
	spy, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spy.Shutdown() })
	if _, err := spy.Join([]string{tg.node.gossipAddr}); err != nil {
		t.Fatal(err)
	}
	var victim gossip.Peer
	testwait.Until(t, 20*time.Second, "the attacker to see "+task+" in gossip", func() bool {
		for _, p := range spy.Peers() {
			if p.Job == "kv" && p.Task == task && p.Status == gossip.StatusAlive {
				victim = p
				return true
			}
		}
		return false
	})
	return spy, victim
}

// TestAttackForgedTaskAddress forges, with the gossip key alone, task
// kv-1's gossip state: an alive message from its own gossip address, at
// the highest incarnation (which the real task's refutations, wrapping
// to 0, cannot outbid), advertising the attacker's listener as its
// serving address. slicerd keeps routing kv-1's keys to the address kv-1
// registered with its certificate: no connection reaches the attacker,
// the stored assignment and the Clerk's routing stay as they were, and
// the forgery is logged.
func TestAttackForgedTaskAddress(t *testing.T) {
	tg := startTarget(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var reached atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			c.Close()
		}
	}()

	spy, victim := spyOn(t, tg, "kv-1")
	registered := victim.RPCAddr
	forged := victim
	forged.RPCAddr = ln.Addr().String()
	for range 5 {
		forgeAlive(t, tg.node.gossipAddr, insiderKeys(t)[0], forged, math.MaxUint32)
	}
	// The node's gossip now holds the forged state (the attack works at
	// the gossip layer) ...
	testwait.Until(t, 10*time.Second, "the forged address to spread in gossip", func() bool {
		for _, p := range spy.Peers() {
			if p.Name == victim.Name && p.RPCAddr == forged.RPCAddr {
				return true
			}
		}
		return false
	})
	// ... and routing ignores it: kv-1 stays at its registered address
	// while the Assigner decides (the legitimate join in contained makes
	// a new generation from the view that saw the forgery).
	tg.contained()
	for _, task := range tg.clerk.Assignment().Tasks {
		if task.Name == "kv-1" && task.Addr != registered {
			t.Errorf("kv-1 is routed to %s, not to its registered address %s", task.Addr, registered)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d connections reached the attacker's listener", n)
	}
	tg.node.waitLine(10*time.Second, "ignoring gossip claims of a registered task member", `"claimed_rpc_addr":"`+forged.RPCAddr+`"`)
}

// TestAttackForgedTaskAttributes forges, with the gossip key alone, task
// kv-1's gossip state to say it is draining and has a hundred times its
// capacity: a drain would move every key off kv-1, and the capacity would
// pile load on it. Assigners take a registered task's attributes from its
// registration, so nothing moves and the forgery is logged.
func TestAttackForgedTaskAttributes(t *testing.T) {
	tg := startTarget(t)
	spy, victim := spyOn(t, tg, "kv-1")
	forged := victim
	forged.Draining, forged.Capacity = true, 100
	for range 5 {
		forgeAlive(t, tg.node.gossipAddr, insiderKeys(t)[0], forged, math.MaxUint32)
	}
	testwait.Until(t, 10*time.Second, "the forged attributes to spread in gossip", func() bool {
		for _, p := range spy.Peers() {
			if p.Name == victim.Name && p.Draining {
				return true
			}
		}
		return false
	})
	// contained checks that no generation was committed since, then lets
	// a task join: the Assigner decides that join on the view with the
	// forgery in it, and kv-1 must keep slices in it.
	tg.contained()
	kept := slices.ContainsFunc(tg.clerk.Assignment().Slices, func(sl assign.Slice) bool { return slices.Contains(sl.Tasks, "kv-1") })
	if !kept {
		t.Error("kv-1 holds no slice after the forgery: the forged draining tag was believed")
	}
	tg.node.waitLine(10*time.Second, "ignoring gossip claims of a registered task member", `"claimed_capacity":100`)
}

// TestAttackFakeAssignerDoesNotSwallowLoad puts a fake Assigner in gossip
// under a name that wins the preference hash for job kv, with a client
// certificate from the cluster's own CA. Tasks send their load reports to
// every Assigner and verify each one's certificate, so the fake gets none
// (its handshake fails) and the real Assigner still gets every window's
// report.
func TestAttackFakeAssignerDoesNotSwallowLoad(t *testing.T) {
	requireSecure(t)
	node := startSlicerd(t, "node-1", "--data-dir", t.TempDir(), "--log-level", "debug")
	var tasks []*kvTask
	for i := range 2 {
		tasks = append(tasks, startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr, "-load-window", "200ms"))
	}
	tg := &target{t: t, node: node}
	name := winningName()
	cert := certFrom(t, issue("client-kv", identity.ID{Role: identity.Client, Job: "kv"}))
	rogue, addr := startRogue(t, &slicerv1.Assignment{Job: "kv", Generation: 1 << 62}, cert)
	joinFake(t, tg, name, addr, gossip.RoleAssigner, gossip.RoleDistributor)
	for _, task := range tasks {
		// The task tried the fake: it is in the task's gossip, and its
		// registration there failed, so the task neither prefers it nor
		// sends it load reports.
		task.waitLine(20*time.Second, "registering with an assigner failed", name)
	}
	// From now on the real Assigner must keep getting every task's reports.
	from := node.lineCount()
	testwait.Until(t, 20*time.Second, "three more load reports from each task at the real assigner", func() bool {
		for _, task := range tasks {
			if node.countSince(from, `"msg":"load report"`, `"task":"`+task.task+`"`) < 3 {
				return false
			}
		}
		return true
	})
	select {
	case c := <-rogue.calls:
		t.Errorf("a slicerd component called the fake assigner (%s)", c)
	default:
	}
}

// lineCount is how many lines p has printed so far.
func (p *proc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// countSince counts the lines printed from index from on that contain
// every one of substrs.
func (p *proc) countSince(from int, substrs ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines[min(from, len(p.lines)):] {
		ok := true
		for _, s := range substrs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// TestAttackConnectFloodFromManyAddresses keeps --max-connections (64)
// full of plain TCP connects from nine source addresses, each up to its
// per-address cap (16), and meanwhile checks that the cluster works: a
// new legitimate task joins and the Clerk gets its generation. The
// connections that never prove a certificate share a quarter of the cap,
// the oldest closed to admit each new one, so the flood churns there
// instead of refusing everyone; the evictions are logged.
func TestAttackConnectFloodFromManyAddresses(t *testing.T) {
	tg := startTarget(t, "--max-connections", "64", "--max-connections-per-ip", "16")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var opened atomic.Int64
	defer func() { cancel(); wg.Wait() }()
	for i := range 9 {
		from := fmt.Sprintf("127.0.0.%d", 2+i)
		for range 16 {
			wg.Go(func() {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
				for ctx.Err() == nil {
					c, err := d.DialContext(ctx, "tcp", tg.node.rpcAddr)
					if err != nil {
						continue
					}
					opened.Add(1)
					stop := context.AfterFunc(ctx, func() { c.Close() })
					_, _ = c.Read(make([]byte, 1)) // hold it until slicerd closes it
					stop()
					c.Close()
				}
			})
		}
	}
	testwait.Until(t, 20*time.Second, "the flood to fill the connection cap", func() bool { return opened.Load() >= 64 })
	tg.contained() // a new task joins and the Clerk follows, during the flood
	tg.node.waitLine(20*time.Second, "refused connections over the limit", `"evicted_unproven":`)
	t.Logf("the flood opened %d connections", opened.Load())
}

// certClient is an HTTP client presenting a certificate of the cluster's
// CA naming ids.
func certClient(t *testing.T, name string, ids ...identity.ID) *http.Client {
	t.Helper()
	src, err := tlsconfig.Load(issue(name, ids...), nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent()))
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// TestAttackLoadOnAnotherTasksKeys reports, with task kv-1's own valid
// certificate, a huge load on kv-0's keys, window after window, to an
// Assigner that balances every 200 ms: the victim would look hot and lose
// keys. Only load on kv-1's own keys counts: no key moves because of it,
// and the reports are logged as load on keys the task does not serve.
func TestAttackLoadOnAnotherTasksKeys(t *testing.T) {
	tg := startTarget(t, "--rebalance-interval", "200ms", "--rebalance-delay", "100ms")
	hc := certClient(t, "task-kv-kv-1", identity.ID{Role: identity.Task, Job: "kv", Task: "kv-1"})
	load := slicerv1connect.NewLoadServiceClient(hc, api.URL(tg.node.rpcAddr, true))
	var victims []*slicerv1.SliceLoad
	for _, s := range tg.before.GetSlices() {
		if slices.Contains(s.GetTasks(), "kv-0") {
			victims = append(victims, &slicerv1.SliceLoad{Start: s.GetStart(), End: s.GetEnd(), Load: 1e12})
		}
	}
	if len(victims) == 0 {
		t.Fatalf("kv-0 holds no slice of %v", tg.before)
	}
	// Longer than the tasks' load window (5 s), so that every task has
	// reported and the Assigner decides on load.
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		_, err := load.ReportLoad(context.Background(), connect.NewRequest(&slicerv1.ReportLoadRequest{
			Job: "kv", Task: "kv-1", Generation: tg.before.GetGeneration(), WindowSeconds: 1, EveryAssigner: true,
			Slices: victims,
		}))
		if err != nil && connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("ReportLoad as kv-1: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the attacker's pace, within the report rate limit
	}
	tg.contained()
	tg.node.waitLine(10*time.Second, "load report on keys the task does not serve", `"task":"kv-1"`)
}

// TestAttackListOtherJobs lists jobs with a task certificate of another
// job and with a client certificate of another job: job kv, its tasks and
// their addresses are not in the answer, as GetJob kv is denied to them.
func TestAttackListOtherJobs(t *testing.T) {
	tg := startTarget(t)
	for _, c := range []struct {
		name string
		id   identity.ID
	}{
		{"task-other-o0", identity.ID{Role: identity.Task, Job: "other", Task: "o0"}},
		{"client-other", identity.ID{Role: identity.Client, Job: "other"}},
	} {
		jobs := slicerv1connect.NewJobServiceClient(certClient(t, c.name, c.id), api.URL(tg.node.rpcAddr, true))
		resp, err := jobs.ListJobs(context.Background(), connect.NewRequest(&slicerv1.ListJobsRequest{}))
		if err != nil {
			t.Fatalf("ListJobs as %s: %v", c.name, err)
		}
		for _, j := range resp.Msg.GetJobs() {
			t.Errorf("ListJobs as %s lists job %s with %d live tasks", c.name, j.GetName(), len(j.GetLiveTasks()))
		}
		if _, err := jobs.GetJob(context.Background(), connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("GetJob kv as %s = %v, want PERMISSION_DENIED", c.name, err)
		}
	}
	tg.contained()
}
