package guard

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/slicerd/slicerd/internal/failpoint"
	"github.com/slicerd/slicerd/lease"
)

// DefaultPoll is Driver.Poll's default.
const DefaultPoll = 10 * time.Millisecond

// Driver makes Plan's calls against a lease manager: it is the strong
// protocol's writer side, run by the holder of a job's lease.
type Driver struct {
	Leases lease.Manager
	// Bridged opens a bridge for every move (Slicer §4.5), so that keys
	// that stay with their task stay usable; without it every key waits
	// for the guard.
	Bridged bool
	// BridgeWait bounds how long a move waits for the guard's readers to
	// take the bridge before it recalls the guard anyway; a reader that
	// has not taken it by then loses its keys until the guard is back.
	BridgeWait time.Duration
	// Poll paces that wait's look at the readers (DefaultPoll if 0).
	Poll time.Duration
	Log  *slog.Logger
}

// Step reads the job's guard and bridge, plans one move towards target
// (see Plan) and makes its calls in order. It returns the move; after an
// error the move may be partly made, and the next Step carries on from
// whatever it reached. Errors are the manager's: lease.ErrLost once held
// is not the job's lease.
func (d *Driver) Step(ctx context.Context, held lease.Job, target uint64) (Move, error) {
	job := held.Job
	g, err := d.Leases.State(ctx, job, lease.Guard)
	if err != nil {
		return Move{}, err
	}
	b, err := d.Leases.State(ctx, job, lease.Bridge)
	if err != nil {
		return Move{}, err
	}
	mv := Plan(target, g, b, d.Bridged)
	if mv.Done || mv.Behind {
		return mv, nil
	}
	start := time.Now()
	var recalled time.Time
	readers := 0
	for _, c := range mv.Calls {
		if err := failpoint.Hit(ctx, c.Op.before()); err != nil {
			return mv, err
		}
		switch c.Op {
		case RecallBridge, RecallGuard:
			err = d.Leases.Recall(ctx, held, c.Op.Kind())
			if c.Op == RecallGuard {
				recalled = time.Now()
			}
		case WaitBridge, WaitGuard:
			err = d.Leases.Wait(ctx, held, c.Op.Kind())
		case SetBridge, SetGuard:
			err = d.Leases.Set(ctx, held, c.Op.Kind(), c.Value)
		case AwaitBridge:
			readers, err = d.awaitBridge(ctx, job, c.Value)
		}
		if err != nil {
			return mv, err
		}
		if err := failpoint.Hit(ctx, c.Op.after()); err != nil {
			return mv, err
		}
	}
	if d.Log != nil {
		now := time.Now()
		attrs := []any{"job", job, "from", g.Value.From, "to", mv.To, "epoch", held.Epoch, "took", now.Sub(start), "bridge", d.Bridged}
		if !recalled.IsZero() {
			attrs = append(attrs, "recall_period", now.Sub(recalled))
		}
		if d.Bridged {
			attrs = append(attrs, "bridge_readers", readers)
		}
		if mv.To != target {
			attrs = append(attrs, "finishing_toward", target)
		}
		d.Log.Info("guard moved", attrs...)
	}
	return mv, nil
}

// awaitBridge waits, up to BridgeWait, until every reader of the guard
// also holds the bridge at want, and returns how many readers hold it.
func (d *Driver) awaitBridge(ctx context.Context, job string, want lease.Value) (int, error) {
	poll := d.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	deadline := time.Now().Add(d.BridgeWait)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		guard, err := d.Leases.Readers(ctx, job, lease.Guard)
		if err != nil {
			return 0, err
		}
		bridge, err := d.Leases.Readers(ctx, job, lease.Bridge)
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

// The failpoints around each call of a move (internal/failpoint):
// guard/before-OP and guard/after-OP, OP one of recall-bridge,
// wait-bridge, set-bridge, await-bridge, recall-guard, wait-guard and
// set-guard. An injected error is the call's error: the move stops there
// and the next Step carries on.
var points = [...][2]string{
	RecallBridge: {"guard/before-recall-bridge", "guard/after-recall-bridge"},
	WaitBridge:   {"guard/before-wait-bridge", "guard/after-wait-bridge"},
	SetBridge:    {"guard/before-set-bridge", "guard/after-set-bridge"},
	AwaitBridge:  {"guard/before-await-bridge", "guard/after-await-bridge"},
	RecallGuard:  {"guard/before-recall-guard", "guard/after-recall-guard"},
	WaitGuard:    {"guard/before-wait-guard", "guard/after-wait-guard"},
	SetGuard:     {"guard/before-set-guard", "guard/after-set-guard"},
}

func (o Op) before() string { return points[o][0] }
func (o Op) after() string  { return points[o][1] }
