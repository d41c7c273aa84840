package roles

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
)

// ForwardedHeader marks a request one Assigner forwarded to another, with
// the forwarding Assigner's name as its value. A request that carries it is
// handled where it lands and never forwarded again, so two Assigners whose
// views of gossip disagree cannot bounce it between them.
const ForwardedHeader = "Slicerd-Forwarded-By"

// forwardTo returns the Assigner a request for job should go to, and
// whether that is another one: writes (load reports, configuration) are
// taken by the job's preferred Assigner.
func (a *Assigner) forwardTo(job string, h http.Header) (gossip.Peer, bool) {
	if from := h.Get(ForwardedHeader); from != "" {
		// Judged on the estimates alone, so that an adoption is renewed
		// for as long as the writes keep coming.
		if p, ok := a.choices.Preferred(a.pref, job, a.members.Peers(), a.rtt); ok && p.Name != a.self {
			a.adopt(job, "assigner "+from+" forwards the job's writes here")
		}
		return gossip.Peer{}, false
	}
	p, self := a.preferred(job)
	if !self {
		a.forwarded.Add(1)
	}
	return p, !self
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

// forwardLoad sends a load report on to the job's preferred Assigner.
func (a *Assigner) forwardLoad(ctx context.Context, p gossip.Peer, req *connect.Request[slicerv1.ReportLoadRequest]) (*connect.Response[slicerv1.ReportLoadResponse], error) {
	client := slicerv1connect.NewLoadServiceClient(a.rpcClients.get(identity.Assigner, p.Name, p.RPCAddr))
	fwd := connect.NewRequest(req.Msg)
	fwd.Header().Set(ForwardedHeader, a.self)
	fwd.Header().Set(ForwardedForHeader, forwardedFor(callerFrom(ctx).p))
	resp, err := client.ReportLoad(ctx, fwd)
	if err != nil {
		return nil, forwardErr(p, req.Msg.GetJob(), "a load report", err)
	}
	a.log.Debug("load report forwarded to the preferred assigner", "job", req.Msg.GetJob(), "task", req.Msg.GetTask(), "preferred", p.Name)
	return resp, nil
}

// forwardConfig sends a configuration change on to the job's preferred
// Assigner, and serves the stored result at once.
func (a *Assigner) forwardConfig(ctx context.Context, p gossip.Peer, req *connect.Request[slicerv1.SetJobConfigRequest]) (*connect.Response[slicerv1.SetJobConfigResponse], error) {
	client := slicerv1connect.NewJobServiceClient(a.rpcClients.get(identity.Assigner, p.Name, p.RPCAddr))
	fwd := connect.NewRequest(req.Msg)
	fwd.Header().Set(ForwardedHeader, a.self)
	fwd.Header().Set(ForwardedForHeader, forwardedFor(callerFrom(ctx).p))
	resp, err := client.SetJobConfig(ctx, fwd)
	if err != nil {
		return nil, forwardErr(p, req.Msg.GetJob(), "a configuration change", err)
	}
	if err := a.refresh(ctx, req.Msg.GetJob()); err != nil {
		a.log.Warn("reading a job configured through another assigner failed", "job", req.Msg.GetJob(), "err", err)
	}
	a.log.Info("job configuration forwarded to the preferred assigner", "job", req.Msg.GetJob(), "preferred", p.Name)
	return resp, nil
}
