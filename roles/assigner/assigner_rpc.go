package assigner

import (
	"context"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/roles/rpc"
)

// WatchAssignment implements slicerv1connect.AssignerServiceHandler.
func (a *Assigner) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	j, err := a.job(ctx, req.Msg.GetJob())
	if err != nil {
		return rpc.ToConnect(err)
	}
	return j.pub.Serve(ctx, a.stopping, req, stream, nil)
}

// ListJobs implements slicerv1connect.JobServiceHandler.
func (a *Assigner) ListJobs(ctx context.Context, _ *connect.Request[slicerv1.ListJobsRequest]) (*connect.Response[slicerv1.ListJobsResponse], error) {
	// With TLS a caller sees the jobs it may read with GetJob, no others:
	// a task or client certificate of one job lists that job only.
	c := auth.CallerFrom(ctx)
	a.mu.Lock()
	jobs := make([]*assignerJob, 0, len(a.jobs))
	for _, j := range a.jobs {
		if !c.Enforce || c.Principal.MayWatch(j.name) {
			jobs = append(jobs, j)
		}
	}
	a.mu.Unlock()
	slices.SortFunc(jobs, func(x, y *assignerJob) int { return strings.Compare(x.name, y.name) })
	resp := &slicerv1.ListJobsResponse{}
	for _, j := range jobs {
		resp.Jobs = append(resp.Jobs, a.jobInfo(j))
	}
	return connect.NewResponse(resp), nil
}

// GetJob implements slicerv1connect.JobServiceHandler.
func (a *Assigner) GetJob(ctx context.Context, req *connect.Request[slicerv1.GetJobRequest]) (*connect.Response[slicerv1.GetJobResponse], error) {
	j, err := a.peek(ctx, req.Msg.GetJob())
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	return connect.NewResponse(&slicerv1.GetJobResponse{Job: a.jobInfo(j)}), nil
}

// tuningChanged reports whether next changes what only the algorithm
// applies (slices per task, the slice cap, churn budgets, load factors,
// the suppression floor, the algorithm or its victim choice): such a
// configuration gets a decision of its own with the algorithm. Redundancy,
// drains, cordons, pins and freezing are what membership decisions apply.
func tuningChanged(prev, next assign.Config) bool {
	p, n := prev.WithDefaults(), next.WithDefaults()
	return p.MinSlicesPerTask != n.MinSlicesPerTask || p.MaxSlicesPerTask != n.MaxSlicesPerTask || p.MaxSlices != n.MaxSlices ||
		p.MergeChurn != n.MergeChurn || p.MoveChurn != n.MoveChurn || p.MergeLoadFactor != n.MergeLoadFactor ||
		p.SplitLoadFactor != n.SplitLoadFactor || p.SuppressBelow != n.SuppressBelow || p.Algorithm != n.Algorithm || p.Victim != n.Victim
}

// setJobConfig is SetJobConfig without its audit line. The
// configuration is validated before anything is stored, and stored before
// the job is rebalanced under it.
func (a *Assigner) setJobConfig(ctx context.Context, req *connect.Request[slicerv1.SetJobConfigRequest]) (*connect.Response[slicerv1.SetJobConfigResponse], error) {
	name := req.Msg.GetJob()
	if err := assign.ValidateJobName(name); err != nil {
		return nil, rpc.ToConnect(err)
	}
	if p, elsewhere := a.forwardTo(ctx, name, req.Header()); elsewhere {
		return a.forwardConfig(ctx, p, req)
	}
	cfg, err := api.ConfigFromProto(req.Msg.GetConfig())
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	if err := a.checkMaxSlices(cfg); err != nil {
		return nil, rpc.ToConnect(err)
	}
	a.setConfig.Lock()
	defer a.setConfig.Unlock()
	if err := a.admitNew(ctx, name); err != nil {
		return nil, rpc.ToConnect(err)
	}
	if v := req.Msg.IfConfigVersion; v != nil {
		err = a.store.SetConfigIf(ctx, name, cfg, *v)
	} else {
		err = a.store.SetConfig(ctx, name, cfg)
	}
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	j, err := a.job(ctx, name)
	if err != nil {
		return nil, rpc.ToConnect(err)
	}
	a.mu.Lock()
	old := j.cfg
	j.cfg, j.configured = cfg, true
	j.cfgSet++
	a.mu.Unlock()
	a.log.Info("job configured", "job", name, "min_redundancy", cfg.MinRedundancy, "max_redundancy", cfg.MaxRedundancy)
	if tuningChanged(old, cfg) {
		select {
		case a.configs <- name:
			return connect.NewResponse(&slicerv1.SetJobConfigResponse{Job: a.jobInfo(j)}), nil
		default: // a burst of configurations: the kick decides on membership, the next load decision on the rest
		}
	}
	a.kickDecision()
	return connect.NewResponse(&slicerv1.SetJobConfigResponse{Job: a.jobInfo(j)}), nil
}
