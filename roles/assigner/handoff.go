package assigner

import (
	"context"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/rpc"
)

// Make-before-break moves (assign.Config.HandoffDeadlineMS): a decision
// that takes keys from tasks that are still live is committed in two
// generations. The first (assign.MakeBeforeBreak) adds the gaining tasks
// beside the losing ones: both serve the keys, and the gaining tasks'
// Slicelets fetch their state (slicelet state handoff). The second, the
// decision itself, drops the losing tasks once the deadline has passed.
// The gaining tasks' Slicelets report when they are ready (ReportReady:
// they hold the first step and fetched the state it brought them); once
// every one has, the second step goes at once, without waiting for the
// deadline. Between the two the job waits: load-driven decisions and gossip changes
// that leave its tasks as they were do nothing; a change of its tasks, its
// configuration or its Assigner abandons the second step, and the
// decision taken then starts from the first.

// pendingFlip is the second step of a make-before-break decision.
type pendingFlip struct {
	mid      uint64             // the first step's generation
	next     *assign.Assignment // the decision, committed under mid+1
	live     []assign.Task      // the live tasks it was taken for
	cfg      assign.Config      // and the configuration
	deadline time.Time
	timer    *time.Timer // signals the deadline; stopped when the step goes
	reason   string
	// gaining are the tasks the first step gave keys; ready, those of
	// them that reported ready for it.
	gaining, ready map[string]bool
}

// readyFor records that task is ready for generation gen and reports
// whether every gaining task now is.
func (p *pendingFlip) readyFor(task string, gen uint64) bool {
	if gen >= p.mid && p.gaining[task] {
		p.ready[task] = true
	}
	return len(p.ready) == len(p.gaining)
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
	mid, gaining := assign.MakeBeforeBreak(cur, next, live)
	if mid == nil {
		return nil
	}
	d := time.Duration(cfg.HandoffDeadlineMS) * time.Millisecond
	flip := &pendingFlip{mid: mid.Generation, next: next, live: live, cfg: cfg, deadline: time.Now().Add(d),
		reason:  fmt.Sprintf("make-before-break: the gaining tasks were ready, or the %v handoff deadline passed", d),
		gaining: make(map[string]bool, len(gaining)), ready: make(map[string]bool, len(gaining))}
	for _, t := range gaining {
		flip.gaining[t] = true
	}
	name := j.name
	flip.timer = time.AfterFunc(d, func() {
		select {
		case a.flips <- name:
		default:
		}
	})
	a.mu.Lock()
	setPending(j, flip)
	a.mu.Unlock()
	return mid
}

// setPending replaces j's pending second step with p (nil: none), and
// stops the replaced step's deadline. Called with Assigner.mu held.
func setPending(j *assignerJob, p *pendingFlip) {
	if j.pending != nil && j.pending != p {
		j.pending.timer.Stop()
	}
	j.pending = p
}

// stopFlips drops every pending second step, for Run's end.
func (a *Assigner) stopFlips() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range a.jobs {
		setPending(j, nil)
	}
}

// waitFlip reports whether a decision for why should wait for the job's
// pending second step, and drops the step when the job has moved on.
func (a *Assigner) waitFlip(j *assignerJob, cur *assign.Assignment, live []assign.Task, cfg assign.Config, why trigger) (*pendingFlip, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := j.pending
	if p == nil {
		return nil, false
	}
	sameLive := slices.EqualFunc(p.live, live, func(x, y assign.Task) bool { return x == y })
	switch {
	case cur == nil || cur.Generation != p.mid || !cfg.Equal(p.cfg):
		setPending(j, nil) // another generation or configuration came first
		return nil, false
	case why == triggerFlip && !sameLive:
		// A task failed, joined or left since the step was decided: it
		// could give a failed task keys that the first step still serves
		// by the tasks losing them. The decision for the change goes
		// instead, from the first step.
		setPending(j, nil)
		return nil, false
	case why == triggerFlip:
		// A stray signal (a deadline of a step a store conflict replaced)
		// waits for this step's own readiness or deadline.
		wait := len(p.ready) < len(p.gaining) && time.Now().Before(p.deadline)
		return p, wait
	case why == triggerLoad:
		return p, true
	case why == triggerChange && sameLive:
		return p, true
	}
	setPending(j, nil)
	return nil, false
}

// flipDecision is the second step of p, from cur (the first).
func flipDecision(p *pendingFlip, cur *assign.Assignment) (*assign.Assignment, assign.Decision) {
	next := p.next.Clone()
	next.Generation = cur.Generation + 1
	return next, assign.Changes(cur, next, p.reason)
}

// overdueFlips takes the second steps whose deadlines passed without a
// signal reaching the Run loop.
func (a *Assigner) overdueFlips() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	now := time.Now()
	for name, j := range a.jobs {
		if j.pending != nil && !now.Before(j.pending.deadline) {
			out = append(out, name)
		}
	}
	return out
}

// ReportReady implements slicerv1connect.LoadServiceHandler: a task says it
// holds generation's keys and their state. When every task a pending make-
// before-break step waits for has, the step goes at once. A report for a
// job another Assigner is preferred for is forwarded to it, as load
// reports are; the task must be an alive member of the job in gossip.
func (a *Assigner) ReportReady(ctx context.Context, req *connect.Request[slicerv1.ReportReadyRequest]) (*connect.Response[slicerv1.ReportReadyResponse], error) {
	m := req.Msg
	if err := assign.ValidateJobName(m.GetJob()); err != nil {
		return nil, rpc.ToConnect(fmt.Errorf("report ready: %w", err))
	}
	if err := assign.ValidateTaskName(m.GetTask()); err != nil {
		return nil, rpc.ToConnect(fmt.Errorf("report ready: %w", err))
	}
	if r, elsewhere := a.forwardTo(ctx, m.GetJob(), req.Header()); elsewhere {
		return forward[slicerv1.ReportReadyRequest, slicerv1.ReportReadyResponse](ctx, a, r,
			slicerv1connect.LoadServiceReportReadyProcedure, "a readiness report", m.GetJob(), m)
	}
	if _, err := a.acceptTaskReport(a.readyReports, "readiness", m.GetJob(), m.GetTask()); err != nil {
		return nil, err
	}
	a.mu.Lock()
	var all bool
	if j := a.jobs[m.GetJob()]; j != nil && j.pending != nil {
		all = j.pending.readyFor(m.GetTask(), m.GetGeneration())
	}
	a.mu.Unlock()
	if all {
		select {
		case a.flips <- m.GetJob():
		default:
		}
	}
	a.log.Debug("task ready", "job", m.GetJob(), "task", m.GetTask(), "generation", m.GetGeneration(), "all_ready", all)
	return connect.NewResponse(&slicerv1.ReportReadyResponse{}), nil
}
