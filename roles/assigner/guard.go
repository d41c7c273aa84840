package assigner

import (
	"context"
	"errors"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
)

// guardRetry paces a strong job's guard driver after a failed step.
const guardRetry = 200 * time.Millisecond

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
			a.leader.Lost(name, held.Epoch, err)
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
// committed assignment, with the protocol of package lease/guard (Slicer
// §4.5): a bridge from the guard's generation to cur, which the guard's
// readers take, then the guard recalled, waited out and set to cur. Only
// the keys whose owner changes are unavailable meanwhile; the bridge
// carries the rest. done reports that the guard is at cur.
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
	mv, err := a.guard.Step(ctx, held, cur.Generation)
	switch {
	case err != nil:
		return false, err
	case mv.Behind:
		// A lease names a generation above the newest served here:
		// this Assigner's view is behind the store; it reads it again
		// first.
		return true, a.refresh(ctx, name)
	}
	// A move that finished an interrupted one stops short of cur; the
	// driver steps again at once.
	return mv.Done || mv.To == cur.Generation, nil
}
