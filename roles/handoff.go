package roles

import (
	"fmt"
	"slices"
	"time"

	"github.com/slicerd/slicerd/assign"
)

// Make-before-break moves (assign.Config.HandoffDeadlineMS): a decision
// that takes keys from tasks that are still live is committed in two
// generations. The first (assign.MakeBeforeBreak) adds the gaining tasks
// beside the losing ones: both serve the keys, and the gaining tasks'
// Slicelets fetch their state (slicelet state handoff). The second, the
// decision itself, drops the losing tasks once the deadline has passed.
// Between the two the job waits: load-driven decisions and gossip changes
// that leave its tasks as they were do nothing; a change of its tasks, its
// configuration or its Assigner abandons the second step, and the
// decision taken then starts from the first.

// pendingFlip is the second step of a make-before-break decision.
type pendingFlip struct {
	mid      uint64             // the first step's generation
	next     *assign.Assignment // the decision, committed under mid+1
	live     []assign.Task      // the live tasks it was taken for
	deadline time.Time
	reason   string
}

// triggerFlip takes the second step of a make-before-break decision.
const triggerFlip trigger = 100

// flipSignals bounds the deadlines waiting for the Run loop; a deadline
// that finds it full is taken at the next rebalance tick.
const flipSignals = 64

// makeBeforeBreak returns the first step towards next and arms the second,
// or nil when next breaks nothing (or make-before-break is off).
func (a *Assigner) makeBeforeBreak(j *assignerJob, cfg assign.Config, cur, next *assign.Assignment, live []assign.Task, why trigger) *assign.Assignment {
	if cfg.HandoffDeadlineMS == 0 || cur == nil || why == triggerTakeover || why == triggerFlip {
		return nil
	}
	mid := assign.MakeBeforeBreak(cur, next, live)
	if mid == nil {
		return nil
	}
	d := time.Duration(cfg.HandoffDeadlineMS) * time.Millisecond
	flip := &pendingFlip{mid: mid.Generation, next: next, live: live, deadline: a.loads.now().Add(d),
		reason: fmt.Sprintf("make-before-break: the gaining tasks have served beside the losing ones for the %v handoff deadline", d)}
	a.mu.Lock()
	j.pending = flip
	a.mu.Unlock()
	name := j.name
	time.AfterFunc(d, func() {
		select {
		case a.flips <- name:
		default:
		}
	})
	return mid
}

// waitFlip reports whether a decision for why should wait for the job's
// pending second step, and drops the step when the job has moved on.
func (a *Assigner) waitFlip(j *assignerJob, cur *assign.Assignment, live []assign.Task, why trigger) (*pendingFlip, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := j.pending
	switch {
	case p == nil:
		return nil, false
	case cur == nil || cur.Generation != p.mid:
		j.pending = nil // another generation came first
		return nil, false
	case why == triggerFlip:
		return p, false
	case why == triggerLoad:
		return p, true
	case why == triggerChange && slices.EqualFunc(p.live, live, func(x, y assign.Task) bool { return x == y }):
		return p, true
	}
	j.pending = nil
	return nil, false
}

// flipDecision is the second step of p, from cur (the first).
func flipDecision(p *pendingFlip, cur *assign.Assignment) (*assign.Assignment, assign.Decision) {
	next := p.next.Clone()
	next.Generation = cur.Generation + 1
	d := assign.Decision{Changed: true, Churn: assign.Churn(cur, next)}
	for _, s := range cur.Slices {
		for _, t := range s.Tasks {
			k := next.Find(s.Start)
			if !slices.Contains(next.Slices[k].Tasks, t) {
				d.Moves = append(d.Moves, assign.Move{Kind: assign.RemoveReplica, Start: s.Start, End: s.End, From: t, Reason: p.reason})
			}
		}
	}
	return next, d
}

// overdueFlips takes the second steps whose deadlines passed without a
// signal reaching the Run loop.
func (a *Assigner) overdueFlips() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	now := a.loads.now()
	for name, j := range a.jobs {
		if j.pending != nil && !now.Before(j.pending.deadline) {
			out = append(out, name)
		}
	}
	return out
}
