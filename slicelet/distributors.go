package slicelet

import (
	"context"
	"crypto/tls"
	"sync"
	"time"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// distCheckTimeout bounds one check of a Distributor's or Backup's
// certificate, as the Clerk's client bounds its TLS handshake.
const distCheckTimeout = 5 * time.Second

// distState is, with TLS, the Slicelet's record of the gossip members
// claiming the Distributor or Backup role whose certificate it found at
// their advertised RPC address. Anyone holding the gossip key can claim
// those roles at any address: the Clerk's TLS check (a certificate naming
// some Distributor or Backup) keeps it from believing one, but it would
// try each such member, at up to a handshake timeout each, on every
// reconnect and every recheck of a fallback stream, and a fake in the
// task's subset would take the place of a real Distributor. So resolve
// lists a member only once a TLS connection to its RPC address reached a
// server whose certificate names it (by its gossip name) in each of those
// roles it claims. A check stands for the member at one gossip address,
// as for Assigners (membersView): whoever joins later under its name is
// checked afresh.
type distState struct {
	mu       sync.Mutex
	ctx      context.Context     // Run's: checks end with it
	wg       sync.WaitGroup      // checks under way
	verified map[string]memberAt // member name → where its certificate was found
	checking map[string]bool     // member names being checked
	ended    chan struct{}       // closed, and replaced, when a check ends
}

// isVerified reports whether p's certificate was found at p's place.
func (d *distState) isVerified(p gossip.Peer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.verified[p.Name]
	return ok && at == placeOf(p)
}

// verifyDistributor starts a check of p's certificate unless one is under
// way or Run has ended; when the certificate names p, p is recorded as
// verified and the Clerk resolves its servers again at once.
func (s *Slicelet) verifyDistributor(p gossip.Peer) {
	d := &s.dists
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || d.ctx.Err() != nil || d.checking[p.Name] {
		return
	}
	if d.checking == nil {
		d.checking = map[string]bool{}
	}
	d.checking[p.Name] = true
	d.wg.Go(func() {
		err := s.checkDistributor(d.ctx, p)
		d.mu.Lock()
		delete(d.checking, p.Name)
		if err == nil {
			if d.verified == nil {
				d.verified = map[string]memberAt{}
			}
			d.verified[p.Name] = placeOf(p)
		}
		close(d.ended)
		d.ended = make(chan struct{})
		d.mu.Unlock()
		if err != nil {
			s.log.Debug("slicelet: not streaming from a gossip member whose certificate does not back its claims",
				"member", p.Name, "rpc_addr", p.RPCAddr, "err", err)
			return
		}
		s.clerk.ResolveNow()
	})
}

// checkDistributor completes a TLS handshake with p's RPC address and
// accepts the server only if its certificate names p in each of the
// Distributor and Backup roles p claims.
func (s *Slicelet) checkDistributor(ctx context.Context, p gossip.Peer) error {
	var checks []tlsconfig.Check
	for _, r := range []gossip.Role{gossip.RoleDistributor, gossip.RoleBackup} {
		if p.Has(r) {
			checks = append(checks, tlsconfig.WantNode(identity.Role(r), p.Name))
		}
	}
	cfg := s.cfg.TLS.ClientConfig(func(ids []identity.ID) error {
		for _, check := range checks {
			if err := check(ids); err != nil {
				return err
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(ctx, distCheckTimeout)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", p.RPCAddr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// start lets verifyDistributor check members until ctx ends.
func (d *distState) start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctx = ctx
	d.ended = make(chan struct{})
}

// settle waits until a member was verified, or no check is under way, or
// ctx ends: the Clerk's first round then has the Distributors that passed
// rather than none, and does not report that no server answered.
func (d *distState) settle(ctx context.Context) {
	for {
		d.mu.Lock()
		done := len(d.verified) > 0 || len(d.checking) == 0
		ended := d.ended
		d.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return
		}
	}
}

// stop waits for the checks under way, which end with the context start
// was given.
func (d *distState) stop() { d.wg.Wait() }
