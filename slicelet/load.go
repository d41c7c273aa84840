package slicelet

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/lease"
)

// atomicFloat is a float64 that many goroutines add to without a lock.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) add(x float64) {
	for {
		old := f.bits.Load()
		if f.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+x)) {
			return
		}
	}
}

// take returns the value and resets it to zero in one step, so no
// concurrent add is lost between the read and the reset.
func (f *atomicFloat) take() float64 { return math.Float64frombits(f.bits.Swap(0)) }

// loadCell is one slice's accumulator, padded to a cache line so that
// requests for neighbouring slices do not contend.
//
// Besides the slice's total it follows one candidate hot key: keys hash to
// points, so a slice's load is not spread over its range, and a report of
// the total alone would have the Assigner split a hot slice at the middle
// of empty space and move a half that carries nothing. The candidate is
// the first key seen in a window, kept for the next window while it
// carries at least half of the slice's load; its exact load is reported
// as its own one-key entry.
type loadCell struct {
	atomicFloat               // all load on the slice in this window
	hot         atomic.Uint64 // candidate key's slice key + 1; 0 for none yet
	hotLoad     atomicFloat   // load on the candidate key alone
	events      atomic.Uint64 // ReportLoad calls that added to it
	_           [32]byte
}

// add counts cost on slice key h, which lies in the cell's slice.
func (c *loadCell) add(h assign.SliceKey, cost float64) {
	c.atomicFloat.add(cost)
	c.events.Add(1)
	k := uint64(h) + 1
	cur := c.hot.Load()
	if cur == 0 && c.hot.CompareAndSwap(0, k) {
		cur = k
	}
	if cur == k {
		c.hotLoad.add(cost)
	}
}

// drain takes the window's load of slice [start, end) and appends it to
// into: the candidate key as a one-key entry, the rest spread over the
// ranges on either side of it.
func (c *loadCell) drain(start, end assign.SliceKey, into assign.Load) assign.Load {
	// The key's load first: an add between the two takes then lands in
	// the total and maybe the key's next window, never only in the key.
	k := c.hot.Load()
	hl := c.hotLoad.take()
	total := c.take()
	if k != 0 && hl < total/2 {
		c.hot.CompareAndSwap(k, 0) // not the slice's hottest: pick afresh
	}
	if total <= 0 {
		return into
	}
	hl = min(hl, total)
	h := assign.SliceKey(k - 1)
	if k == 0 || hl <= 0 || h < start || h >= end {
		return append(into, assign.LoadEntry{Start: start, End: end, Load: total})
	}
	rest := total - hl
	left, right := float64(h-start), float64(end-h-1)
	if left > 0 && rest > 0 {
		into = append(into, assign.LoadEntry{Start: start, End: h, Load: rest * left / (left + right)})
	}
	if left+right == 0 {
		hl = total // the slice is the one key
	}
	into = append(into, assign.LoadEntry{Start: h, End: h + 1, Load: hl})
	if right > 0 && rest > 0 {
		into = append(into, assign.LoadEntry{Start: h + 1, End: end, Load: rest * right / (left + right)})
	}
	return into
}

// maxPendingEntries bounds the load kept across failed reports. Past it
// the oldest measurements are dropped rather than grow without bound.
const maxPendingEntries = 1 << 16

// pendingDecay scales the load kept from a window whose report failed, so
// that an Assigner that has been unreachable for long gets mostly recent
// load once it answers.
const pendingDecay = 0.5

// loadState is the reporter's side of load accounting: what earlier
// assignments and failed reports left over for the next report.
type loadState struct {
	mu          sync.Mutex
	carry       assign.Load           // owned load of assignments replaced in this window
	carryEvents uint64                // the ReportLoad calls carry sums
	carryWindow float64               // the seconds of measurement carry sums, decayed as it is
	start       time.Time             // when the current window began
	clients     map[string]loadClient // Assigner name → its client
	unowned     atomicFloat           // load on keys the current assignment does not give this task
	rejected    atomic.Uint64
	reportsSent atomic.Uint64
	choices     lease.Choices // the job's preferred Assigner, with hysteresis
	view        membersView
}

// membersView is the membership as a lease.View, read from the gossip node
// once for each of its versions (gossip.Node.Version): every load report
// asks for the job's preferred Assigner and for the others, and reading
// the membership parses every member's tags and sorts them, milliseconds
// in a cluster of thousands.
//
// With TLS (verify set), a member that claims the Assigner role is in the
// view only once a call to it at its advertised address reached a server
// whose certificate names it as that Assigner (verified): anyone holding
// the gossip key can claim the role, under a name that wins the job's
// preference, and the Slicelet takes its preferred Assigner's answer for
// its gossip keys and its leases, and sends its load reports to at most
// maxReportAssigners of them. A verification stands for the member at the
// gossip address the call was made for: gossip gives the name of an
// Assigner that left or failed to whoever joins with it, and a holder of
// the gossip key who does so advertising the Assigner's old RPC address
// is another member, left out until a call to it reaches a server whose
// certificate names it.
type membersView struct {
	mu       sync.Mutex
	node     *gossip.Node
	version  uint64
	view     *lease.View
	verify   bool
	verified map[string]memberAt // Assigner name → where its certificate was found
	vgen     uint64              // bumped when verified changes
	viewVgen uint64              // vgen when view was read
}

// memberAt is where a gossip member is: its RPC and gossip addresses
// (placeOf).
type memberAt struct{ rpc, gossip string }

func placeOf(p gossip.Peer) memberAt { return memberAt{rpc: p.RPCAddr, gossip: p.GossipAddr} }

// verifiedAt records that the certificate at p's RPC address names p as
// an Assigner.
func (m *membersView) verifiedAt(p gossip.Peer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.verified == nil {
		m.verified = map[string]memberAt{}
	}
	if m.verified[p.Name] != placeOf(p) {
		m.verified[p.Name] = placeOf(p)
		m.vgen++
	}
}

// of returns n's membership, read again only when n's version moved (or n
// is not the node read last: a reclaim replaces the node). A member whose
// event has not reached n yet is in a later version, moments later.
func (m *membersView) of(n *gossip.Node) *lease.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := n.Version(); m.view == nil || m.node != n || m.version != v || m.viewVgen != m.vgen {
		peers := n.Peers()
		if m.verify {
			peers = slices.DeleteFunc(peers, func(p gossip.Peer) bool {
				return p.Has(gossip.RoleAssigner) && m.verified[p.Name] != placeOf(p)
			})
		}
		m.node, m.version, m.view, m.viewVgen = n, v, lease.NewView(peers), m.vgen
	}
	return m.view
}

// ReportLoad adds cost units of load (requests, CPU time, bytes: any
// additive metric the job balances on) to key. It neither allocates nor
// locks. Load on keys the current assignment does not give this task is
// counted separately as unowned. A cost that is NaN, infinite, negative or
// above assign.MaxLoad is rejected with an error wrapping
// assign.ErrInvalidLoad and counted in the next report.
func (s *Slicelet) ReportLoad(key []byte, cost float64) error {
	if !(cost >= 0 && cost <= assign.MaxLoad) {
		return s.rejectCost(cost)
	}
	s.addLoad(assign.HashKey(key), cost)
	return nil
}

// ReportLoadString is ReportLoad for a string key.
func (s *Slicelet) ReportLoadString(key string, cost float64) error {
	if !(cost >= 0 && cost <= assign.MaxLoad) {
		return s.rejectCost(cost)
	}
	s.addLoad(assign.HashString(key), cost)
	return nil
}

func (s *Slicelet) rejectCost(cost float64) error {
	s.load.rejected.Add(1)
	if err := assign.ValidateLoadValue(cost); err != nil {
		return fmt.Errorf("slicelet: report load: %w; report a finite cost between 0 and %g", err, float64(assign.MaxLoad))
	}
	return nil
}

func (s *Slicelet) addLoad(h assign.SliceKey, cost float64) {
	m := s.metrics
	if m != nil {
		m.requests.Inc(uint64(h))
	}
	if v := s.view.Load(); v != nil {
		if i := v.table.Lookup(h); v.mine[i] {
			v.load[i].add(h, cost)
			return
		}
	}
	if m != nil {
		m.misrouted.Inc(uint64(h))
	}
	s.load.unowned.add(cost)
}

// drainOwned empties v's accumulators into load entries, sorted: for each
// owned slice that received load, its candidate hot key and the ranges
// around it (see loadCell); and the ReportLoad calls they sum.
func drainOwned(v *view, into assign.Load) (assign.Load, uint64) {
	a := v.table.Assignment()
	var events uint64
	for i := range v.load {
		if v.mine[i] {
			events += v.load[i].events.Swap(0)
			into = v.load[i].drain(a.Slices[i].Start, a.Slices[i].End, into)
		}
	}
	return into, events
}

// retire keeps the load measured under a replaced view for the next
// report. Called by install after the swap; an add that loaded old just
// before the swap and lands after this drain is lost, which is a few
// requests at most.
func (s *Slicelet) retire(old *view) {
	if old == nil {
		return
	}
	l, events := drainOwned(old, nil)
	if len(l) == 0 {
		return
	}
	s.load.mu.Lock()
	defer s.load.mu.Unlock()
	s.load.carry = assign.MergeLoads(s.load.carry, l)
	s.load.carryEvents += events
	if len(s.load.carry) > maxPendingEntries {
		s.log.Warn("slicelet: dropping unreported load; too many assignment changes since the last report")
		s.load.carry, s.load.carryEvents, s.load.carryWindow = nil, 0, 0
	}
}

// RejectedLoadReports counts the ReportLoad calls rejected since the last
// report was sent.
func (s *Slicelet) RejectedLoadReports() uint64 { return s.load.rejected.Load() }

// LoadReportsSent counts the load reports an Assigner accepted.
func (s *Slicelet) LoadReportsSent() uint64 { return s.load.reportsSent.Load() }

// stateOf asks the application for the state it holds (Config.StateBytes)
// and returns it per slice of v that v gives this task, as load entries
// with bytes only; nil without StateBytes or without a view.
func (s *Slicelet) stateOf(v *view) assign.Load {
	if s.cfg.StateBytes == nil || v == nil {
		return nil
	}
	sums := make([]float64, len(v.mine))
	var done atomic.Bool
	s.cfg.StateBytes(func(h assign.SliceKey, b int64) {
		if b <= 0 || done.Load() {
			return
		}
		if i := v.table.Lookup(h); v.mine[i] {
			sums[i] += float64(b)
		}
	})
	done.Store(true)
	a := v.table.Assignment()
	var out assign.Load
	for i, b := range sums {
		if b > 0 {
			out = append(out, assign.LoadEntry{Start: a.Slices[i].Start, End: a.Slices[i].End, Bytes: min(b, assign.MaxBytes)})
		}
	}
	return out
}

// collect closes the current window: it takes everything measured since
// the last successful report and resets the accumulators. The state the
// application holds is read first, outside the lock; it is reported only
// if the assignment did not change meanwhile.
func (s *Slicelet) collect(now time.Time) *windowReport {
	v := s.view.Load()
	state := s.stateOf(v)
	var sum uint64
	if v != nil {
		sum = v.checksum() // hashed outside the lock that ReportLoad takes
	}
	s.load.mu.Lock()
	defer s.load.mu.Unlock()
	r := &windowReport{}
	var cur assign.Load
	if held := s.view.Load(); held != nil {
		r.generation, r.incarnation = held.table.Assignment().Generation, held.table.Assignment().Incarnation
		if held == v {
			r.checksum = sum
		}
		cur, r.events = drainOwned(held, nil)
	}
	r.events += s.load.carryEvents
	s.load.carryEvents = 0
	if s.view.Load() != v {
		state = nil
	}
	r.load = assign.MergeLoads(s.load.carry, cur, state)
	s.load.carry = nil
	r.unowned = s.load.unowned.take()
	r.rejected = s.load.rejected.Swap(0)
	// The load carried from failed reports was decayed; so is the time
	// it was measured over, so that the rate stays honest.
	r.window = now.Sub(s.load.start).Seconds() + s.load.carryWindow
	s.load.carryWindow = 0
	r.start = s.load.start
	return r
}

// windowReport is one window's measurements on their way out.
type windowReport struct {
	generation  uint64
	incarnation string // of the assignment at generation
	checksum    uint64 // api.Checksum of it; 0 unknown
	start       time.Time
	window      float64
	load        assign.Load
	unowned     float64
	rejected    uint64
	events      uint64 // ReportLoad calls the owned load sums
}

// keep puts back the measurements of a report that could not be sent,
// decayed, so they reach the Assigner with the next report.
func (s *Slicelet) keep(r *windowReport) {
	for i := range r.load {
		r.load[i].Load *= pendingDecay
		r.load[i].Bytes = 0 // a gauge: the next window reads it afresh
	}
	s.load.mu.Lock()
	defer s.load.mu.Unlock()
	s.load.carry = assign.MergeLoads(r.load, s.load.carry)
	s.load.carryEvents += uint64(float64(r.events) * pendingDecay)
	s.load.carryWindow += r.window * pendingDecay
	if len(s.load.carry) > maxPendingEntries {
		s.load.carry, s.load.carryEvents, s.load.carryWindow = nil, 0, 0
	}
	s.load.unowned.add(r.unowned * pendingDecay)
	s.load.rejected.Add(r.rejected)
	// The next window starts now; the load kept counts with the decayed
	// length of the window it was measured over (carryWindow), so the
	// next report's rate stays honest.
}

func (r *windowReport) proto(job, task string) *slicerv1.ReportLoadRequest {
	req := &slicerv1.ReportLoadRequest{
		Job: job, Task: task, Generation: r.generation, Incarnation: r.incarnation, Checksum: r.checksum, WindowSeconds: r.window,
		UnownedLoad: min(r.unowned, assign.MaxLoad), RejectedReports: r.rejected, Events: r.events,
		Slices: make([]*slicerv1.SliceLoad, len(r.load)),
	}
	for i, e := range r.load {
		req.Slices[i] = &slicerv1.SliceLoad{Start: uint64(e.Start), End: uint64(e.End), Load: min(e.Load, assign.MaxLoad), Bytes: e.Bytes}
	}
	return req
}

// assigner returns the job's preferred Assigner, as every Assigner and
// Distributor chooses it (lease.Preference): readiness reports and lease
// calls go to the Assigner that generates the job's assignments, and load
// reports go there first. false when gossip knows no live Assigner.
func (s *Slicelet) assigner() (gossip.Peer, bool) {
	n := s.node.Load()
	if n == nil {
		return gossip.Peer{}, false
	}
	return s.load.choices.PreferredIn(s.cfg.Preference, s.cfg.Job, s.load.view.of(n), n.RTT)
}

// reportLoop sends one load report per window until ctx ends.
func (s *Slicelet) reportLoop(ctx context.Context) {
	s.load.mu.Lock()
	s.load.start = time.Now()
	s.load.mu.Unlock()
	t := time.NewTicker(s.cfg.LoadWindow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.reportOnce(ctx, now)
		}
	}
}

// maxReportAssigners bounds the Assigners one window's report goes to:
// a deployment runs two or three, and a gossip view listing more (a
// misconfiguration, or members posing as Assigners) costs each task at
// most this many calls and connections per window.
const maxReportAssigners = 8

// reportOnce sends the window that ends now to every alive Assigner in
// gossip (every_assigner), so each holds the job's whole load: the one
// deciding for the job, and the others for their views and for the
// moment one of them takes the job over. The window counts as reported
// when at least one Assigner accepted it; when none did, its load is
// kept, decayed, for the next attempt. Each call is bounded by the
// window, and reportOnce waits for all of them.
func (s *Slicelet) reportOnce(ctx context.Context, now time.Time) {
	r := s.collect(now)
	s.load.mu.Lock()
	s.load.start = now
	s.load.mu.Unlock()
	select {
	case <-s.joined:
	default:
		// The Assigner would refuse a task gossip has not seen yet.
		s.keep(r)
		return
	}
	targets := s.reportAssigners()
	if len(targets) == 0 {
		s.log.Debug("slicelet: no live assigner in gossip; keeping load for the next report")
		s.keep(r)
		return
	}
	req := r.proto(s.cfg.Job, s.cfg.Task)
	req.EveryAssigner = true
	rctx, cancel := context.WithTimeout(ctx, s.cfg.LoadWindow)
	defer cancel()
	var accepted atomic.Int32
	var wg sync.WaitGroup
	for _, p := range targets {
		client := s.loadClient(p)
		wg.Go(func() {
			resp, err := client.ReportLoad(rctx, connect.NewRequest(req))
			if err != nil {
				s.notMember(err)
				if ctx.Err() == nil {
					s.log.Warn("slicelet: load report to an assigner failed", "assigner", p.Name, "rpc_addr", p.RPCAddr, "err", err)
				}
				return
			}
			if resp.Msg.GetKeyringChanged() {
				s.log.Debug("slicelet: an assigner's gossip keyring changed; registering again", "assigner", p.Name)
				s.askRegister()
			}
			accepted.Add(1)
		})
	}
	wg.Wait()
	if accepted.Load() == 0 {
		if ctx.Err() == nil {
			s.log.Warn("slicelet: no assigner accepted the load report; keeping the load for the next report", "assigners", len(targets))
		}
		s.keep(r)
		return
	}
	s.load.reportsSent.Add(1)
	s.log.Debug("slicelet: load reported", "assigners", len(targets), "accepted", accepted.Load(), "generation", r.generation,
		"slices", len(r.load), "load", r.load.Total(), "unowned", r.unowned, "rejected", r.rejected)
}

// reportAssigners lists the alive Assigners in gossip that load reports
// go to: the job's preferred one first, then the others by name, at most
// maxReportAssigners. It also drops the clients of Assigners no longer
// listed.
func (s *Slicelet) reportAssigners() []gossip.Peer {
	n := s.node.Load()
	if n == nil {
		return nil
	}
	var out []gossip.Peer
	preferred, ok := s.assigner()
	if ok && preferred.RPCAddr != "" {
		out = append(out, preferred)
	}
	var others []gossip.Peer
	for _, p := range s.load.view.of(n).Peers() {
		if p.Has(gossip.RoleAssigner) && p.Status == gossip.StatusAlive && p.RPCAddr != "" && p.Name != preferred.Name {
			others = append(others, p)
		}
	}
	slices.SortFunc(others, func(a, b gossip.Peer) int { return strings.Compare(a.Name, b.Name) })
	out = append(out, others...)
	if len(out) > maxReportAssigners {
		out = out[:maxReportAssigners]
	}
	s.load.mu.Lock()
	for name := range s.load.clients {
		if !slices.ContainsFunc(out, func(p gossip.Peer) bool { return p.Name == name }) {
			delete(s.load.clients, name)
		}
	}
	s.load.mu.Unlock()
	return out
}

// loadClient returns a client for the Assigner p, reusing the one made
// for it while its address stays the same.
func (s *Slicelet) loadClient(p gossip.Peer) slicerv1connect.LoadServiceClient {
	s.load.mu.Lock()
	defer s.load.mu.Unlock()
	c, ok := s.load.clients[p.Name]
	if !ok || c.addr != p.RPCAddr {
		hc, url := s.assignerClient(p)
		c = loadClient{addr: p.RPCAddr, client: slicerv1connect.NewLoadServiceClient(hc, url)}
		if s.load.clients == nil {
			s.load.clients = make(map[string]loadClient)
		}
		s.load.clients[p.Name] = c
	}
	return c.client
}

// loadClient is a LoadService client for one Assigner at addr.
type loadClient struct {
	addr   string
	client slicerv1connect.LoadServiceClient
}
