package assigner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/storage"
)

// Every assignment the Assigner commits is recorded in the job's decision
// history (storage.Historian), in the commit's own write: why it was
// taken, what each phase moved, the churn and the imbalance before and
// after. JobService.GetJobHistory reads it and JobService.ExplainKey
// searches it.

// maxDetailTasks bounds how many tasks a decision's detail names.
const maxDetailTasks = 8

// causeOf says why a decision for job is taken: the trigger, and for a
// change of membership or configuration what changed between cur and the
// live tasks (live as the configuration's controls present them).
func (a *Assigner) causeOf(job string, cur *assign.Assignment, live []assign.Task, load assign.Load, why trigger) (cause, detail string) {
	switch {
	case cur == nil:
		return storage.CauseInitial, fmt.Sprintf("the job's first assignment, over %d tasks", len(live))
	case why == triggerLoad:
		i, imbalance := a.hottestOf(job, cur, load, live)
		return storage.CauseLoad, hottest(cur, i, imbalance)
	}
	switch why {
	case triggerTakeover:
		return storage.CauseTakeover, fmt.Sprintf("assigner %s took the job over", a.self)
	case triggerFlip:
		return storage.CauseHandoff, "the gaining tasks reported ready or the handoff deadline passed: the losing tasks are dropped"
	case triggerRenumber:
		var ahead uint64
		if j, ok := a.known(job); ok {
			ahead = a.aheadOf(j, cur)
		}
		return storage.CauseRenumber, fmt.Sprintf("a task or this assigner holds generation %d of this store's incarnation, above the stored %d: the store went back (restored from an older copy), and the job continues above %d", ahead, cur.Generation, ahead)
	}
	status := map[string]gossip.Status{}
	for _, p := range a.members.Peers() {
		if p.Has(gossip.RoleTask) && p.Job == job {
			// Of two members claiming the task, an alive one speaks for it.
			if s, ok := status[p.Task]; !ok || s != gossip.StatusAlive {
				status[p.Task] = p.Status
			}
		}
	}
	var failed, left, joined, moved, drained []string
	liveByName := make(map[string]assign.Task, len(live))
	for _, t := range live {
		liveByName[t.Name] = t
	}
	for _, t := range cur.Tasks {
		l, ok := liveByName[t.Name]
		switch {
		case !ok && status[t.Name] == gossip.StatusFailed:
			failed = append(failed, t.Name)
		case !ok:
			left = append(left, t.Name)
		case l.Draining:
			drained = append(drained, t.Name)
		case l.Addr != t.Addr:
			moved = append(moved, t.Name)
		}
	}
	for _, t := range live {
		if _, ok := cur.TaskIndex(t.Name); !ok && !t.Draining && !t.Cordoned {
			joined = append(joined, t.Name)
		}
	}
	var parts []string
	describe := func(names []string, what string) {
		switch len(names) {
		case 0:
			return
		case 1:
			parts = append(parts, fmt.Sprintf("task %s %s", names[0], what))
			return
		}
		shown := names[:min(len(names), maxDetailTasks)]
		s := fmt.Sprintf("tasks %s %s", strings.Join(shown, ", "), what)
		if len(names) > len(shown) {
			s = fmt.Sprintf("%d tasks (%s, …) %s", len(names), strings.Join(shown, ", "), what)
		}
		parts = append(parts, s)
	}
	describe(failed, "failed")
	describe(left, "left")
	describe(joined, "joined")
	describe(moved, "came back at a new address")
	describe(drained, "draining")
	switch {
	case len(failed) > 0:
		cause = storage.CauseTaskFailed
	case len(left) > 0:
		cause = storage.CauseTaskLeft
	case len(joined) > 0:
		cause = storage.CauseTaskJoined
	case len(moved) > 0:
		cause = storage.CauseTaskMoved
	default:
		cause = storage.CauseOperator
	}
	if len(parts) == 0 {
		return cause, "the job's configuration changed (redundancy, pins, cordons, algorithm or limits)"
	}
	return cause, strings.Join(parts, "; ")
}

// hottest describes task i of cur as the most utilised, at imbalance
// (assign.Hottest).
func hottest(cur *assign.Assignment, i int, imbalance float64) string {
	if i < 0 {
		return "rebalancing on measured load"
	}
	return fmt.Sprintf("moving load off the hottest task, %s, at %.2f times the mean utilisation", cur.Tasks[i].Name, imbalance)
}

// historyEntry builds the record of a decision about to be committed.
func (a *Assigner) historyEntry(job string, cur *assign.Assignment, live []assign.Task, why trigger, algorithm string,
	d assign.Decision, load assign.Load, before, after float64) storage.HistoryEntry {
	e := storage.NewHistoryEntry(d)
	e.Time = time.Now()
	e.Cause, e.Detail = a.causeOf(job, cur, live, load, why)
	e.Assigner, e.Algorithm = a.self, algorithm
	e.ImbalanceBefore, e.ImbalanceAfter, e.Load = finite(before), finite(after), finite(load.Total())
	return e
}

// finite is f, or 0 when it is NaN or infinite: the history stores
// figures, not IEEE specials.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// algorithmFor names what decide runs for a decision.
func (a *Assigner) algorithmFor(cur *assign.Assignment, live []assign.Task, cfg assign.Config, why trigger) string {
	if why == triggerLoad || a.interval == 0 || !cur.KeepsTask(live) ||
		(why == triggerConfig && !cfg.Frozen && cur.Settled(cfg.Controls(live))) {
		return algorithmOf(cfg).Name()
	}
	return "membership"
}

// GetJobHistory implements slicerv1connect.JobServiceHandler.
func (a *Assigner) GetJobHistory(ctx context.Context, req *connect.Request[slicerv1.GetJobHistoryRequest]) (*connect.Response[slicerv1.GetJobHistoryResponse], error) {
	name := req.Msg.GetJob()
	entries, err := a.history(ctx, name, int(min(req.Msg.GetLimit(), storage.HistoryLimit)))
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	resp := &slicerv1.GetJobHistoryResponse{Decisions: make([]*slicerv1.Decision, len(entries))}
	for i, e := range entries {
		resp.Decisions[i] = decisionToProto(e, nil)
	}
	return connect.NewResponse(resp), nil
}

// history reads a known job's history, newest first.
func (a *Assigner) history(ctx context.Context, name string, limit int) ([]storage.HistoryEntry, error) {
	if _, err := a.peek(ctx, name); err != nil {
		return nil, err
	}
	h, ok := a.store.(storage.Historian)
	if !ok {
		return nil, nil
	}
	return h.History(ctx, name, limit)
}

// ExplainKey implements slicerv1connect.JobServiceHandler.
func (a *Assigner) ExplainKey(ctx context.Context, req *connect.Request[slicerv1.ExplainKeyRequest]) (*connect.Response[slicerv1.ExplainKeyResponse], error) {
	var k assign.SliceKey
	switch w := req.Msg.GetWhich().(type) {
	case *slicerv1.ExplainKeyRequest_Key:
		k = assign.HashKey(w.Key)
	case *slicerv1.ExplainKeyRequest_SliceKey:
		if w.SliceKey >= uint64(assign.KeySpaceEnd) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("slice key %#x is outside the key space [0, 2^63): pass an application key, or a slice key as 'job get' prints them", w.SliceKey))
		}
		k = w.SliceKey
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("explain key: the request names no key: set key (an application key) or slice_key"))
	}
	name := req.Msg.GetJob()
	j, err := a.peek(ctx, name)
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	entries, err := a.history(ctx, name, 0)
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	resp := &slicerv1.ExplainKeyResponse{SliceKey: k}
	if cur := j.pub.Current(); cur != nil {
		resp.Generation = cur.Generation
		s := cur.Slices[cur.Find(k)] // a valid assignment covers every key below KeySpaceEnd
		resp.Slice = &slicerv1.Slice{Start: s.Start, End: s.End, Tasks: slices.Clone(s.Tasks)}
		for _, t := range s.Tasks {
			if ti, ok := cur.TaskIndex(t); ok {
				resp.Tasks = append(resp.Tasks, &slicerv1.Task{Name: t, Address: cur.Tasks[ti].Addr})
			}
		}
	}
	if len(entries) > 0 {
		resp.OldestRecordedGeneration = entries[len(entries)-1].Generation
	}
	for _, e := range entries {
		if d := decisionToProto(e, &k); len(d.Moves) > 0 {
			resp.Decisions = append(resp.Decisions, d)
		}
	}
	return connect.NewResponse(resp), nil
}

// decisionToProto converts a history entry; with key set, only the moves
// whose range holds it are kept.
func decisionToProto(e storage.HistoryEntry, key *assign.SliceKey) *slicerv1.Decision {
	d := &slicerv1.Decision{
		Generation: e.Generation, TimeUnixNano: e.Time.UnixNano(), Cause: e.Cause, Detail: e.Detail,
		Assigner: e.Assigner, Algorithm: e.Algorithm, Churn: e.Churn,
		ImbalanceBefore: e.ImbalanceBefore, ImbalanceAfter: e.ImbalanceAfter, Load: e.Load,
		MovesOmitted: uint32(e.MovesOmitted),
	}
	for _, p := range e.Phases {
		d.Phases = append(d.Phases, &slicerv1.PhaseMoves{Phase: p.Phase, Moves: uint32(p.Moves)})
	}
	for _, m := range e.Moves {
		if key != nil && !m.Covers(*key) {
			continue
		}
		d.Moves = append(d.Moves, &slicerv1.DecisionMove{Phase: m.Phase, Kind: m.Kind, Start: m.Start, End: m.End,
			From: m.From, To: m.To, Reason: m.Reason})
	}
	return d
}
