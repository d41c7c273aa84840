package assigner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/roles/rpc"
)

// RegisterTask implements slicerv1connect.AssignerServiceHandler: see
// registerTask.
// The answer carries this node's gossip keys, which the task takes as its
// keyring when this is its job's preferred Assigner.
func (a *Assigner) RegisterTask(ctx context.Context, req *connect.Request[slicerv1.RegisterTaskRequest]) (*connect.Response[slicerv1.RegisterTaskResponse], error) {
	if err := validateKeyIDs(req.Msg.GetGossipKeyIds()); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("task %q of job %q registers: %w", req.Msg.GetTask(), req.Msg.GetJob(), err))
	}
	if err := a.registerTask(ctx, req.Msg); err != nil {
		return nil, err
	}
	a.taskKeys.record(gossip.TaskMemberName(req.Msg.GetJob(), req.Msg.GetTask()), req.Msg.GetGossipKeyIds(), time.Now())
	return connect.NewResponse(&slicerv1.RegisterTaskResponse{GossipKeys: a.gossipKeysForTask()}), nil
}

// errNotInGossip is returned to a registration that came before gossip
// showed the member; the Slicelet retries.
var errNotInGossip = errors.New("not an alive member in this assigner's gossip view yet")

func (a *Assigner) registerTask(ctx context.Context, m *slicerv1.RegisterTaskRequest) error {
	if err := assign.ValidateJobName(m.GetJob()); err != nil {
		return rpc.ToConnect(err)
	}
	if err := assign.ValidateTaskName(m.GetTask()); err != nil {
		return rpc.ToConnect(err)
	}
	if a.register == nil {
		return nil // without TLS every member is believed
	}
	c := auth.CallerFrom(ctx)
	if !c.Direct.TaskOf(m.GetJob(), m.GetTask()) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"%s may not register task %q of job %q: that needs a certificate naming %s", c.Direct, m.GetTask(), m.GetJob(),
			identity.ID{Role: identity.Task, Job: m.GetJob(), Task: m.GetTask()}))
	}
	// The member's name is the task's (gossip.TaskMemberName), and only a
	// holder of the task's certificate gets here: the registration binds
	// that name, from its gossip address, to the job, the task and the
	// serving address the request gives, whatever the member's gossip tags
	// say, so that a forger of its gossip state (it has the gossip key)
	// can neither redirect the task's keys nor lock it out of its name.
	if want := gossip.TaskMemberName(m.GetJob(), m.GetTask()); m.GetGossipName() != want {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
			"task %q of job %q joins gossip as %q, not as %q", m.GetTask(), m.GetJob(), m.GetGossipName(), want))
	}
	addr := m.GetRpcAddr()
	if addr != "" {
		if err := gossip.ValidateRPCAddr(addr); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("task %q of job %q registers serving address %q: %w", m.GetTask(), m.GetJob(), addr, err))
		}
	}
	var attrs *gossip.TaskAttributes
	if at := m.GetAttributes(); at != nil {
		attrs = &gossip.TaskAttributes{Capacity: at.GetCapacity(), MemoryLimit: at.GetMemoryLimit(), Draining: at.GetDraining()}
		if err := attrs.Validate(); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("task %q of job %q registers attributes: %w", m.GetTask(), m.GetJob(), err))
		}
	}
	for _, p := range a.rawPeers() {
		if p.Name != m.GetGossipName() {
			continue
		}
		if p.Status != gossip.StatusAlive {
			break
		}
		p.Roles, p.Job, p.Task = []gossip.Role{gossip.RoleTask}, m.GetJob(), m.GetTask()
		if addr != "" {
			p.RPCAddr = addr
		}
		a.register(p, attrs, c.Direct.String())
		return nil
	}
	ce := connect.NewError(connect.CodeUnavailable, fmt.Errorf("gossip member %q is %w; retry shortly", m.GetGossipName(), errNotInGossip))
	ce.Meta().Set(api.RefusalHeader, api.RefusalNotAlive)
	return ce
}
