package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"
	"github.com/hashicorp/serf/serf"

	"github.com/slicerd/slicerd/internal/fanout"
)

// eventBuffer sizes the channel serf delivers events on. Serf blocks its
// own state updates while this channel is full, and its internal forwarder
// only exits when it is not blocked on us, so the buffer is generous (as in
// Consul) and the event loop never does slow work.
const eventBuffer = 2048

// errLeft reports a call that needs a member after this node left.
var errLeft = errors.New("this node has left the cluster; start a new node to rejoin")

// Node is this process's member of the slicerd gossip cluster. Start
// creates it; Shutdown stops it. All methods are safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	serf   *serf.Serf
	events chan serf.Event
	guard  *mergeGuard
	addr   string              // advertised gossip address, fixed at Start
	ring   *memberlist.Keyring // nil without encryption
	keysMu sync.Mutex          // serialises keyring changes and their file writes

	unsealed       atomic.Uint64 // packets and streams no installed key opened
	keyringQueries atomic.Uint64 // serf keyring queries received from gossip
	unsealedLog    logEvery
	keyringLog     logEvery

	changes  fanout.Signal // Changes subscriptions
	version  atomic.Uint64 // member events handled; see Version
	updateMu sync.Mutex    // serialises UpdateSelf

	mu        sync.Mutex
	settling  bool          // advertised Peer.Settling; see settle
	closed    bool          // Shutdown has begun
	leaveDone chan struct{} // non-nil once Leave started; closed when it ends
	leaveErr  error

	stop         chan struct{} // closed when Shutdown begins
	done         chan struct{} // closed when the event loop has exited
	wg           sync.WaitGroup
	shutdownOnce sync.Once
	shutdownErr  error
}

// Refusals reports how many gossip packets and streams no installed key
// opened, and how many of serf's keyring queries arrived through gossip
// and were not obeyed, since Start.
func (n *Node) Refusals() (unsealed, keyringQueries uint64) {
	return n.unsealed.Load(), n.keyringQueries.Load()
}

// refusedMessage counts and logs (at most once per logEveryPeriod) a
// packet or stream that no installed key opened: a member without the
// key, one left behind by a rotation, or noise on the port.
func (n *Node) refusedMessage(what string, from net.Addr, err error) {
	n.unsealed.Add(1)
	if more, ok := n.unsealedLog.due(); ok {
		n.log.Warn("refused gossip that no installed key opens: a member without the current key, or not a slicerd member",
			"component", "security", "kind", what, "from", addrString(from), "refused_since_last", more, "err", err)
	}
}

// refusedKeyringQuery counts and logs (at most once per logEveryPeriod)
// a keyring query of serf's sent through gossip. Serf found no keyring to
// act on: gossip keys change only through an admin's call to an agent.
func (n *Node) refusedKeyringQuery() {
	n.keyringQueries.Add(1)
	if more, ok := n.keyringLog.due(); ok {
		n.log.Warn("refused a gossip keyring query: gossip keys change only through 'slicerd keyring' on an agent's API; a member holding the gossip key sent it",
			"component", "security", "refused_since_last", more)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// logEveryPeriod spaces the warnings of one kind of refusal.
const logEveryPeriod = 10 * time.Second

// logEvery lets one log line through per logEveryPeriod and counts the
// ones it held back.
type logEvery struct {
	mu      sync.Mutex
	last    time.Time
	skipped uint64
}

// due reports whether a line may be logged now, and how many were held
// back since the last one.
func (l *logEvery) due() (skipped uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < logEveryPeriod {
		l.skipped++
		return 0, false
	}
	skipped, l.skipped, l.last = l.skipped, 0, now
	return skipped, true
}

// LocalKeys returns the keys this node's keyring holds now, the primary
// key first (nil without encryption): after rotations they differ from
// Config.Keys. A member started to replace this one uses them.
func (n *Node) LocalKeys() [][]byte {
	if n.ring == nil {
		return nil
	}
	n.keysMu.Lock()
	defer n.keysMu.Unlock()
	keys := n.ring.GetKeys() // the primary key first
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}

// Start validates cfg, binds the gossip port and starts serf with this
// node as the cluster's only member. It does not join: call Join or
// RetryJoin with cfg.Join.
func Start(cfg Config) (*Node, error) {
	cfg.Self.Settling = cfg.SettleSamples > 0 // the node's to say, not its owner's
	tags, err := cfg.validate()
	if err != nil {
		if cfg.Transport != nil {
			_ = cfg.Transport.Shutdown() // the node owns it, even on failure
		}
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg:      cfg,
		log:      logger.With("node", cfg.NodeName),
		events:   make(chan serf.Event, eventBuffer),
		guard:    &mergeGuard{name: cfg.NodeName},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		settling: cfg.Self.Settling,
	}
	ring, ringFromFile, err := cfg.loadKeyring()
	if err != nil {
		if cfg.Transport != nil {
			_ = cfg.Transport.Shutdown()
		}
		return nil, fmt.Errorf("gossip: start %s: %w", cfg.NodeName, err)
	}
	if ringFromFile {
		// The file holds the cluster's gossip keys, written 0600; a copy
		// others may read gives any local user the key.
		if fi, err := os.Stat(cfg.KeyringFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			n.log.Warn("other users may read the gossip keyring file; chmod 600 it", "file", cfg.KeyringFile, "mode", fi.Mode().Perm().String())
		}
	}
	// Bind before creating serf: serf leaks a goroutine when its Create
	// fails, and a taken port is the failure worth reporting cleanly.
	transport := cfg.Transport
	if transport == nil {
		host, port, _ := splitIPPort("", cfg.BindAddr)
		nt, err := bindNetTransport(host, port, n.log)
		if err != nil {
			return nil, fmt.Errorf("gossip: start %s: bind %s: %w; choose a free port, or port 0 for any", cfg.NodeName, cfg.BindAddr, err)
		}
		transport = nt
	}
	if d := cfg.SendDelay; d > 0 {
		transport = NewDelayTransport(transport, func(string, string) time.Duration { return d })
	}
	if ring != nil {
		// Encryption lives in the transport, not in memberlist's keyring:
		// serf then has no keyring for its keyring queries to list or
		// change (see sealedTransport).
		n.ring = ring
		transport = newSealedTransport(transport, ring, n.refusedMessage)
	}
	sc := cfg.serfConfig(n.log, tags, n.events, n.guard, n.refusedKeyringQuery)
	sc.MemberlistConfig.Transport = transport
	ip, port, err := transport.FinalAdvertiseAddr(sc.MemberlistConfig.AdvertiseAddr, sc.MemberlistConfig.AdvertisePort)
	if err != nil {
		_ = transport.Shutdown()
		return nil, fmt.Errorf("gossip: start %s: no address to advertise: %w; set AdvertiseAddr", cfg.NodeName, err)
	}
	if sc.MemberlistConfig.BindPort == 0 {
		// memberlist uses it as the default port of join addresses.
		sc.MemberlistConfig.BindPort = port
	}
	s, err := serf.Create(sc)
	if err != nil {
		_ = transport.Shutdown() // the node owns the transport, even on failure
		return nil, fmt.Errorf("gossip: start %s on %s: %w", cfg.NodeName, net.JoinHostPort(ip.String(), strconv.Itoa(port)), err)
	}
	n.serf = s
	local := s.Memberlist().LocalNode()
	n.addr = net.JoinHostPort(local.Addr.String(), strconv.Itoa(int(local.Port)))
	n.guard.setSelf(local.Addr, local.Port)
	go n.run()
	if cfg.RejoinFile != "" {
		prev, err := readRejoinFile(cfg.RejoinFile)
		if err != nil {
			n.log.Warn("gossip: ignoring the members recorded before the restart", "file", cfg.RejoinFile, "err", err)
		}
		if len(prev) > 0 {
			n.wg.Go(func() { n.rejoin(prev) })
		}
		n.wg.Go(n.recordMembers)
	}
	if n.settling {
		every := sc.MemberlistConfig.ProbeInterval / 2
		n.wg.Go(func() { n.settle(cfg.SettleSamples, every) })
	}
	if ring != nil {
		n.log.Info("gossip encryption on", "keys", len(ring.GetKeys()), "keyring_file", cfg.KeyringFile)
	}
	if ringFromFile && len(cfg.Keys) > 0 {
		n.log.Warn("gossip key ignored: the keyring file exists and holds the keys installed by the last rotation; delete it to start from the given key",
			"keyring_file", cfg.KeyringFile, "given_key_in_file", slicesContainKey(ring.GetKeys(), cfg.Keys[0]))
	}
	n.log.Info("gossip started", "gossip_addr", n.addr, "roles", cfg.Self.Roles, "encrypted", ring != nil)
	return n, nil
}

// run owns serf's event channel. It only signals subscribers, so serf is
// never blocked on us for long.
func (n *Node) run() {
	defer close(n.done)
	shutdown := n.serf.ShutdownCh()
	for {
		select {
		case e := <-n.events:
			n.handle(e)
		case <-shutdown:
			// Take what is already queued; serf's forwarder can then finish
			// its last send into the emptied buffer and exit.
			for {
				select {
				case e := <-n.events:
					n.handle(e)
				default:
					return
				}
			}
		}
	}
}

func (n *Node) handle(e serf.Event) {
	me, ok := e.(serf.MemberEvent)
	if !ok {
		return // user events and queries are not used
	}
	if n.log.Enabled(context.Background(), slog.LevelDebug) {
		for _, m := range me.Members {
			p, ok := ParseMember(m)
			n.log.Debug("gossip member event", "event", me.Type.String(), "member", m.Name,
				"status", m.Status.String(), "slicerd", ok, "roles", p.Roles, "rpc_addr", p.RPCAddr)
		}
	}
	n.version.Add(1)
	n.changes.Notify()
}

// Version counts the membership events this node has handled: while it
// stays the same, Peers returns what it returned before, but for a change
// whose event is still on its way to the node (which bumps Version once
// it arrives, moments later). A caller may keep what it derived from
// Peers for as long as Version does not move.
func (n *Node) Version() uint64 { return n.version.Load() }

// Changes subscribes to membership changes. The channel (buffer 1) receives
// a coalesced signal after any member joins, leaves, fails, changes its
// tags or is reaped; the receiver then reads Peers. The returned function
// unsubscribes; it is safe to call more than once.
func (n *Node) Changes() (<-chan struct{}, func()) { return n.changes.Subscribe() }

// Peers returns every slicerd member this node knows, itself included, in
// any status, sorted by name. Members that are not slicerd's are left out.
func (n *Node) Peers() []Peer {
	members := n.serf.Members()
	peers := make([]Peer, 0, len(members))
	for _, m := range members {
		if p, ok := ParseMember(m); ok {
			peers = append(peers, p)
		}
	}
	slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return peers
}

// Self returns this node's identity as the cluster sees it.
func (n *Node) Self() Peer {
	p, ok := ParseMember(n.serf.LocalMember())
	if !ok {
		// Unreachable: our own tags were validated before serf took them.
		n.mu.Lock()
		p = n.cfg.Self
		n.mu.Unlock()
		p.Name, p.GossipAddr = n.cfg.NodeName, n.addr
	}
	return p
}

// GossipAddr is the address other members join and probe, with the real
// port when the config asked for port 0.
func (n *Node) GossipAddr() string { return n.addr }

// Done is closed once the node has shut down.
func (n *Node) Done() <-chan struct{} { return n.done }

// Join contacts the given members' gossip addresses once and merges state
// with each that answers. It returns how many answered; the error wraps
// ErrJoin when none did, or ErrNameConflict when a live member at another
// address holds this node's name.
func (n *Node) Join(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, fmt.Errorf("%w: no addresses given; pass the gossip address of at least one running member", ErrJoin)
	}
	for _, a := range addrs {
		if err := validateJoinAddr(a); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrJoin, err)
		}
	}
	if n.isClosed() {
		return 0, fmt.Errorf("gossip: join: %w", ErrClosed)
	}
	if n.serf.State() != serf.SerfAlive {
		return 0, fmt.Errorf("%w: %w", ErrJoin, errLeft)
	}
	before := n.guard.conflicts.Load()
	num, err := n.serf.Join(addrs, true)
	if n.guard.conflicts.Load() != before {
		return num, fmt.Errorf("%w: %q is held by a live member at %s; give this member a unique name, or retry if that is this task's previous run",
			ErrNameConflict, n.cfg.NodeName, n.guard.lastConflict())
	}
	if err != nil {
		if num > 0 {
			// Joined, but serf could not queue its join broadcast; gossip
			// spreads the membership anyway.
			n.log.Warn("gossip join intent not broadcast", "err", err)
			return num, nil
		}
		return 0, fmt.Errorf("%w: could not join any of %v (%s); check that they are running slicerd members' gossip addresses", ErrJoin, addrs, flatten(err))
	}
	return num, nil
}

// RetryJoin calls Join every interval until one succeeds, ctx ends or the
// node shuts down, logging each failure at warn. Cancellation is seen
// between attempts; one attempt can take up to the profile's TCP timeout
// per unreachable address. A name conflict is retried too: it clears when
// the other holder is a previous run of this task that is declared failed.
func (n *Node) RetryJoin(ctx context.Context, addrs []string, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("%w: retry interval %v must be positive", ErrJoin, interval)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastErr error = errors.New("no attempt made")
	for attempt := 0; ; {
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-n.stop:
				return fmt.Errorf("gossip: retry join: %w", ErrClosed)
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			last := strings.TrimPrefix(lastErr.Error(), ErrJoin.Error()+": ")
			return fmt.Errorf("%w: gave up on %v after %d attempts: %w; last error: %s", ErrJoin, addrs, attempt, ctx.Err(), last)
		}
		attempt++
		num, err := n.Join(addrs)
		if err == nil {
			n.log.Info("gossip joined", "contacted", num, "attempts", attempt)
			return nil
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, errLeft) || (!errors.Is(err, ErrJoin) && !errors.Is(err, ErrNameConflict)) {
			return err
		}
		lastErr = err
		n.log.Warn("gossip join failed; retrying", "addrs", addrs, "attempt", attempt, "retry_in", interval, "err", err)
		timer.Reset(interval)
	}
}

// KeepJoined keeps a joined node in touch with the cluster until ctx ends
// or the node shuts down: every interval, if connected(Peers()) is false,
// it joins addrs again. Serf never reconnects to a member that left
// gracefully, so without this a task whose only slicerd node restarted
// (leave, then start on the same address) would never find it again.
func (n *Node) KeepJoined(ctx context.Context, addrs []string, interval time.Duration, connected func([]Peer) bool) error {
	if interval <= 0 {
		return fmt.Errorf("%w: rejoin interval %v must be positive", ErrJoin, interval)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.stop:
			return nil
		case <-ticker.C:
		}
		if connected(n.Peers()) {
			continue
		}
		num, err := n.Join(addrs)
		switch {
		case err != nil:
			n.log.Debug("gossip rejoin failed; retrying", "addrs", addrs, "retry_in", interval, "err", err)
		case !connected(n.Peers()):
			// The join reached only this node (its own address is in the
			// list, as on every node of a shared SLICERD_JOIN) or members
			// that are not servers: nothing was rejoined.
			n.log.Debug("gossip rejoin reached no other server; retrying", "addrs", addrs, "contacted", num, "retry_in", interval)
		default:
			n.log.Info("gossip rejoined after losing every server", "contacted", num)
		}
	}
}

// HasLiveServer reports whether peers include an alive slicerd node
// (assigner, distributor or backup) other than the one named self.
func HasLiveServer(self string, peers []Peer) bool {
	for _, p := range peers {
		if p.Name != self && p.Status == StatusAlive &&
			(p.Has(RoleAssigner) || p.Has(RoleDistributor) || p.Has(RoleBackup)) {
			return true
		}
	}
	return false
}

// UpdateSelf re-advertises this node's identity (what Peer.Tags encodes;
// the name, gossip address and status are not changed). It waits until the update is
// broadcast or the profile's broadcast timeout passes.
func (n *Node) UpdateSelf(p Peer) error {
	n.updateMu.Lock()
	defer n.updateMu.Unlock()
	return n.updateSelfLocked(p)
}

// changeSelf re-advertises this node's identity as change edits it; two
// changes at once both take effect.
func (n *Node) changeSelf(change func(*Peer)) error {
	n.updateMu.Lock()
	defer n.updateMu.Unlock()
	n.mu.Lock()
	p := n.cfg.Self
	n.mu.Unlock()
	change(&p)
	return n.updateSelfLocked(p)
}

// updateSelfLocked is UpdateSelf with updateMu held.
func (n *Node) updateSelfLocked(p Peer) error {
	n.mu.Lock()
	p.Settling = n.settling
	n.mu.Unlock()
	tags, err := p.Tags()
	if err != nil {
		return fmt.Errorf("gossip: update self: %w", err)
	}
	if n.isClosed() {
		return fmt.Errorf("gossip: update self: %w", ErrClosed)
	}
	if n.serf.State() != serf.SerfAlive {
		return fmt.Errorf("gossip: update self: %w", errLeft)
	}
	if err := n.serf.SetTags(tags); err != nil {
		// The new tags are already this node's state; the timeout only
		// says the first broadcast was slow. Gossip and state sync still
		// carry them, so this is not a failed update. memberlist returns
		// the timeout as an unexported fmt.Errorf, with no sentinel or
		// type to test for, so its text is the only way to tell it apart.
		if !strings.Contains(err.Error(), "timeout waiting for update broadcast") {
			return fmt.Errorf("gossip: update self: %w", err)
		}
		n.log.Warn("gossip: tag update not yet broadcast; it will spread with regular gossip", "err", err)
	}
	n.mu.Lock()
	n.cfg.Self = p
	n.mu.Unlock()
	return nil
}

// settle advertises this node's network coordinate as settled once it
// has been updated samples times, reading it every interval (half the
// probe interval: memberlist probes one member per interval, and each
// answer moves the coordinate). It gives up when the node shuts down.
func (n *Node) settle(samples int, every time.Duration) {
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last *coordinate.Coordinate
	for seen := 0; seen < samples; {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		c, err := n.serf.GetCoordinate()
		if err != nil {
			return // coordinates are off: nothing will settle
		}
		if last != nil && !sameCoordinate(c, last) {
			seen++
		}
		last = c
	}
	n.mu.Lock()
	n.settling = false
	n.mu.Unlock()
	if err := n.changeSelf(func(*Peer) {}); err != nil {
		n.log.Debug("network coordinate settled, but not advertised", "err", err)
		return
	}
	n.log.Info("network coordinate settled", "samples", samples, "error", last.Error, "took", time.Since(start).Round(time.Millisecond))
}

// sameCoordinate reports whether a and b are the same coordinate.
func sameCoordinate(a, b *coordinate.Coordinate) bool {
	return slices.Equal(a.Vec, b.Vec) && a.Error == b.Error && a.Adjustment == b.Adjustment && a.Height == b.Height
}

// SetDraining re-advertises this node as draining (a task giving up its
// slices before it stops) or not, keeping the rest of its identity.
func (n *Node) SetDraining(draining bool) error {
	return n.changeSelf(func(p *Peer) { p.Draining = draining })
}

// SetRPCAddr re-advertises this node with a new RPC address, keeping the
// rest of its identity.
func (n *Node) SetRPCAddr(addr string) error {
	return n.changeSelf(func(p *Peer) { p.RPCAddr = addr })
}

// Leave leaves the cluster gracefully: it broadcasts the leave and stays up
// while it spreads, so other members record this node as left (drained)
// rather than failed. It returns when that is done or ctx ends, whichever
// is first; after ctx ends the leave still completes in the background and
// Shutdown waits for it. Calling Leave again waits for the same leave.
func (n *Node) Leave(ctx context.Context) error {
	n.mu.Lock()
	if n.closed && n.leaveDone == nil {
		n.mu.Unlock()
		return fmt.Errorf("gossip: leave: %w", ErrClosed)
	}
	if n.leaveDone == nil {
		n.leaveDone = make(chan struct{})
		n.wg.Add(1)
		go n.leave(n.leaveDone)
	}
	done := n.leaveDone
	n.mu.Unlock()
	select {
	case <-done:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.leaveErr
	case <-ctx.Done():
		return fmt.Errorf("gossip: leave did not finish in time (it continues until Shutdown): %w", ctx.Err())
	}
}

func (n *Node) leave(done chan struct{}) {
	defer n.wg.Done()
	n.log.Info("gossip leaving")
	err := n.serf.Leave()
	if err != nil {
		err = fmt.Errorf("gossip: leave: %w", err)
	}
	n.mu.Lock()
	n.leaveErr = err
	n.mu.Unlock()
	close(done)
	n.changes.Notify()
}

// Shutdown stops gossip without leaving: members that did not see a Leave
// declare this node failed. It waits for a Leave in progress (memberlist
// must not be shut down under it), then for serf and the event loop. It is
// idempotent.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		close(n.stop)
		n.wg.Wait()
		if err := n.serf.Shutdown(); err != nil {
			n.shutdownErr = fmt.Errorf("gossip: shutdown: %w", err)
		}
		<-n.done
		n.changes.Notify()
		n.log.Info("gossip stopped")
	})
	return n.shutdownErr
}

// flatten renders memberlist's multi-errors on one line.
func flatten(err error) string {
	if m, ok := err.(interface{ WrappedErrors() []error }); ok && len(m.WrappedErrors()) > 0 {
		parts := make([]string, 0, len(m.WrappedErrors()))
		for _, e := range m.WrappedErrors() {
			parts = append(parts, e.Error())
		}
		return strings.Join(parts, "; ")
	}
	return err.Error()
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// mergeGuard is serf's merge delegate. Memberlist calls it with the remote
// member list when joining and with each member an alive message announces,
// the latter while holding memberlist's node lock, so it must not call
// into serf or memberlist.
//
// It refuses members without slicerd's schema tag, so a wrong join address
// (another serf cluster on the default port 7946) cannot merge clusters.
// And it notices alive messages that claim this node's name from another
// address: memberlist rejects those as a conflict, and Join reports it.
type mergeGuard struct {
	name      string
	self      atomic.Pointer[net.TCPAddr] // nil until Start knows the bound address
	conflicts atomic.Uint64
	other     atomic.Pointer[string]
}

func (g *mergeGuard) setSelf(ip net.IP, port uint16) {
	g.self.Store(&net.TCPAddr{IP: ip, Port: int(port)})
}

func (g *mergeGuard) lastConflict() string {
	if p := g.other.Load(); p != nil {
		return *p
	}
	return "another address"
}

// NotifyMerge implements serf.MergeDelegate.
func (g *mergeGuard) NotifyMerge(members []*serf.Member) error {
	for _, m := range members {
		if _, ok := m.Tags[tagSchema]; !ok {
			return fmt.Errorf("member %q at %s is not a slicerd member (no %q tag); refusing to merge gossip clusters, check the join addresses",
				m.Name, net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port))), tagSchema)
		}
	}
	// A one-member list is an alive message (or a push/pull from a lone
	// node, which is alive too). Longer lists come from joins and may carry
	// our previous run as dead, which memberlist resolves by refuting.
	if len(members) != 1 {
		return nil
	}
	m := members[0]
	self := g.self.Load()
	if m.Name != g.name || self == nil || m.Status == serf.StatusLeft {
		return nil
	}
	if m.Addr.Equal(self.IP) && int(m.Port) == self.Port {
		return nil
	}
	other := net.JoinHostPort(m.Addr.String(), strconv.Itoa(int(m.Port)))
	g.other.Store(&other)
	g.conflicts.Add(1)
	return nil
}
