package assigner

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/auth"
)

// An admin write (SetJobConfig, DeleteJob) is recorded by one INFO line
// with component=audit at the Assigner the caller reached, whether it
// applied the write or forwarded it to the job's preferred Assigner, and
// whether it succeeded or was refused. The Assigner a write was forwarded to
// records none, so each request is logged once, by the node that saw its
// caller.

// auditEntry is one admin write, as its audit line records it.
type auditEntry struct {
	// procedure is the RPC's full name, such as
	// slicerv1connect.JobServiceDeleteJobProcedure.
	procedure string
	job       string
	// caller is who asked: see callerOf.
	caller string
	// before and after summarise the job on either side of the change
	// (summarize); after is empty when the write failed.
	before, after string
	err           error
}

// callerOf names the caller of an admin write for the audit line: with
// TLS, its verified identities (certificate URIs, "token:NAME") and the
// address the request came from; without, the address alone.
func callerOf(ctx context.Context, req connect.AnyRequest) string {
	if c := auth.CallerFrom(ctx); c.Enforce {
		return c.Principal.String() + " from " + req.Peer().Addr
	}
	return req.Peer().Addr
}

// forwardedWrite reports whether another Assigner forwarded the request,
// which it has then already audited.
func forwardedWrite(h http.Header) bool { return h.Get(auth.ForwardedHeader) != "" }

// audit logs e.
func (a *Assigner) audit(e auditEntry) {
	outcome := "ok"
	if e.err != nil {
		outcome = connect.CodeOf(e.err).String()
	}
	args := []any{"component", "audit", "procedure", e.procedure, "job", e.job, "caller", e.caller,
		"before", e.before, "after", e.after, "outcome", outcome}
	if e.err != nil {
		args = append(args, "err", e.err)
	}
	a.log.Info("admin write", args...)
}

// summarize describes a job's state for the audit line: its configuration
// and served generation.
func summarize(cfg assign.Config, configured bool, generation uint64) string {
	s := fmt.Sprintf("min_redundancy=%d max_redundancy=%d", cfg.MinRedundancy, cfg.MaxRedundancy)
	if cfg.Algorithm != "" {
		s += " algorithm=" + cfg.Algorithm
	}
	if cfg.Frozen {
		s += " frozen=true"
	}
	if len(cfg.Drained) > 0 {
		s += " drained=" + strings.Join(cfg.Drained, ",")
	}
	if len(cfg.Cordoned) > 0 {
		s += " cordoned=" + strings.Join(cfg.Cordoned, ",")
	}
	for _, p := range cfg.Pins {
		s += fmt.Sprintf(" pin=[%#x,%#x)->%s", p.Start, p.End, p.Task)
		if p.Reason != "" {
			s += fmt.Sprintf("(%q)", p.Reason)
		}
	}
	if !configured {
		s = "default config (" + s + ")"
	}
	return fmt.Sprintf("%s generation=%d", s, generation)
}

// auditState summarises the job as this Assigner sees it before a write:
// from its own state when it has the job, else from the store. It costs at
// most one store read.
func (a *Assigner) auditState(ctx context.Context, name string) string {
	if assign.ValidateJobName(name) != nil {
		return "invalid job name"
	}
	j, err := a.peek(ctx, name)
	if err != nil {
		return "absent"
	}
	a.mu.Lock()
	cfg, configured := j.cfg, j.configured
	a.mu.Unlock()
	var gen uint64
	if cur := j.pub.Current(); cur != nil {
		gen = cur.Generation
	}
	return summarize(cfg, configured, gen)
}

// SetJobConfig implements slicerv1connect.JobServiceHandler: setJobConfig,
// recorded by an audit line. Who may call it: an admin only. It costs at
// most two store reads and one store write, plus a forward to the job's
// preferred Assigner when that is another one.
func (a *Assigner) SetJobConfig(ctx context.Context, req *connect.Request[slicerv1.SetJobConfigRequest]) (*connect.Response[slicerv1.SetJobConfigResponse], error) {
	if forwardedWrite(req.Header()) {
		return a.setJobConfig(ctx, req)
	}
	name := req.Msg.GetJob()
	before := a.auditState(ctx, name)
	resp, err := a.setJobConfig(ctx, req)
	e := auditEntry{procedure: slicerv1connect.JobServiceSetJobConfigProcedure, job: name, caller: callerOf(ctx, req), before: before, err: err}
	if err == nil {
		info := resp.Msg.GetJob()
		cfg, cerr := api.ConfigFromProto(info.GetConfig())
		if cerr == nil {
			e.after = summarize(cfg, info.GetConfigured(), info.GetGeneration())
		}
	}
	a.audit(e)
	return resp, err
}
