package roles

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/webui"
	"github.com/slicerd/slicerd/roles/assigner"
	"github.com/slicerd/slicerd/roles/distributor"
)

// The web UI (package internal/webui) reads through services of its own
// that implement only the read-only procedures: even a request that got
// past webui.Handler's filter could not reach a write. The UI has no
// authentication of its own; what it serves is what GetJob, GetJobHistory,
// ExplainKey, GetLoadHistory and GetAssignment serve.

// uiMaxRequestBytes bounds a request through the UI: the largest is an
// ExplainKey with a long key.
const uiMaxRequestBytes = 64 << 10

// UI connection limits: a few operators' browsers, not a fleet.
const (
	uiMaxConnections      = 256
	uiMaxConnectionsPerIP = 64
)

// UIHandler returns the read-only web UI over this node's roles: the page
// under /ui/ and the procedures it calls, behind the RPC port's Host check
// (--allowed-hosts). It is nil when the node runs no Assigner, whose
// JobService the page reads. The assignment comes from the node's
// Distributor, or its Backup without one.
func (a *Agent) UIHandler() http.Handler {
	if a.ui == nil {
		return nil // not a typed nil
	}
	return a.ui
}

// UIAddr is the address the web UI listens on, or "" when Config.UIAddr
// is not set.
func (a *Agent) UIAddr() string {
	if a.uiListener == nil {
		return ""
	}
	return a.uiListener.Addr().String()
}

func (a *Agent) newUIHandler() http.Handler {
	mux := http.NewServeMux()
	opts := connect.WithReadMaxBytes(uiMaxRequestBytes)
	mux.Handle(slicerv1connect.NewJobServiceHandler(readOnlyJobs{a: a.assigner}, opts))
	if a.distributor != nil {
		mux.Handle(slicerv1connect.NewDistributorServiceHandler(readOnlyDistributor{d: a.distributor}, opts))
	} else if a.backup != nil {
		mux.Handle(slicerv1connect.NewBackupServiceHandler(readOnlyBackup{b: a.backup}, opts))
	}
	return a.hosts.Wrap(webui.Handler(mux, a.log.With("component", "webui")))
}

// readOnlyJobs is the Assigner's JobService without its writes, which
// answer UNIMPLEMENTED.
type readOnlyJobs struct {
	slicerv1connect.UnimplementedJobServiceHandler
	a *assigner.Assigner
}

func (r readOnlyJobs) ListJobs(ctx context.Context, req *connect.Request[slicerv1.ListJobsRequest]) (*connect.Response[slicerv1.ListJobsResponse], error) {
	return r.a.ListJobs(ctx, req)
}

func (r readOnlyJobs) GetJob(ctx context.Context, req *connect.Request[slicerv1.GetJobRequest]) (*connect.Response[slicerv1.GetJobResponse], error) {
	return r.a.GetJob(ctx, req)
}

func (r readOnlyJobs) GetJobHistory(ctx context.Context, req *connect.Request[slicerv1.GetJobHistoryRequest]) (*connect.Response[slicerv1.GetJobHistoryResponse], error) {
	return r.a.GetJobHistory(ctx, req)
}

func (r readOnlyJobs) ExplainKey(ctx context.Context, req *connect.Request[slicerv1.ExplainKeyRequest]) (*connect.Response[slicerv1.ExplainKeyResponse], error) {
	return r.a.ExplainKey(ctx, req)
}

func (r readOnlyJobs) GetLoadHistory(ctx context.Context, req *connect.Request[slicerv1.GetLoadHistoryRequest]) (*connect.Response[slicerv1.GetLoadHistoryResponse], error) {
	return r.a.GetLoadHistory(ctx, req)
}

// readOnlyDistributor is the Distributor's GetAssignment alone: the page
// polls, it does not stream.
type readOnlyDistributor struct {
	slicerv1connect.UnimplementedDistributorServiceHandler
	d *distributor.Distributor
}

func (r readOnlyDistributor) GetAssignment(ctx context.Context, req *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	return r.d.GetAssignment(ctx, req)
}

// readOnlyBackup is the Backup's GetAssignment alone.
type readOnlyBackup struct {
	slicerv1connect.UnimplementedBackupServiceHandler
	b *distributor.Backup
}

func (r readOnlyBackup) GetAssignment(ctx context.Context, req *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	return r.b.GetAssignment(ctx, req)
}
