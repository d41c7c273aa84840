package roles

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Gossip tags are what a member says about itself; anyone holding the
// gossip key can say anything. With TLS, an agent believes a member's
// claims only once a certificate has backed them:
//
//   - a member that claims agent roles is dialled at the RPC address it
//     advertises, and counts as those roles only if the certificate there
//     names the member in each of them (spiffe://slicerd/ROLE/NAME);
//   - a member that claims to be task T of job J counts as one only once a
//     caller with a certificate for that task has registered it with this
//     agent's Assigner (AssignerService.RegisterTask), bound to the
//     member's gossip address. A different holder of the gossip key cannot
//     take over a task's name: from another address it is not the
//     registered member, and it cannot register without the task's
//     certificate. The registration lasts until gossip forgets the member
//     (reaps it), so a task that was wrongly declared failed and refuted
//     it counts again at once; a restarted task registers afresh.
//
// Once a member is registered as a task, gossip only says whether it is
// alive: its job, task and serving address are the registration's. A
// holder of the gossip key can forge the member's gossip state (an alive
// message with new tags and the highest incarnation, which the real
// member's refutations cannot outbid), but what it claims there is
// ignored, logged and counted (forgedClaims): the task's keys keep going
// to the address its certificate registered, and the real task is never
// locked out of its name.
//
// Members whose claims are not backed are left out of Peers, so no role
// routes to them, defers to them or gives them slices.

const (
	// verifyTimeout bounds one verification dial and handshake.
	verifyTimeout = 3 * time.Second
	// verifyRetry is how long a member that failed verification waits
	// before it is dialled again.
	verifyRetry = 5 * time.Second
)

// verifier keeps the certificate-backed view of gossip.
type verifier struct {
	src    *tlsconfig.Source
	self   string
	log    *slog.Logger
	notify func() // the agent's membership changed
	kick   chan struct{}

	mu     sync.Mutex
	agents map[string]verdict // by member name
	tasks  map[string]taskReg // by member name
	// forged counts the gossip states of registered task members that
	// disagreed with their registrations; warned, by member name, when
	// each member's last warning is older than forgedWarnEvery.
	forged atomic.Uint64
	warned map[string]time.Time
}

// forgedWarnEvery bounds the warnings about one member's forged gossip
// claims: filter runs on every membership read.
const forgedWarnEvery = time.Minute

// verdict is the outcome of dialling a member that claims agent roles.
// It stands for the member at gossipAddr only: a member that takes the
// name from another gossip address (gossip gives the name of a member
// that left or failed to whoever joins with it) is dialled again, so
// that the earlier verification of a stopped agent does not vouch for a
// holder of the gossip key advertising the agent's old RPC address.
type verdict struct {
	addr, roles, gossipAddr string // what was verified
	ok                      bool
	at                      time.Time
}

// taskReg is a task member's registration.
type taskReg struct {
	job, task, gossipAddr string
	rpcAddr               string                 // the serving address registered; "" from a Slicelet that predates it
	attrs                 *gossip.TaskAttributes // nil from a Slicelet that predates them
	by                    string                 // the registering identities, for logs
}

// judges reports whether vd is the verdict on p as it is now, claiming
// roles: the same RPC address and roles, from the same gossip address.
func (vd verdict) judges(p gossip.Peer, roles string) bool {
	return vd.addr == p.RPCAddr && vd.roles == roles && vd.gossipAddr == p.GossipAddr
}

func newVerifier(src *tlsconfig.Source, self string, log *slog.Logger, notify func()) *verifier {
	return &verifier{
		src: src, self: self, log: log.With("component", "members"), notify: notify,
		kick: make(chan struct{}, 1), agents: map[string]verdict{}, tasks: map[string]taskReg{}, warned: map[string]time.Time{},
	}
}

func agentRoles(p gossip.Peer) string {
	var rs []string
	for _, r := range p.Roles {
		if r != gossip.RoleTask {
			rs = append(rs, string(r))
		}
	}
	return strings.Join(rs, ",")
}

// filter returns the members whose claims are backed, and asks the
// verification loop to dial those that still need it.
func (v *verifier) filter(peers []gossip.Peer) []gossip.Peer {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]gossip.Peer, 0, len(peers))
	need := false
	for _, p := range peers {
		if p.Name == v.self {
			out = append(out, p)
			continue
		}
		if r, ok := v.tasks[p.Name]; ok && r.gossipAddr == p.GossipAddr {
			out = append(out, v.registered(p, r))
			continue
		}
		if p.Has(gossip.RoleTask) {
			continue // not registered (yet) from this gossip address
		}
		roles := agentRoles(p)
		if roles == "" {
			continue
		}
		vd, ok := v.agents[p.Name]
		if ok && vd.judges(p, roles) {
			if vd.ok {
				out = append(out, p)
			} else if time.Since(vd.at) >= verifyRetry {
				need = true
			}
			continue
		}
		need = true
	}
	if need {
		select {
		case v.kick <- struct{}{}:
		default:
		}
	}
	return out
}

// registered returns p as its registration r describes it: a task of r's
// job at r's serving address, whatever its gossip tags claim. A claim that
// disagrees is counted and warned about. Call with mu held.
func (v *verifier) registered(p gossip.Peer, r taskReg) gossip.Peer {
	q := p
	q.Roles = []gossip.Role{gossip.RoleTask}
	q.Job, q.Task = r.job, r.task
	if r.rpcAddr != "" {
		q.RPCAddr = r.rpcAddr
	}
	if r.attrs != nil {
		// The draining flag changes in gossip and in the registration
		// at slightly different moments, so a difference in it alone is
		// not called a forgery; it is ignored all the same.
		q = q.WithAttributes(*r.attrs)
	}
	if !slices.Equal(p.Roles, q.Roles) || p.Job != q.Job || p.Task != q.Task || p.RPCAddr != q.RPCAddr ||
		p.Capacity != q.Capacity || p.MemoryLimit != q.MemoryLimit {
		v.forged.Add(1)
		if now := time.Now(); now.Sub(v.warned[p.Name]) >= forgedWarnEvery {
			v.warned[p.Name] = now
			v.log.Warn("ignoring gossip claims of a registered task member that disagree with its registration: "+
				"someone holding the gossip key may be forging its state; its keys stay at the registered address",
				"member", p.Name, "claimed_roles", p.Roles, "claimed_job", p.Job, "claimed_task", p.Task,
				"claimed_rpc_addr", p.RPCAddr, "registered_job", r.job, "registered_task", r.task, "registered_rpc_addr", q.RPCAddr,
				"claimed_capacity", p.Capacity, "registered_capacity", q.Capacity, "claimed_memory_limit", p.MemoryLimit, "registered_memory_limit", q.MemoryLimit,
				"gossip_addr", p.GossipAddr, "registered_by", r.by)
		}
	}
	return q
}

// ForgedClaims counts the times a registered task member's gossip state
// disagreed with its registration (each membership read that saw it).
func (v *verifier) ForgedClaims() uint64 { return v.forged.Load() }

// run dials members that claim agent roles until ctx ends; peers returns
// the raw gossip view.
func (v *verifier) run(ctx context.Context, peers func() []gossip.Peer) {
	retry := time.NewTicker(verifyRetry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.kick:
		case <-retry.C:
		}
		current := peers()
		v.prune(current)
		var todo []gossip.Peer
		for _, p := range current {
			roles := agentRoles(p)
			if p.Name == v.self || roles == "" || p.Has(gossip.RoleTask) || p.Status != gossip.StatusAlive || p.RPCAddr == "" {
				continue
			}
			v.mu.Lock()
			vd, ok := v.agents[p.Name]
			v.mu.Unlock()
			if ok && vd.judges(p, roles) && (vd.ok || time.Since(vd.at) < verifyRetry) {
				continue
			}
			todo = append(todo, p)
		}
		if v.verifyAll(ctx, todo) {
			v.notify()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// verifyConcurrency bounds the verification dials in flight, so that
// members advertising addresses that never answer (each costs up to
// verifyTimeout) cannot hold up the verification of the others for long.
const verifyConcurrency = 8

// verifyAll dials each of peers, a few at a time, records the verdicts,
// and reports whether any member was newly verified.
func (v *verifier) verifyAll(ctx context.Context, peers []gossip.Peer) bool {
	var wg sync.WaitGroup
	var verified atomic.Bool
	sem := make(chan struct{}, verifyConcurrency)
	for _, p := range peers {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			roles := agentRoles(p)
			err := v.dial(ctx, p)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				v.log.Warn("ignoring a gossip member whose certificate does not back its claims", "member", p.Name,
					"roles", roles, "rpc_addr", p.RPCAddr, "err", err)
			} else {
				v.log.Info("gossip member verified", "member", p.Name, "roles", roles, "rpc_addr", p.RPCAddr)
				verified.Store(true)
			}
			v.mu.Lock()
			v.agents[p.Name] = verdict{addr: p.RPCAddr, roles: roles, gossipAddr: p.GossipAddr, ok: err == nil, at: time.Now()}
			v.mu.Unlock()
		}()
	}
	wg.Wait()
	return verified.Load()
}

// prune forgets verdicts and registrations of members gossip no longer
// lists, so that member churn cannot grow them without bound.
func (v *verifier) prune(current []gossip.Peer) {
	names := make(map[string]bool, len(current))
	for _, p := range current {
		names[p.Name] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for name := range v.agents {
		if !names[name] {
			delete(v.agents, name)
		}
	}
	for name := range v.tasks {
		if !names[name] {
			delete(v.tasks, name)
		}
	}
	for name := range v.warned {
		if !names[name] {
			delete(v.warned, name)
		}
	}
}

// dial checks that the certificate at p's RPC address names p in each
// agent role it claims.
func (v *verifier) dial(ctx context.Context, p gossip.Peer) error {
	check := func(ids []identity.ID) error {
		for _, r := range p.Roles {
			if r == gossip.RoleTask {
				continue
			}
			want := identity.ID{Role: identity.Role(r), Node: p.Name}
			if !slices.Contains(ids, want) {
				return fmt.Errorf("%w: the certificate at %s does not name %s (it has %v)", tlsconfig.ErrPeer, p.RPCAddr, want, ids)
			}
		}
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: v.src.ClientConfig(check)}
	conn, err := d.DialContext(dctx, "tcp", p.RPCAddr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// register records a task member's registration.
func (v *verifier) register(p gossip.Peer, attrs *gossip.TaskAttributes, by string) {
	v.mu.Lock()
	prev, had := v.tasks[p.Name]
	v.tasks[p.Name] = taskReg{job: p.Job, task: p.Task, gossipAddr: p.GossipAddr, rpcAddr: p.RPCAddr, attrs: attrs, by: by}
	v.mu.Unlock()
	sameAttrs := (prev.attrs == nil) == (attrs == nil) && (attrs == nil || *prev.attrs == *attrs)
	if !had || prev.gossipAddr != p.GossipAddr || prev.job != p.Job || prev.task != p.Task || prev.rpcAddr != p.RPCAddr {
		v.log.Info("task registered", "member", p.Name, "job", p.Job, "task", p.Task, "gossip_addr", p.GossipAddr,
			"rpc_addr", p.RPCAddr, "attributes", attrs, "by", by)
		v.notify()
	} else if !sameAttrs {
		v.log.Info("task registered new attributes", "member", p.Name, "job", p.Job, "task", p.Task, "attributes", attrs, "by", by)
		v.notify()
	}
}
