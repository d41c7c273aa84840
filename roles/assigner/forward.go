package assigner

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/startgate"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/auth"
)

// forwardTo returns the Assigner a request for job should go to, and
// whether that is another one: writes (load reports, configuration) are
// taken by the job's lease holder, or its preferred Assigner while nobody
// holds the lease (lease.Leader.Target).
func (a *Assigner) forwardTo(ctx context.Context, job string, h http.Header) (lease.Route, bool) {
	if from := h.Get(auth.ForwardedHeader); from != "" {
		// The sender takes this Assigner for the job's: an adoption, if
		// this one disagrees, lasts as long as the writes keep coming.
		a.leader.Forwarded(ctx, job, from, h.Get(auth.ForwardedToHolderHeader) == "1")
		return lease.Route{}, false
	}
	r := a.leader.Target(job)
	if !r.Self {
		a.forwarded.Add(1)
	}
	return r, !r.Self
}

// forwardRequest marks a request forwarded along r: by this Assigner, for
// the caller, and to a holder or a preferred Assigner. The request then
// waits on that Assigner: it stops counting among this node's starting
// RPCs (--max-starting-rpcs).
func (a *Assigner) forwardRequest(ctx context.Context, h http.Header, r lease.Route) {
	h.Set(auth.ForwardedHeader, a.self)
	h.Set(auth.ForwardedForHeader, auth.ForwardedFor(auth.CallerFrom(ctx).Principal))
	if r.Holder {
		h.Set(auth.ForwardedToHolderHeader, "1")
	}
	startgate.Waiting(ctx) // on the other Assigner, not on this node's CPU
}

// forwardErr turns a failed forward into what the caller sees: the
// preferred Assigner's own answer when it gave one, UNAVAILABLE when it
// could not be reached.
func forwardErr(p gossip.Peer, job, what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() != connect.CodeUnavailable && ce.Code() != connect.CodeUnknown &&
		ce.Code() != connect.CodeDeadlineExceeded && ce.Code() != connect.CodeCanceled {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf(
		"%s for job %q goes to its preferred assigner %s at %s, which cannot be reached (%v); retry shortly: if it failed, another assigner takes the job over",
		what, job, p.Name, p.RPCAddr, err))
}

// forward sends msg, a request of procedure for job, on to the Assigner
// r names, marked as forwarded for this request's caller, and returns
// that Assigner's answer; what names the request in the error a caller
// sees when that Assigner cannot be reached.
func forward[Req, Resp any](ctx context.Context, a *Assigner, r lease.Route, procedure, what, job string, msg *Req) (*connect.Response[Resp], error) {
	hc, base := a.rpcClients.Get(identity.Assigner, r.Peer.Name, r.Peer.RPCAddr)
	req := connect.NewRequest(msg)
	a.forwardRequest(ctx, req.Header(), r)
	resp, err := connect.NewClient[Req, Resp](hc, base+procedure).CallUnary(ctx, req)
	if err != nil {
		return nil, forwardErr(r.Peer, job, what, err)
	}
	return resp, nil
}

// forwardLoad sends a load report on to the job's preferred Assigner.
func (a *Assigner) forwardLoad(ctx context.Context, r lease.Route, req *connect.Request[slicerv1.ReportLoadRequest]) (*connect.Response[slicerv1.ReportLoadResponse], error) {
	resp, err := forward[slicerv1.ReportLoadRequest, slicerv1.ReportLoadResponse](ctx, a, r,
		slicerv1connect.LoadServiceReportLoadProcedure, "a load report", req.Msg.GetJob(), req.Msg)
	if err == nil {
		a.log.Debug("load report forwarded to the preferred assigner", "job", req.Msg.GetJob(), "task", req.Msg.GetTask(), "preferred", r.Peer.Name)
	}
	return resp, err
}

// forwardConfig sends a configuration change on to the job's preferred
// Assigner, and serves the stored result at once.
func (a *Assigner) forwardConfig(ctx context.Context, r lease.Route, req *connect.Request[slicerv1.SetJobConfigRequest]) (*connect.Response[slicerv1.SetJobConfigResponse], error) {
	resp, err := forward[slicerv1.SetJobConfigRequest, slicerv1.SetJobConfigResponse](ctx, a, r,
		slicerv1connect.JobServiceSetJobConfigProcedure, "a configuration change", req.Msg.GetJob(), req.Msg)
	if err != nil {
		return nil, err
	}
	if err := a.refresh(ctx, req.Msg.GetJob()); err != nil {
		a.log.Warn("reading a job configured through another assigner failed", "job", req.Msg.GetJob(), "err", err)
	}
	a.log.Info("job configuration forwarded to the preferred assigner", "job", req.Msg.GetJob(), "preferred", r.Peer.Name)
	return resp, nil
}
