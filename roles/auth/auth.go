package auth

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/reqctx"
)

const ForwardedHeader = "Slicerd-Forwarded-By"

const ForwardedToHolderHeader = "Slicerd-Forwarded-To-Holder"

const ForwardedForHeader = "Slicerd-Forwarded-For"

type Token struct {
	Name   string
	Secret string
}

var ErrConfig = errors.New("invalid admin tokens")

const minTokenLen = 32

func LoadTokenFile(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: token file: %w", ErrConfig, err)
	}
	defer f.Close()
	var tokens []Token
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%w: token file %s line %d: want \"NAME SECRET\"", ErrConfig, path, n)
		}
		tokens = append(tokens, Token{Name: fields[0], Secret: fields[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: token file %s: %w", ErrConfig, path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: token file %s holds no token; add lines \"NAME SECRET\"", ErrConfig, path)
	}
	return tokens, nil
}

func ValidateTokens(tokens []Token) error {
	seen := map[string]bool{}
	for _, t := range tokens {
		if t.Name == "" || strings.ContainsAny(t.Name, ", \t") {
			return fmt.Errorf("%w: admin token name %q must be non-empty without spaces or commas", ErrConfig, t.Name)
		}
		if len(t.Secret) < minTokenLen {
			return fmt.Errorf("%w: admin token %q is %d characters; use at least %d random ones (e.g. openssl rand -hex 32)", ErrConfig, t.Name, len(t.Secret), minTokenLen)
		}
		if seen[t.Name] {
			return fmt.Errorf("%w: admin token name %q is listed twice", ErrConfig, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

type Caller struct {
	// Enforce is set when the agent authenticates callers (TLS is on);
	// without it every caller is trusted, as on a private network.
	Enforce bool
	// Principal is the caller, or for a request forwarded by an Assigner,
	// the original caller as the forwarding Assigner verified it.
	Principal identity.Principal
	// Direct is who sent this request: the forwarding Assigner itself for
	// a forwarded one.
	Direct identity.Principal
	Addr   string
}

type callerKey struct{}

func CallerFrom(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	var c Caller
	if v := reqctx.From(ctx); v != nil {
		c, _ = v.Caller.(Caller)
	}
	return c
}

func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

type access int

const (
	accessAdmin access = iota // an admin identity or token (the default)
	accessPublic
	accessAuthenticated
	accessAgent
	accessAdminOrAssigner // admin, or an Assigner forwarding an admin's request
	accessTaskOrAssigner  // a task, or an Assigner forwarding a task's request
	accessTask            // a task itself
)

var procedureAccess = map[string]access{
	slicerv1connect.AssignerServiceWatchAssignmentProcedure:    accessAgent,
	slicerv1connect.DistributorServiceWatchAssignmentProcedure: accessAuthenticated,
	slicerv1connect.DistributorServiceGetAssignmentProcedure:   accessAuthenticated,
	slicerv1connect.BackupServiceWatchAssignmentProcedure:      accessAuthenticated,
	slicerv1connect.BackupServiceGetAssignmentProcedure:        accessAuthenticated,
	slicerv1connect.JobServiceListJobsProcedure:                accessAuthenticated,
	slicerv1connect.JobServiceGetJobProcedure:                  accessAuthenticated,
	slicerv1connect.JobServiceGetJobHistoryProcedure:           accessAuthenticated,
	slicerv1connect.JobServiceExplainKeyProcedure:              accessAuthenticated,
	slicerv1connect.JobServiceGetLoadHistoryProcedure:          accessAuthenticated,
	slicerv1connect.JobServiceSetJobConfigProcedure:            accessAdminOrAssigner,
	slicerv1connect.JobServiceDeleteJobProcedure:               accessAdminOrAssigner,
	slicerv1connect.LoadServiceReportLoadProcedure:             accessTaskOrAssigner,
	slicerv1connect.LoadServiceReportReadyProcedure:            accessTaskOrAssigner,
	slicerv1connect.AssignerServiceRegisterTaskProcedure:       accessTask,
	slicerv1connect.LeaseServiceReadLeaseProcedure:             accessTask,
	slicerv1connect.LeaseServiceReleaseLeaseProcedure:          accessTask,
	// Listing the keys tells an attacker which key to steal.
	slicerv1connect.KeyringServiceListKeysProcedure:   accessAdmin,
	slicerv1connect.KeyringServiceInstallKeyProcedure: accessAdmin,
	slicerv1connect.KeyringServiceUseKeyProcedure:     accessAdmin,
	slicerv1connect.KeyringServiceRemoveKeyProcedure:  accessAdmin,
	// An agent shares an admin's keyring change with the others.
	slicerv1connect.KeyringServiceShareKeyChangeProcedure: accessAgent,
}

func accessOf(procedure string) access {
	if a, ok := procedureAccess[procedure]; ok {
		return a
	}
	for _, public := range []string{grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName} {
		if strings.HasPrefix(procedure, "/"+public+"/") {
			return accessPublic
		}
	}
	return accessAdmin
}

type Authenticator struct {
	enforce  bool
	tokens   map[[32]byte]string // SHA-256 of a secret → its name
	errors   *connect.ErrorWriter
	refusals *Refusals // may be nil
}

// New returns the Authenticator of an agent; refusals (nil: none) counts
// and logs the calls it refuses.
func New(enforce bool, tokens []Token, refusals *Refusals) *Authenticator {
	au := &Authenticator{enforce: enforce, tokens: map[[32]byte]string{}, errors: connect.NewErrorWriter(), refusals: refusals}
	for _, t := range tokens {
		au.tokens[sha256.Sum256([]byte(t.Secret))] = t.Name
	}
	return au
}

func (au *Authenticator) token(secret string) (string, bool) {
	sum := sha256.Sum256([]byte(secret))
	name := ""
	for h, n := range au.tokens {
		if subtle.ConstantTimeCompare(h[:], sum[:]) == 1 {
			name = n
		}
	}
	return name, name != ""
}

func (au *Authenticator) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := Caller{Enforce: au.enforce, Addr: r.RemoteAddr}
		if !au.enforce {
			r, v := reqctx.Attach(r)
			v.Caller = c
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			ids, err := identity.FromCert(r.TLS.PeerCertificates[0])
			if err != nil {
				err := connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("client certificate: %w", err))
				au.refusals.recordCall(c, err)
				au.errors.Write(w, r, err)
				return
			}
			c.Direct.IDs = ids
		}
		if h := r.Header.Get("Authorization"); h != "" {
			secret, ok := strings.CutPrefix(h, "Bearer ")
			name, known := au.token(secret)
			if !ok || !known {
				err := connect.NewError(connect.CodeUnauthenticated, errors.New("the bearer token is not one of this agent's admin tokens; check --token-file on the agent and the token the client sends"))
				au.refusals.recordCall(c, err)
				au.errors.Write(w, r, err)
				return
			}
			c.Direct.Token = name
		}
		c.Principal = c.Direct
		if from := r.Header.Get(ForwardedHeader); from != "" && c.Direct.AgentNode(identity.Assigner, from) {
			c.Principal = parseForwardedFor(r.Header.Get(ForwardedForHeader))
		} else {
			r.Header.Del(ForwardedHeader)
			r.Header.Del(ForwardedForHeader)
			r.Header.Del(ForwardedToHolderHeader)
		}
		if err := allowed(accessOf(r.URL.Path), c); err != nil {
			au.refusals.recordCall(c, err)
			au.errors.Write(w, r, err)
			return
		}
		r, v := reqctx.Attach(r)
		v.Caller = c
		next.ServeHTTP(w, r)
	})
}

func allowed(need access, c Caller) error {
	if need == accessPublic {
		return nil
	}
	if c.Principal.Anonymous() {
		return connect.NewError(connect.CodeUnauthenticated, errors.New(
			"this agent requires authentication: present a client certificate from the cluster's CA (slicerd tls init) or, for the CLI's admin commands, a bearer token (--token-file)"))
	}
	_, assigner := c.Direct.Agent(identity.Assigner)
	ok := false
	switch need {
	case accessAuthenticated:
		ok = true
	case accessAgent:
		_, ok = c.Principal.Agent("")
	case accessAdmin:
		ok = c.Principal.Admin()
	case accessAdminOrAssigner:
		ok = c.Principal.Admin() || assigner
	case accessTaskOrAssigner:
		ok = hasRole(c.Principal, identity.Task) || assigner
	case accessTask:
		ok = hasRole(c.Direct, identity.Task)
	}
	if !ok {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may not call this procedure: it needs %s", c.Principal, accessText(need)))
	}
	return nil
}

// MayRelay reports whether c may have its watch streams sent each new
// generation before the others (WatchAssignmentRequest.relay): a caller
// whose certificate names a Distributor, or any caller of an agent that
// authenticates none (every caller is trusted there). Such a stream
// costs the server nothing more than another; it only goes first.
func MayRelay(c Caller) bool {
	if !c.Enforce {
		return true
	}
	_, ok := c.Direct.Agent(identity.Distributor)
	return ok
}

func hasRole(p identity.Principal, r identity.Role) bool {
	for _, id := range p.IDs {
		if id.Role == r {
			return true
		}
	}
	return false
}

func accessText(a access) string {
	switch a {
	case accessAgent:
		return "a slicerd agent certificate (spiffe://slicerd/assigner|distributor|backup/NODE)"
	case accessAdminOrAssigner, accessAdmin:
		return "an admin certificate (spiffe://slicerd/admin/NAME) or an admin bearer token"
	case accessTaskOrAssigner, accessTask:
		return "a task certificate (spiffe://slicerd/task/JOB/TASK)"
	}
	return "authentication"
}

func ForwardedFor(p identity.Principal) string {
	var parts []string
	for _, id := range p.IDs {
		parts = append(parts, id.String())
	}
	if p.Token != "" {
		parts = append(parts, "token:"+p.Token)
	}
	return strings.Join(parts, ",")
}

func parseForwardedFor(h string) identity.Principal {
	var p identity.Principal
	for _, part := range strings.Split(h, ",") {
		if name, ok := strings.CutPrefix(part, "token:"); ok && name != "" {
			p.Token = name
			continue
		}
		if id, err := identity.Parse(part); err == nil {
			p.IDs = append(p.IDs, id)
		}
	}
	return p
}

type jobRequest interface{ GetJob() string }

type taskRequest interface {
	jobRequest
	GetTask() string
}

func checkMessage(c Caller, procedure string, msg any) error {
	if !c.Enforce {
		return nil
	}
	switch procedure {
	case slicerv1connect.JobServiceSetJobConfigProcedure, slicerv1connect.JobServiceDeleteJobProcedure:
		if !c.Principal.Admin() {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may not change job configuration: it needs %s", c.Principal, accessText(accessAdmin)))
		}
		return nil
	}
	if m, ok := msg.(taskRequest); ok {
		var what string
		switch procedure {
		case slicerv1connect.LoadServiceReportLoadProcedure:
			what = "report load"
		case slicerv1connect.LoadServiceReportReadyProcedure:
			what = "report readiness"
		case slicerv1connect.LeaseServiceReadLeaseProcedure, slicerv1connect.LeaseServiceReleaseLeaseProcedure:
			what = "hold leases"
		}
		if what != "" && !c.Principal.TaskOf(m.GetJob(), m.GetTask()) {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"%s may not %s for task %q of job %q: that needs a certificate naming %s", c.Principal, what, m.GetTask(), m.GetJob(),
				identity.ID{Role: identity.Task, Job: m.GetJob(), Task: m.GetTask()}))
		}
		if what != "" {
			return nil
		}
	}
	if m, ok := msg.(jobRequest); ok && accessOf(procedure) == accessAuthenticated && m.GetJob() != "" {
		if !c.Principal.MayWatch(m.GetJob()) {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"%s may not read job %q: that needs a client certificate for the job (%s), a task certificate of the job, or an admin one",
				c.Principal, m.GetJob(), identity.ID{Role: identity.Client, Job: m.GetJob()}))
		}
	}
	return nil
}

// Messages is the interceptor that checks each request message against
// its caller (checkMessage), and records every call it or the handler
// refuses (UNAUTHENTICATED, PERMISSION_DENIED) in Refusals (nil: none).
type Messages struct{ Refusals *Refusals }

func (m Messages) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c := CallerFrom(ctx)
		if err := checkMessage(c, req.Spec().Procedure, req.Any()); err != nil {
			m.Refusals.recordCall(c, err)
			return nil, err
		}
		resp, err := next(ctx, req)
		if err != nil {
			m.Refusals.recordCall(c, err)
		}
		return resp, err
	}
}

func (m Messages) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (m Messages) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c := CallerFrom(ctx)
		err := next(ctx, &checkedConn{StreamingHandlerConn: conn, c: c})
		if err != nil {
			m.Refusals.recordCall(c, err)
		}
		return err
	}
}

type checkedConn struct {
	connect.StreamingHandlerConn
	c Caller
}

func (s *checkedConn) Receive(msg any) error {
	if err := s.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return checkMessage(s.c, s.Spec().Procedure, msg)
}
