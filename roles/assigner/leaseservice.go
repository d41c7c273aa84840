package assigner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/rpc"
)

// Lease calls are paced per task: a Slicelet renews its guard and bridge
// every third of their TTL, and while a transition waits on it reads the
// leases' state every 20 ms, taking the bridge and the next guard as they
// come: about 50 calls a second at most. A task that calls more is
// refused with RESOURCE_EXHAUSTED.
const (
	leaseCallsPerSecond = 100
	leaseCallBurst      = 200
)

// maxReadTTL caps the read leases granted to tasks, whatever they ask: a
// task that dies holding the guard holds up the next change of assignment
// for at most this long.
const maxReadTTL = 10 * time.Second

// ReadLease implements LeaseService: the calling task's read lease on a
// strongly consistent job's guard or bridge, and both leases' state.
func (a *Assigner) ReadLease(ctx context.Context, req *connect.Request[slicerv1.ReadLeaseRequest]) (*connect.Response[slicerv1.ReadLeaseResponse], error) {
	m := req.Msg
	kind, err := a.checkLeaseCall(m.GetJob(), m.GetTask(), m.GetKind())
	if err != nil {
		return nil, err
	}
	resp := &slicerv1.ReadLeaseResponse{Incarnation: a.store.Incarnation()}
	j, err := a.job(ctx, m.GetJob())
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	a.mu.Lock()
	resp.Strong = j.cfg.IsStrong()
	a.mu.Unlock()
	if v := m.GetValue(); v != nil {
		if !resp.Strong {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"job %q is not configured for strong consistency, so it has no guard or bridge to read; set it with 'slicerd job set %s --consistency strong', or run the task's Slicelet in affinity mode",
				m.GetJob(), m.GetJob()))
		}
		ttl := min(time.Duration(m.GetTtlMs())*time.Millisecond, maxReadTTL)
		val := lease.Value{From: v.GetFromGeneration(), To: v.GetToGeneration()}
		// A read by another process of the task than the one holding a
		// live read is refused (lease.ErrOtherProcess, FAILED_PRECONDITION
		// with api.RefusalOtherProcess), whatever the leases' state.
		r, err := a.leases.Read(ctx, m.GetJob(), kind, m.GetTask(), m.GetInstance(), val, ttl)
		switch {
		case err == nil:
			resp.Granted = true
			resp.TtlMs = uint32(min(r.TTL.Milliseconds(), math.MaxUint32))
		case errors.Is(err, lease.ErrRecalled):
		default:
			return nil, rpc.ToConnect(err)
		}
	}
	for _, k := range []lease.Kind{lease.Guard, lease.Bridge} {
		st, err := a.leases.State(ctx, m.GetJob(), k)
		if err != nil {
			return nil, rpc.ToConnect(err)
		}
		ps := &slicerv1.LeaseState{Set: st.Set, Recalled: st.Recalled,
			Value: &slicerv1.LeaseValue{FromGeneration: st.Value.From, ToGeneration: st.Value.To}}
		if k == lease.Guard {
			resp.Guard = ps
		} else {
			resp.Bridge = ps
		}
	}
	return connect.NewResponse(resp), nil
}

// ReleaseLease implements LeaseService.
func (a *Assigner) ReleaseLease(ctx context.Context, req *connect.Request[slicerv1.ReleaseLeaseRequest]) (*connect.Response[slicerv1.ReleaseLeaseResponse], error) {
	m := req.Msg
	kind, err := a.checkLeaseCall(m.GetJob(), m.GetTask(), m.GetKind())
	if err != nil {
		return nil, err
	}
	v := lease.Value{From: m.GetValue().GetFromGeneration(), To: m.GetValue().GetToGeneration()}
	if err := a.leases.Unread(ctx, m.GetJob(), kind, m.GetTask(), m.GetInstance(), v); err != nil {
		return nil, rpc.ToConnect(err)
	}
	return connect.NewResponse(&slicerv1.ReleaseLeaseResponse{}), nil
}

// checkLeaseCall validates a lease call's job, task and kind, refuses a
// task gossip does not list as an alive member of the job, so that the
// readers a lease manager keeps are the job's live tasks, and paces the
// task's calls. The membership is the current version's index (liveWith):
// a job's tasks renew their leases every third of a TTL, and read them
// every 20 ms while a transition waits, so a read of every member per
// call cost an Assigner of a strong job of n tasks n calls × every member.
func (a *Assigner) checkLeaseCall(job, task string, kind slicerv1.LeaseKind) (lease.Kind, error) {
	if err := assign.ValidateJobName(job); err != nil {
		return 0, rpc.ToConnect(err)
	}
	if err := assign.ValidateTaskName(task); err != nil {
		return 0, rpc.ToConnect(err)
	}
	var k lease.Kind
	switch kind {
	case slicerv1.LeaseKind_LEASE_KIND_GUARD:
		k = lease.Guard
	case slicerv1.LeaseKind_LEASE_KIND_BRIDGE:
		k = lease.Bridge
	default:
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("lease kind %d is neither guard (1) nor bridge (2)", kind))
	}
	if _, ok := a.liveWith(job, task); !ok {
		return 0, rpc.ToConnect(fmt.Errorf("%w: task %q is not an alive member of job %q in gossip, so it may hold none of the job's leases; "+
			"start the task's Slicelet (it joins gossip first) or wait until gossip has seen it join", rpc.ErrNotMember, task, job))
	}
	if ok, wait := a.leaseCalls.allow(job, task, time.Now()); !ok {
		return 0, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"task %q of job %q makes more than %d lease calls per second (burst %d); retry in %v",
			task, job, leaseCallsPerSecond, leaseCallBurst, wait.Round(time.Millisecond)))
	}
	return k, nil
}
