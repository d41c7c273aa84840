package assigner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
)

// guardRetry paces a strong job's guard driver after a failed step.
const guardRetry = 200 * time.Millisecond

// bridgePoll paces the driver's look at who holds the bridge while it
// waits for the guard's readers to take it.
const bridgePoll = 10 * time.Millisecond

// guardDriver moves one strong job's guard; see moveGuard.
type guardDriver struct {
	kick chan struct{}
	done chan struct{}
}

// moveGuard makes the job's guard follow its newest committed generation,
// if the job is strongly consistent and this Assigner holds its lease: it
// starts the job's guard driver, or wakes the running one. The drivers run
// under Run's context and Run waits for them, before the leases go.
func (a *Assigner) moveGuard(name string) {
	if a.leases == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	j := a.jobs[name]
	if j == nil || !j.cfg.IsStrong() || a.runCtx == nil || a.runCtx.Err() != nil {
		return
	}
	if d := a.guards[name]; d != nil {
		select {
		case d.kick <- struct{}{}:
		default:
		}
		return
	}
	d := &guardDriver{kick: make(chan struct{}, 1), done: make(chan struct{})}
	a.guards[name] = d
	ctx := a.runCtx
	a.drivers.Go(func() {
		defer close(d.done)
		a.driveGuard(ctx, name, d)
	})
}

// driveGuard moves the guard to each newest generation until the job is
// no longer this Assigner's (lease lost, job deleted or no longer strong)
// or ctx ends.
func (a *Assigner) driveGuard(ctx context.Context, name string, d *guardDriver) {
	defer func() {
		a.mu.Lock()
		if a.guards[name] == d {
			delete(a.guards, name)
		}
		a.mu.Unlock()
	}()
	wait := time.Duration(0)
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-d.kick:
			case <-t.C:
			}
			t.Stop()
		}
		held, ok := a.leader.Held(name)
		a.mu.Lock()
		j := a.jobs[name]
		strong := j != nil && j.cfg.IsStrong()
		a.mu.Unlock()
		if !ok || !strong || ctx.Err() != nil {
			return
		}
		cur := j.pub.Current()
		done, err := a.guardStep(ctx, held, cur)
		switch {
		case errors.Is(err, lease.ErrLost):
			a.leader.Lost(name, err)
			return
		case err != nil && ctx.Err() == nil:
			a.log.Warn("moving the guard failed; retrying", "job", name, "err", err)
			wait = guardRetry
		case done:
			wait = a.pref.Recheck // and at every commit's kick
		default:
			wait = 0
		}
	}
}

// guardStep moves the guard one transition towards cur, the newest
// committed assignment (Slicer §4.5): open a bridge from the guard's
// generation to cur, wait for the guard's readers to take it, recall the
// guard, wait until no reader holds it (each released it or let it
// expire), and write cur's generation to it. Only the keys whose owner
// changes are unavailable meanwhile; the bridge carries the rest. done
// reports that the guard is at cur.
//
// An assignment that gives a slice to more than one task never becomes the
// guard's: it waits for the decision that brings the job to one task per
// key.
func (a *Assigner) guardStep(ctx context.Context, held lease.Job, cur *assign.Assignment) (done bool, err error) {
	name := held.Job
	if cur == nil {
		return true, nil
	}
	for _, s := range cur.Slices {
		if len(s.Tasks) > 1 {
			a.mu.Lock()
			warned := a.replicatedWarned[name] == cur.Generation
			a.replicatedWarned[name] = cur.Generation
			a.mu.Unlock()
			if !warned {
				a.log.Warn("the newest assignment gives a key to more than one task; the guard stays until one that does not", "job", name,
					"generation", cur.Generation)
			}
			return true, nil
		}
	}
	target := lease.GuardValue(cur.Generation)
	st, err := a.leases.State(ctx, name, lease.Guard)
	if err != nil {
		return false, err
	}
	if st.Set && !st.Recalled && st.Value == target {
		return true, nil
	}
	if st.Set && st.Value.From > cur.Generation {
		// A guard above the newest generation served here: this
		// Assigner's view is behind the store; it reads it again first.
		return true, a.refresh(ctx, name)
	}
	start := time.Now()
	var bridged int
	if st.Set && !st.Recalled {
		if !a.noBridge {
			if bridged, err = a.openBridge(ctx, held, st.Value.From, cur.Generation); err != nil {
				return false, err
			}
		}
		if err := a.leases.Recall(ctx, held, lease.Guard); err != nil {
			return false, err
		}
	}
	recalled := time.Now()
	if st.Set {
		if err := a.leases.Wait(ctx, held, lease.Guard); err != nil {
			return false, err
		}
	}
	if err := a.leases.Set(ctx, held, lease.Guard, target); err != nil {
		return false, err
	}
	now := time.Now()
	a.log.Info("guard moved", "job", name, "from", st.Value.From, "to", cur.Generation, "epoch", held.Epoch,
		"recall_period", now.Sub(recalled), "took", now.Sub(start), "bridge_readers", bridged, "bridge", !a.noBridge)
	return true, nil
}

// openBridge writes the bridge from → to, replacing an older one once its
// readers are gone, and waits up to bridgeWait for every reader of the
// guard to take it too. It returns how many readers hold it.
func (a *Assigner) openBridge(ctx context.Context, held lease.Job, from, to uint64) (int, error) {
	name := held.Job
	want := lease.Value{From: from, To: to}
	bst, err := a.leases.State(ctx, name, lease.Bridge)
	if err != nil {
		return 0, err
	}
	if !bst.Set || bst.Recalled || bst.Value != want {
		if bst.Set && !bst.Recalled {
			if err := a.leases.Recall(ctx, held, lease.Bridge); err != nil {
				return 0, err
			}
		}
		if bst.Set {
			if err := a.leases.Wait(ctx, held, lease.Bridge); err != nil {
				return 0, err
			}
		}
		if err := a.leases.Set(ctx, held, lease.Bridge, want); err != nil {
			return 0, err
		}
	}
	deadline := time.Now().Add(a.bridgeWait)
	tick := time.NewTicker(bridgePoll)
	defer tick.Stop()
	for {
		guard, err := a.leases.Readers(ctx, name, lease.Guard)
		if err != nil {
			return 0, err
		}
		bridge, err := a.leases.Readers(ctx, name, lease.Bridge)
		if err != nil {
			return 0, err
		}
		if covered(guard, bridge, want) || !time.Now().Before(deadline) {
			return len(bridge), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// covered reports whether every reader of the guard also holds the bridge
// at want.
func covered(guard, bridge []lease.Reader, want lease.Value) bool {
	for _, g := range guard {
		i, ok := slices.BinarySearchFunc(bridge, g.Name, func(r lease.Reader, name string) int { return strings.Compare(r.Name, name) })
		if !ok || bridge[i].Value != want {
			return false
		}
	}
	return true
}
