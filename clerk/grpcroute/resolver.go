package grpcroute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
)

// Scheme is the target scheme of the resolver: slicer:///JOB.
const Scheme = "slicer"

// Config configures the resolver NewBuilder returns.
type Config struct {
	// Clerk configures the Clerk each channel runs for its job: the
	// servers to watch, TLS, cache file and so on (start from
	// clerk.DefaultConfig). Its Job is left empty: it comes from the
	// channel's target. A CacheFile is the file of one channel; a builder
	// with one must serve a single channel. OnAssignment, if set, is
	// called as it would be by the Clerk, once the channel has the
	// assignment.
	Clerk clerk.Config

	// KeyHeader is the request header a call's key is read from when its
	// context carries none (WithKey). Empty means DefaultKeyHeader. A name
	// ending in "-bin" carries the key's raw bytes.
	KeyHeader string

	// Fallback are addresses calls go to, at random, before the first
	// assignment arrives (none: calls wait for it, up to their deadline).
	// Once an assignment is held they play no part.
	Fallback []string
}

// Builder is the resolver of the slicer scheme. Pass it to grpc.NewClient
// with grpc.WithResolvers, or register it with resolver.Register.
type Builder struct {
	cfg Config
	sc  string // the service config selecting the policy
}

// NewBuilder returns a resolver for slicer:///JOB targets, or an error
// saying what in cfg is wrong.
func NewBuilder(cfg Config) (*Builder, error) {
	if cfg.Clerk.Job != "" {
		return nil, fmt.Errorf("%w: grpcroute: Config.Clerk.Job is %q: leave it empty, the job comes from each target (slicer:///JOB)", clerk.ErrInvalidConfig, cfg.Clerk.Job)
	}
	check := cfg.Clerk
	check.Job = "job"
	if err := check.Validate(); err != nil {
		return nil, err
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = DefaultKeyHeader
	}
	h, err := checkHeader(cfg.KeyHeader)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", clerk.ErrInvalidConfig, err)
	}
	cfg.KeyHeader = h
	for _, a := range cfg.Fallback {
		if a == "" {
			return nil, fmt.Errorf("%w: grpcroute: an empty fallback address", clerk.ErrInvalidConfig)
		}
	}
	if cfg.Clerk.Logger == nil {
		cfg.Clerk.Logger = slog.New(slog.DiscardHandler)
	}
	return &Builder{
		cfg: cfg,
		sc:  fmt.Sprintf(`{"loadBalancingConfig":[{%q:{"keyHeaderName":%q}}]}`, PolicyName, h),
	}, nil
}

// Scheme returns "slicer".
func (*Builder) Scheme() string { return Scheme }

// Build starts the Clerk of the target's job. It is called by gRPC when a
// channel is created; the Clerk stops when the channel is closed.
func (b *Builder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	if target.URL.Host != "" {
		return nil, fmt.Errorf("grpcroute: target %q names an authority (%q); the job goes in the path: slicer:///JOB", target.URL.String(), target.URL.Host)
	}
	job := target.Endpoint()
	if err := assign.ValidateJobName(job); err != nil {
		return nil, fmt.Errorf("grpcroute: target %q: %w", target.URL.String(), err)
	}
	sc := cc.ParseServiceConfig(b.sc)
	if sc.Err != nil {
		return nil, fmt.Errorf("grpcroute: the service config: %w", sc.Err)
	}
	r := &slicerResolver{job: job, cc: cc, sc: sc, done: make(chan struct{})}
	cfg := b.cfg.Clerk
	cfg.Job = job
	cfg.Logger = cfg.Logger.With("target", target.URL.String())
	user := cfg.OnAssignment
	cfg.OnAssignment = func(prev, next *assign.Assignment) {
		r.update()
		if user != nil {
			user(prev, next)
		}
	}
	c, err := clerk.New(cfg)
	if err != nil {
		return nil, err
	}
	r.clerk = c
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	switch {
	case c.Table() != nil:
		// A cache file gave an assignment: route by it at once.
		r.update()
	case len(b.cfg.Fallback) > 0:
		eps := make([]resolver.Endpoint, len(b.cfg.Fallback))
		for i, a := range b.cfg.Fallback {
			eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}}
		}
		r.push(resolver.State{Endpoints: eps, ServiceConfig: sc})
	}
	go func() {
		defer close(r.done)
		if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			cfg.Logger.Error("grpcroute: the clerk stopped", "err", err)
		}
	}()
	return r, nil
}

// slicerResolver feeds a channel the tasks of the assignments its Clerk
// installs.
type slicerResolver struct {
	job    string
	cc     resolver.ClientConn
	sc     *serviceconfig.ParseResult
	clerk  *clerk.Clerk
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex // orders updates and Close
	closed bool
}

// update reports the Clerk's current table to the channel.
func (r *slicerResolver) update() {
	t := r.clerk.Table()
	if t == nil {
		return
	}
	r.push(resolver.State{
		Endpoints:     endpointsOf(r.job, t),
		ServiceConfig: r.sc,
		Attributes:    withTable(nil, t),
	})
}

func (r *slicerResolver) push(s resolver.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	// An error means the balancer refused the state; the next
	// assignment replaces it, and the Clerk's own retries go on.
	_ = r.cc.UpdateState(s)
}

// ResolveNow asks the Clerk to retry its servers now if it is backing off.
func (r *slicerResolver) ResolveNow(resolver.ResolveNowOptions) { r.clerk.ResolveNow() }

// Close stops the Clerk and waits for it.
func (r *slicerResolver) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
}

// endpointsOf returns the endpoints of the tasks in t that have an
// address, each carrying the task's name for TaskCredentials.
func endpointsOf(job string, t *clerk.Table) []resolver.Endpoint {
	a := t.Assignment()
	eps := make([]resolver.Endpoint, 0, len(a.Tasks))
	for _, task := range a.Tasks {
		if task.Addr == "" {
			continue
		}
		addr := resolver.Address{Addr: task.Addr, Attributes: attributes.New(taskKey{}, taskRef{job: job, task: task.Name})}
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{addr}})
	}
	return eps
}
