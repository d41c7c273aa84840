package slicelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/gossip"
)

// reclaimAfter is how long the Assigners may keep refusing this task's
// registration because their gossip does not have its member alive before
// the task moves its gossip member to a new address. Right after a join
// the refusal passes within a gossip round trip, and a member that was
// wrongly suspected refutes it within a probe interval or two; a refusal
// that outlasts this means gossip holds the member dead at an incarnation
// that refutations cannot outbid.
const reclaimAfter = 10 * time.Second

// errReclaim ends a gossip session so that runGossip replaces the member.
var errReclaim = errors.New("slicelet: gossip keeps this task's member dead")

// runGossip joins the cluster with node and keeps it joined, registers the
// task with the Assigners (with TLS) and has the Clerk resolve its servers
// again on membership changes, until ctx ends. With TLS it also takes the
// task's membership back when gossip keeps the member dead although it is
// alive: memberlist orders a member's states by an incarnation number, and
// anyone holding the gossip key can declare a member dead at the highest
// one, which the member's refutations (they wrap around to 0) never
// outbid, so every node ignores the real member from then on. Gossip
// accepts a dead member back at a new address whatever its incarnation
// (gossip.Config.DeadNodeReclaimTime), so the task starts a new member
// under its name on another port of the same host, joins with it and
// registers it; the registration, which needs the task's certificate,
// binds the new address. The first member's address stays the one the
// task was configured with.
func (s *Slicelet) runGossip(ctx context.Context, node *gossip.Node) error {
	first := true
	for {
		err := s.gossipSession(ctx, node, first)
		first = false
		switch {
		case !errors.Is(err, errReclaim):
			return err
		case ctx.Err() != nil:
			return nil // stopping: no new member
		}
		next, err := s.newMember(node)
		if err != nil {
			s.log.Error("slicelet: gossip keeps this task's member dead, and moving it to a new address failed; the task stays out of its job until gossip forgets the member",
				"gossip_addr", node.GossipAddr(), "err", err)
			continue // the next session tries again after reclaimAfter
		}
		s.log.Warn("slicelet: gossip kept this task's member dead although it is alive (a death message at an incarnation it cannot outbid, possibly forged by a holder of the gossip key); "+
			"moved the member to a new gossip address to take its membership back",
			"old_gossip_addr", node.GossipAddr(), "gossip_addr", next.GossipAddr())
		s.reclaims.Add(1)
		node = next
	}
}

// gossipSession runs one member: it joins (closing s.joined on the first
// session), keeps it joined, follows its membership changes and, with TLS,
// registers it. It returns errReclaim when registerLoop finds the member
// kept dead.
func (s *Slicelet) gossipSession(ctx context.Context, node *gossip.Node, first bool) error {
	changes, unsubscribe := node.Changes()
	defer unsubscribe()
	g, gctx := errgroup.WithContext(ctx)
	joined := make(chan struct{})
	g.Go(func() error {
		err := node.RetryJoin(gctx, s.cfg.Join, joinRetryInterval)
		if gctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("slicelet: join %v: %w", s.cfg.Join, err)
		}
		close(joined)
		if first {
			close(s.joined)
		}
		return node.KeepJoined(gctx, s.cfg.Join, joinRetryInterval, func(peers []gossip.Peer) bool {
			return gossip.HasLiveServer(node.Self().Name, peers)
		})
	})
	// With TLS the registration is what the Assigners believe of the
	// task; with gossip encryption it is also how the task hears of key
	// rotations.
	if s.cfg.TLS != nil || node.Encrypted() {
		g.Go(func() error { return s.registerLoop(gctx, node, joined) })
	}
	g.Go(func() error {
		// A membership change may bring the first Distributor; skip the
		// Clerk's backoff rather than wait it out.
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-changes:
				s.clerk.ResolveNow()
			}
		}
	})
	return g.Wait()
}

// newMember starts a member under old's name and tags on a free port of
// the host old is bound to, shuts old down without leaving (a leave would
// tell the cluster the task is going), and makes the new one the
// Slicelet's.
func (s *Slicelet) newMember(old *gossip.Node) (*gossip.Node, error) {
	cfg := s.cfg.gossipConfig(s.log)
	if cfg.Transport != nil || cfg.AdvertiseAddr != "" {
		return nil, errors.New("gossip uses its own transport or an advertised address, which name a fixed port")
	}
	host, _, err := net.SplitHostPort(cfg.BindAddr)
	if err != nil {
		return nil, err
	}
	cfg.BindAddr = net.JoinHostPort(host, "0")
	cfg.Self.Draining = old.Self().Draining
	if keys := old.LocalKeys(); len(keys) > 0 {
		cfg.Keys = keys // the keys after any rotation; a keyring file has them too
	}
	next, err := gossip.Start(cfg)
	if err != nil {
		return nil, err
	}
	if err := old.Shutdown(); err != nil {
		s.log.Warn("slicelet: shutting down the replaced gossip member failed", "gossip_addr", old.GossipAddr(), "err", err)
	}
	s.node.Store(next)
	return next, nil
}

// draining reports whether the task advertises that it is draining.
func (s *Slicelet) draining() bool {
	n := s.node.Load()
	return n != nil && n.Self().Draining
}
