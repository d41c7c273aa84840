package roles

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
)

// Distributor fans assignments out to subscribers. It pulls a job from the
// job's Assigner on the first request for it (paper §4.2), caches the newest
// generation, and pushes every new one to all of the job's streams.
type Distributor struct {
	log        *slog.Logger
	members    membership
	httpClient *http.Client
	minBackoff time.Duration
	maxBackoff time.Duration
	stopping   <-chan struct{}

	mu     sync.Mutex
	runCtx context.Context // set by Run; pulls live as long as it
	pulls  sync.WaitGroup
	jobs   map[string]*latest
}

func newDistributor(cfg Config, members membership, stopping <-chan struct{}) *Distributor {
	return &Distributor{
		log:        cfg.Logger.With("role", "distributor"),
		members:    members,
		httpClient: api.NewH2CClient(),
		minBackoff: cfg.PullMinBackoff,
		maxBackoff: cfg.PullMaxBackoff,
		stopping:   stopping,
		jobs:       make(map[string]*latest),
	}
}

// Run owns the pulls: it lets handlers start them and, when ctx ends,
// waits for every one to stop.
func (d *Distributor) Run(ctx context.Context) error {
	d.mu.Lock()
	d.runCtx = ctx
	d.mu.Unlock()
	<-ctx.Done()
	d.pulls.Wait()
	d.httpClient.CloseIdleConnections()
	return nil
}

// job returns the cache of a job, starting its pull on first use.
func (d *Distributor) job(name string) (*latest, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l, ok := d.jobs[name]; ok {
		return l, nil
	}
	if d.runCtx == nil || d.runCtx.Err() != nil {
		return nil, connect.NewError(connect.CodeUnavailable, errShuttingDown)
	}
	l := newLatest()
	d.jobs[name] = l
	ctx := d.runCtx
	d.pulls.Go(func() { d.pull(ctx, name, l) })
	return l, nil
}

// assigner picks the Assigner to pull from: the alive Assigner that sorts
// first by name, so every Distributor asks the same one.
func (d *Distributor) assigner() (string, bool) {
	var candidates []gossip.Peer
	for _, p := range d.members.Peers() {
		if p.Has(gossip.RoleAssigner) && p.Status == gossip.StatusAlive && p.RPCAddr != "" {
			candidates = append(candidates, p)
		}
	}
	if len(candidates) == 0 {
		return "", false
	}
	slices.SortFunc(candidates, func(x, y gossip.Peer) int { return strings.Compare(x.Name, y.Name) })
	return candidates[0].RPCAddr, true
}

// pull keeps a stream open to the job's Assigner until ctx ends or the
// Assigner says the job does not exist.
func (d *Distributor) pull(ctx context.Context, job string, l *latest) {
	backoff := d.minBackoff
	wait := func() bool {
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		defer t.Stop()
		backoff = min(2*backoff, d.maxBackoff)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		addr, ok := d.assigner()
		if !ok {
			if l.current() == nil {
				l.fail(connect.NewError(connect.CodeUnavailable, ErrNoAssigner))
			}
			d.log.Warn("no live assigner to pull from; serving the cached assignment", "job", job)
			if !wait() {
				return
			}
			continue
		}
		var known uint64
		if cur := l.current(); cur != nil {
			known = cur.Generation
		}
		client := slicerv1connect.NewAssignerServiceClient(d.httpClient, api.RPCURL(addr))
		stream, err := client.WatchAssignment(ctx, connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: job, KnownGeneration: known}))
		if err == nil {
			for stream.Receive() {
				a, err := api.FromProto(stream.Msg().GetAssignment())
				if err != nil {
					d.log.Error("assigner sent an invalid assignment; ignoring it", "job", job, "assigner", addr, "err", err)
					continue
				}
				if l.publish(a) {
					d.log.Debug("assignment received", "job", job, "generation", a.Generation)
				}
				backoff = d.minBackoff
			}
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if connect.CodeOf(err) == connect.CodeNotFound && l.current() == nil {
			// Forget the job so a later request asks again; the waiting
			// streams see the Assigner's answer.
			d.mu.Lock()
			delete(d.jobs, job)
			d.mu.Unlock()
			l.fail(err)
			return
		}
		d.log.Warn("assignment stream from assigner ended; reconnecting", "job", job, "assigner", addr, "err", err)
		if !wait() {
			return
		}
	}
}

// WatchAssignment implements slicerv1connect.DistributorServiceHandler.
func (d *Distributor) WatchAssignment(ctx context.Context, req *connect.Request[slicerv1.WatchAssignmentRequest], stream *connect.ServerStream[slicerv1.WatchAssignmentResponse]) error {
	l, err := d.lookup(req.Msg.GetJob())
	if err != nil {
		return err
	}
	return l.stream(ctx, d.stopping, req.Msg.GetKnownGeneration(), stream.Send)
}

// GetAssignment implements slicerv1connect.DistributorServiceHandler: it
// returns the cached assignment, waiting for the first pull if needed.
func (d *Distributor) GetAssignment(ctx context.Context, req *connect.Request[slicerv1.GetAssignmentRequest]) (*connect.Response[slicerv1.GetAssignmentResponse], error) {
	l, err := d.lookup(req.Msg.GetJob())
	if err != nil {
		return nil, err
	}
	var first *slicerv1.WatchAssignmentResponse
	errFound := errors.New("found")
	err = l.stream(ctx, d.stopping, 0, func(m *slicerv1.WatchAssignmentResponse) error {
		first = m
		return errFound
	})
	if first != nil {
		return connect.NewResponse(&slicerv1.GetAssignmentResponse{Assignment: first.GetAssignment()}), nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return nil, toConnect(err)
}

func (d *Distributor) lookup(job string) (*latest, error) {
	if err := validateJob(job); err != nil {
		return nil, err
	}
	return d.job(job)
}
