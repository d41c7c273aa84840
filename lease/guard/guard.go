// Package guard is the strong protocol's state machine: how the holder of
// a job's lease moves the job's guard and bridge from one generation to
// the next (Plan), and how a task's Slicelet follows them (Follow). Both
// are pure functions of what the caller last saw of the two leases; the
// Assigner and the Slicelet run them against a real lease.Manager, and
// the model test in this package runs the same functions against every
// interleaving of a bounded system with crashes, takeovers, errors,
// expiries and manager restarts, checking that no key is ever usable by
// two tasks and that no key's fencing token goes back.
//
// # The invariant
//
// A reader of the guard at generation g may use the keys g assigns it,
// with token g. A reader of the bridge f→t may use the keys both f and t
// assign it, with token f. Two readers agree on every key when their
// values are equal, or when one is the bridge f→t and the other the guard
// at f or at t. So the driver keeps every pair of live reads that way:
//
//   - it opens a bridge f→t only while the guard is open at f, after the
//     previous bridge's readers are gone;
//   - it sets the guard to n only once the guard's own readers are gone
//     and the bridge either leads to n or has no reader left (recalled and
//     waited for).
//
// A move interrupted after the guard was recalled (its driver paused,
// crashed, lost the job lease, or saw a manager error) leaves the guard
// recalled at f and the bridge f→t open; whoever plans next finishes that
// move to t before going further, so the bridge's readers keep their keys
// and no guard ever opens beside a bridge that leads elsewhere.
//
// The manager enforces the rest: a value replaces another only when no
// reader holds it (lease.ErrBusy), and only under the job's current lease
// (lease.ErrLost), so a driver whose lease has passed to another holder
// changes nothing. Plan reads the two leases' states separately and may be
// acted on late; that is safe because only the holder of the current job
// lease changes a value, and a recalled lease's readers only go.
//
// It owns the protocol's decisions and the Driver that makes the
// writer's calls. It must not keep goroutines, timers or connections of
// its own: the Assigner (roles/assigner) owns each job's driver goroutine
// and its retries, and the Slicelet its read loop, its clock and its
// handles.
package guard

import (
	"fmt"

	"github.com/slicerd/slicerd/lease"
)

// Op is one lease-manager call of a move.
type Op uint8

const (
	// RecallBridge closes the bridge to readers (Manager.Recall).
	RecallBridge Op = iota + 1
	// WaitBridge waits until no reader holds the bridge (Manager.Wait).
	WaitBridge
	// SetBridge opens the bridge at Call.Value (Manager.Set).
	SetBridge
	// AwaitBridge gives the guard's readers time to take the bridge at
	// Call.Value: it polls Manager.Readers until every reader of the
	// guard holds it, or the driver's patience ends. Safety never depends
	// on it; the keys a reader keeps through the move do.
	AwaitBridge
	// RecallGuard closes the guard to readers.
	RecallGuard
	// WaitGuard waits until no reader holds the guard.
	WaitGuard
	// SetGuard opens the guard at Call.Value.
	SetGuard
)

func (o Op) String() string {
	switch o {
	case RecallBridge:
		return "recall bridge"
	case WaitBridge:
		return "wait for bridge readers"
	case SetBridge:
		return "set bridge"
	case AwaitBridge:
		return "await bridge readers"
	case RecallGuard:
		return "recall guard"
	case WaitGuard:
		return "wait for guard readers"
	case SetGuard:
		return "set guard"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Kind is the lease an op acts on.
func (o Op) Kind() lease.Kind {
	if o <= AwaitBridge {
		return lease.Bridge
	}
	return lease.Guard
}

// Call is one step of a move.
type Call struct {
	Op    Op
	Value lease.Value // SetBridge, AwaitBridge, SetGuard
}

func (c Call) String() string {
	if c.Op == SetBridge || c.Op == AwaitBridge || c.Op == SetGuard {
		return c.Op.String() + " " + c.Value.String()
	}
	return c.Op.String()
}

// Move is what Plan decides.
type Move struct {
	// Done: the guard is open at the target; nothing to do.
	Done bool
	// Behind: a lease names a generation above the target, so the
	// caller's view of the store is behind; it reads the newest
	// assignment and plans again.
	Behind bool
	// To is the generation the guard is at once Calls succeed: the
	// target, or a generation on the way that finishes an interrupted
	// move (the caller plans again from there).
	To uint64
	// Calls are made in order; after any error the caller reads the two
	// leases again and plans anew.
	Calls []Call
}

// Plan returns the calls that move the guard one transition towards
// target, the newest committed generation whose assignment gives every key
// to at most one task, from the guard and bridge as last read. With
// bridged, keys that stay with their task are usable throughout (Slicer
// §4.5's bridge); without, every key waits for the guard.
func Plan(target uint64, g, b lease.State, bridged bool) Move {
	switch {
	case target == 0:
		return Move{Done: true}
	case g.Set && g.Value.From > target, b.Set && b.Value.To > target:
		return Move{Behind: true}
	case g.Set && !g.Recalled && g.Value.From == target:
		return Move{Done: true}
	}
	f := g.Value.From
	to := target
	// An interrupted move from the guard's generation: finish it first,
	// so that its readers keep the keys the bridge gave them. A recalled
	// bridge is finished only once the guard is recalled too: with the
	// guard still open, its readers may take a new bridge instead.
	if g.Set && b.Set && b.Value.From == f && b.Value.To < target && (g.Recalled || !b.Recalled) {
		to = b.Value.To
	}
	var calls []Call
	bridge := b // the bridge as it is after the calls so far
	if g.Set && !g.Recalled {
		if bridged {
			want := lease.Value{From: f, To: to}
			if !bridge.Set || bridge.Recalled || bridge.Value != want {
				if bridge.Set && !bridge.Recalled {
					calls = append(calls, Call{Op: RecallBridge})
				}
				if bridge.Set {
					calls = append(calls, Call{Op: WaitBridge})
				}
				calls = append(calls, Call{Op: SetBridge, Value: want})
				bridge = lease.State{Set: true, Value: want}
			}
			calls = append(calls, Call{Op: AwaitBridge, Value: want})
		}
		calls = append(calls, Call{Op: RecallGuard})
	}
	// A bridge that does not lead to the new guard value loses its
	// readers first.
	if bridge.Set && bridge.Value.To != to {
		if !bridge.Recalled {
			calls = append(calls, Call{Op: RecallBridge})
		}
		calls = append(calls, Call{Op: WaitBridge})
	}
	if g.Set {
		calls = append(calls, Call{Op: WaitGuard})
	}
	calls = append(calls, Call{Op: SetGuard, Value: lease.GuardValue(to)})
	return Move{To: to, Calls: calls}
}

// Held is what a reader holds, as its Slicelet judges it: the value of
// each lease it has read (zero: none), whether that read is still within
// its deadline, and whether its renewal is due.
type Held struct {
	Guard, Bridge           lease.Value
	GuardValid, BridgeValid bool
	GuardDue, BridgeDue     bool
}

// ReadOp is one step of a reader.
type ReadOp uint8

const (
	// Idle: nothing to do until the leases change or a renewal is due.
	Idle ReadOp = iota
	// DropGuard: the guard moved on, so the manager let this reader's
	// read end; stop using it.
	DropGuard
	// DropBridge: the bridge held was replaced, or the guard passed its
	// target; stop using it and release it.
	DropBridge
	// RenewGuard reads the guard again at the value held.
	RenewGuard
	// RenewBridge reads the bridge again at the value held.
	RenewBridge
	// ReleaseGuard: the bridge from the guard's generation is held; wait
	// for handles on the keys it does not cover, stop using the guard and
	// release it, so that its recall need not wait for the read to expire.
	ReleaseGuard
	// TakeBridge reads the bridge at ReadStep.Value.
	TakeBridge
	// ReadGuard reads the guard at ReadStep.Value. Once it is granted,
	// the reader stops using its bridge, if it holds one, in the same
	// step (the guard covers every key the bridge did, with a newer
	// token, and a guard read that lapsed must not leave the bridge's
	// older token in use), and then releases it.
	ReadGuard
)

func (o ReadOp) String() string {
	switch o {
	case Idle:
		return "idle"
	case DropGuard:
		return "drop guard"
	case DropBridge:
		return "drop bridge"
	case RenewGuard:
		return "renew guard"
	case RenewBridge:
		return "renew bridge"
	case ReleaseGuard:
		return "release guard"
	case TakeBridge:
		return "take bridge"
	case ReadGuard:
		return "read guard"
	}
	return fmt.Sprintf("readop(%d)", uint8(o))
}

// ReadStep is what Follow decides.
type ReadStep struct {
	Op    ReadOp
	Value lease.Value // TakeBridge, ReadGuard
}

func (s ReadStep) String() string {
	if s.Op == TakeBridge || s.Op == ReadGuard {
		return s.Op.String() + " " + s.Value.String()
	}
	return s.Op.String()
}

// Follow returns a reader's next step, given what it holds, the guard and
// bridge as the manager last reported them, and which generations'
// assignments it has (a reader can use a value only with the assignments
// it names). The reader calls it again after each step, with the states
// the step's response reported.
func Follow(h Held, g, b lease.State, have func(gen uint64) bool) ReadStep {
	zero := lease.Value{}
	switch {
	case h.Guard != zero && g.Set && g.Value.From > h.Guard.From:
		return ReadStep{Op: DropGuard}
	case h.Bridge != zero && (!b.Set || b.Value != h.Bridge || (g.Set && g.Value.From > h.Bridge.To)):
		return ReadStep{Op: DropBridge}
	case h.Guard != zero && h.Bridge != zero && h.BridgeValid && h.Bridge.From == h.Guard.From:
		// Before any renewal: a guard whose bridge is held is given up,
		// never read again, so that its recall need not wait for it.
		return ReadStep{Op: ReleaseGuard}
	case h.Guard != zero && h.GuardDue && g.Set && !g.Recalled && g.Value == h.Guard:
		return ReadStep{Op: RenewGuard}
	case h.Bridge != zero && h.BridgeDue && !b.Recalled:
		return ReadStep{Op: RenewBridge}
	case h.Bridge == zero && h.Guard != zero && h.GuardValid && b.Set && !b.Recalled && b.Value.From == h.Guard.From &&
		have(b.Value.From) && have(b.Value.To):
		return ReadStep{Op: TakeBridge, Value: b.Value}
	case g.Set && !g.Recalled && (h.Guard == zero || g.Value.From > h.Guard.From) && have(g.Value.From) &&
		(h.Bridge == zero || g.Value.From >= h.Bridge.To):
		return ReadStep{Op: ReadGuard, Value: g.Value}
	}
	return ReadStep{Op: Idle}
}
