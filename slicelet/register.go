package slicelet

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// registerRefresh is how often the Slicelet registers again with every
// Assigner, whether or not gossip showed a change: an Assigner restarted
// faster than gossip noticed it has forgotten the registration.
const registerRefresh = 30 * time.Second

// registerRetry paces registrations that failed, and registrations again
// after a call was refused as from a non-member.
const registerRetry = time.Second

// notMember reports whether err is an Assigner's refusal of a call from a
// task it does not count as a live member of its job (api.RefusalNotMember):
// with identities, a task it has no registration for, as after a restart
// of the Assigner faster than gossip noticed. It asks registerLoop to
// register again.
func (s *Slicelet) notMember(err error) {
	if api.Refusal(err) == api.RefusalNotMember {
		s.askRegister()
	}
}

// askRegister asks registerLoop to register again with every Assigner,
// at most once per registerRetry.
func (s *Slicelet) askRegister() {
	select {
	case s.reregister <- struct{}{}:
	default:
	}
}

// assignerClient returns the HTTP client and base URL for Assigner p: with
// TLS, a client that accepts only a certificate naming p as an Assigner.
func (s *Slicelet) assignerClient(p gossip.Peer) (*http.Client, string) {
	if s.cfg.TLS == nil {
		return s.httpClient, api.URL(p.RPCAddr, false)
	}
	s.assignersMu.Lock()
	defer s.assignersMu.Unlock()
	c, ok := s.assigners[p.Name]
	if !ok {
		c = api.NewHTTPClient(s.cfg.TLS.ClientConfig(tlsconfig.WantNode(identity.Assigner, p.Name)))
		s.assigners[p.Name] = c
	}
	return c, api.URL(p.RPCAddr, true)
}

func (s *Slicelet) closeAssignerClients() {
	s.assignersMu.Lock()
	defer s.assignersMu.Unlock()
	for _, c := range s.assigners {
		c.CloseIdleConnections()
	}
}

// registerLoop registers this task with every alive Assigner in gossip:
// once joined is closed, whenever an Assigner appears or comes back, after
// a failed attempt, and every registerRefresh. It returns nil when ctx
// ends, and errReclaim when the Assigners have refused the registration
// for reclaimAfter because their gossip does not have the member alive
// (api.RefusalNotAlive) and none accepted it meanwhile.
func (s *Slicelet) registerLoop(ctx context.Context, node *gossip.Node, joined <-chan struct{}) error {
	select {
	case <-joined:
	case <-ctx.Done():
		return nil
	}
	changes, unsubscribe := node.Changes()
	defer unsubscribe()
	done := map[string]memberAt{} // Assigner name → where the member registered with was
	refresh := time.NewTicker(registerRefresh)
	defer refresh.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	var cleared time.Time
	var notAlive time.Time // since when every answer was RefusalNotAlive; zero if one was not
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-retry.C:
		case <-refresh.C:
			clear(done)
			cleared = time.Now()
		case <-s.reregister:
			if time.Since(cleared) < registerRetry {
				continue // registered again moments ago; its effect is on its way
			}
			clear(done)
			cleared = time.Now()
		case <-s.attrsChanged:
			clear(done)
			cleared = time.Now()
		}
		failed := false
		alive := map[string]bool{}
		for _, p := range node.Peers() {
			if !p.Has(gossip.RoleAssigner) || p.Status != gossip.StatusAlive || p.RPCAddr == "" {
				continue
			}
			alive[p.Name] = true
			if done[p.Name] == placeOf(p) {
				continue
			}
			if err := s.register(ctx, node, p); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				failed = true
				if api.Refusal(err) == api.RefusalNotAlive {
					if notAlive.IsZero() {
						notAlive = time.Now()
					}
					s.log.Debug("slicelet: an assigner's gossip does not have this task's member alive yet; registering again shortly",
						"assigner", p.Name, "for", time.Since(notAlive).Round(time.Millisecond))
					continue
				}
				s.log.Warn("slicelet: registering with an assigner failed; retrying", "assigner", p.Name, "rpc_addr", p.RPCAddr, "err", err)
				continue
			}
			notAlive = time.Time{}
			done[p.Name] = placeOf(p)
			s.log.Debug("slicelet: registered with assigner", "assigner", p.Name)
		}
		for name := range done {
			if !alive[name] {
				delete(done, name) // register again when it is back
			}
		}
		if !notAlive.IsZero() && time.Since(notAlive) >= reclaimAfter && !s.draining() {
			return errReclaim
		}
		if failed {
			retry.Reset(registerRetry)
		}
	}
}

func (s *Slicelet) register(ctx context.Context, node *gossip.Node, p gossip.Peer) error {
	hc, url := s.assignerClient(p)
	self := node.Self()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	keys := node.LocalKeys()
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = gossip.KeyID(k)
	}
	resp, err := slicerv1connect.NewAssignerServiceClient(hc, url).RegisterTask(rctx, connect.NewRequest(&slicerv1.RegisterTaskRequest{
		Job: s.cfg.Job, Task: s.cfg.Task, GossipName: self.Name, RpcAddr: self.RPCAddr,
		Attributes:   &slicerv1.TaskAttributes{Capacity: self.Capacity, MemoryLimit: self.MemoryLimit, Draining: self.Draining},
		GossipKeyIds: ids,
	}))
	if err == nil || connect.IsWireError(err) {
		// The server answered, so its certificate names p as an
		// Assigner (assignerClient): p may be preferred.
		s.load.view.verifiedAt(p)
	}
	if err != nil {
		return err
	}
	s.takeKeys(node, p, resp.Msg.GetGossipKeys())
	return nil
}

// takeKeys makes the gossip keys in a registration's answer from Assigner
// p this task's keyring when p is its job's preferred Assigner, and asks
// registerLoop to register again at once, so that every Assigner hears
// the keys it now holds. This is how a key rotation reaches a task: over
// its authenticated registration, never through gossip. Answers of the
// other Assigners are not taken, so that two Assigners that disagree
// during a rotation do not swap the task's keyring back and forth.
func (s *Slicelet) takeKeys(node *gossip.Node, p gossip.Peer, encoded []string) {
	if len(encoded) == 0 || !node.Encrypted() {
		return
	}
	if pref, ok := s.assigner(); !ok || pref.Name != p.Name {
		return
	}
	keys := make([][]byte, 0, len(encoded))
	for _, e := range encoded {
		k, err := gossip.ParseKey(e)
		if err != nil {
			s.log.Warn("slicelet: ignoring the gossip keys of an assigner's answer", "assigner", p.Name, "err", err)
			return
		}
		keys = append(keys, k)
	}
	changed, err := node.SetKeys(keys)
	if err != nil {
		s.log.Warn("slicelet: could not take the assigner's gossip keys", "assigner", p.Name, "err", err)
		return
	}
	if changed {
		s.log.Info("slicelet: gossip keyring taken from the preferred assigner", "assigner", p.Name, "keys", len(keys), "primary", gossip.KeyID(keys[0]))
		select {
		case s.attrsChanged <- struct{}{}:
		default:
		}
	}
}
