package slicelet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

// ErrNotRunning is returned by Drain and Undrain before Run has joined
// gossip or after it has returned.
var ErrNotRunning = errors.New("slicelet: not running")

// Drain gives up this task's slices before it stops: it advertises the
// task as draining in gossip (and, with TLS, registers it as draining with
// every Assigner, which then believe the registration rather than the
// gossip tag), so the Assigner places its slices on other
// tasks (and gives it no new ones), and returns once the task's assignment
// gives it no key, or with ctx's error, saying how much it still held,
// when ctx ends first. The task keeps serving meanwhile: a client whose
// assignment is older still reaches it, and requests for keys already
// moved get the usual misrouted answer and retry at the new owner. Call
// it on SIGTERM, then stop. The drain lasts until Undrain or the end of
// the process: a restarted task is not draining.
//
// Draining is the task's own claim, trusted as its load reports are: it
// can only move its own keys. When no other task of the job is alive and
// not draining, or gossip knows no live Assigner, nothing can take the
// keys, and Drain returns at once.
func (s *Slicelet) Drain(ctx context.Context) error {
	if err := s.setDraining(true); err != nil {
		return err
	}
	n := s.node.Load()
	members, unsubscribe := n.Changes()
	defer unsubscribe()
	s.handoff.beginDrain()
	defer s.handoff.endDrain()
	start := time.Now()
	var owned []assign.Slice    // what the task served before it emptied
	var prev *assign.Assignment // the assignment it served them under
	for {
		v, changed := s.currentView()
		if v == nil || len(v.owned) == 0 {
			s.log.Info("slicelet: drained", "took", time.Since(start))
			// The tasks that took the keys fetch their state from here.
			switch {
			case v != nil && len(owned) > 0:
				s.awaitFetches(ctx, start, time.Now(), gained(prev, v.table.Assignment(), owned, s.cfg.Task))
			case v != nil:
				// Emptied before the drain began (slicerd task drain, then
				// a stop): the fetches of what it lost may still be on
				// their way. Wait for those being served, and for a grace
				// from when it was emptied.
				s.awaitFetches(ctx, start, v.installed, nil)
			}
			return nil
		}
		owned, prev = v.owned, v.table.Assignment()
		if why := nowhere(n.Peers(), s.cfg.Job, s.cfg.Task); why != "" {
			s.log.Info("slicelet: not waiting for the drain: "+why, "owned_ranges", len(v.owned))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slicelet: drain of %s/%s: still serving %d key ranges of generation %d: %w",
				s.cfg.Job, s.cfg.Task, len(v.owned), v.table.Assignment().Generation, ctx.Err())
		case <-changed:
		case <-members:
		}
	}
}

// nowhere says why no decision can move task's keys, as gossip sees the
// cluster in peers: no other alive task of job that is not draining, or no
// alive Assigner. It is "" when the keys can move.
func nowhere(peers []gossip.Peer, job, task string) string {
	other, assigner := false, false
	for _, p := range peers {
		if p.Status != gossip.StatusAlive {
			continue
		}
		if p.Has(gossip.RoleAssigner) {
			assigner = true
		}
		if p.Has(gossip.RoleTask) && p.Job == job && p.Task != task && !p.Draining {
			other = true
		}
	}
	switch {
	case !other:
		return "no other task of the job is alive and not draining"
	case !assigner:
		return "gossip knows no live assigner"
	}
	return ""
}

// currentView returns the task's view and a channel closed when the next
// one is installed.
func (s *Slicelet) currentView() (*view, <-chan struct{}) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	return s.view.Load(), s.changed
}

// Undrain ends a drain: the task takes new slices again.
func (s *Slicelet) Undrain() error { return s.setDraining(false) }

func (s *Slicelet) setDraining(draining bool) error {
	n := s.node.Load()
	if n == nil {
		return ErrNotRunning
	}
	if err := n.SetDraining(draining); err != nil {
		return fmt.Errorf("slicelet: advertise draining=%v: %w", draining, err)
	}
	// With TLS the Assigners take the flag from the task's registration,
	// not from gossip: register it.
	select {
	case s.attrsChanged <- struct{}{}:
	default:
	}
	s.log.Info("slicelet: draining advertised", "draining", draining)
	return nil
}
