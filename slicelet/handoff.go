package slicelet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// State handoff moves an application's state with its keys instead of
// dropping it: a task that gains keys fetches their state from the task
// that held them, over the HandoffService the losing task serves on its own
// address (Slicelet.HandoffHandler).
//
// It is on when Config.ExportState and Config.ImportState are set (both,
// on every task of the job). For each range a new assignment gives this
// task, the Slicelet opens one FetchState stream to a task that held it
// under the previous assignment and passes every entry to ImportState;
// AwaitState lets a request for a key wait until its state has arrived.
// A fetch is bounded by Config.HandoffTimeout and Config.HandoffMaxBytes,
// and at most maxConcurrentFetches run at once. One refused before any
// entry arrived for a reason that passes (the holder has not seen the new
// generation yet, is serving its maximum of fetches, or cannot be reached
// for a moment) is tried again, with backoff, until the timeout; one that
// fails otherwise, or mid-stream, is abandoned, keeping what arrived, and
// the rest of its keys start cold, as they would without handoff. The task
// tells the Assigner it is ready for the new generation (which lets a
// make-before-break move drop the losing tasks early) only once every
// fetch succeeded; after a failure the move completes at its deadline.
//
// Handoff warms the new owner's state; it is not a versioned transfer. The
// entries come as the old owner holds them when it exports them, and during
// a make-before-break move both tasks may serve (and write) a key, so a
// fetched entry can be older than one the new owner already holds: an
// ImportState must keep what the task has rather than overwrite it.

// StateExporter streams the state the task holds for the keys whose slice
// keys are in [start, end), calling emit for each key and value; it stops
// and returns emit's error when emit fails. It is called on the serving
// side of a handoff, while the task may be losing or have lost those keys:
// keep the state of keys moved away for a while (a few seconds) so that
// their new owner can fetch it.
type StateExporter func(ctx context.Context, start, end assign.SliceKey, emit func(key, value []byte) error) error

// StateImporter adds one key's state fetched from the task that held it.
// It is called from several handoff goroutines at once. It must not replace
// an entry the task already holds for the key: that one was written here
// since the key arrived, and is newer (see the package's handoff notes).
// State of a key the task no longer owns (it moved on while its state was
// on its way here) is to be kept as the state of keys moved away is, for
// the key's new owner: its fetch from here waits for this one.
type StateImporter func(key, value []byte)

// StateEntry is one key's state, as ImportStates takes it.
type StateEntry struct {
	Key, Value []byte
}

// Handoff bounds and defaults.
const (
	// DefaultHandoffTimeout bounds one fetch when Config.HandoffTimeout is 0.
	DefaultHandoffTimeout = 10 * time.Second
	// DefaultHandoffMaxBytes bounds the keys and values one fetch takes
	// when Config.HandoffMaxBytes is 0.
	DefaultHandoffMaxBytes = 256 << 20
	// maxHandoffChunk bounds the entries of one FetchState message.
	maxHandoffChunk = 1 << 20
	// maxConcurrentFetches bounds the fetches a task runs at once.
	maxConcurrentFetches = 4
	// maxConcurrentServes bounds the fetches a task serves at once; more
	// wait for a turn.
	maxConcurrentServes = 16
	// handoffViewWait is how long a serving task waits to see the
	// generation a fetch names before refusing it.
	handoffViewWait = 2 * time.Second
	// handoffGrace is how long Drain keeps a task that exports state up
	// after its keys moved and its last fetch ended, so that the tasks
	// that gained them can fetch their state.
	handoffGrace = time.Second
)

type handoffState struct {
	mu  sync.Mutex
	ctx context.Context // Run's while it runs; nil otherwise
	// importing holds the ranges whose state is on its way, replaced
	// whole under mu: requests read it without a lock (awaitState).
	importing atomic.Pointer[[]*importRange]
	wg        sync.WaitGroup
	sem       chan struct{}
	clients   map[string]handoffClient // by task name

	serveSem chan struct{} // bounds FetchState calls served at once
	// The fetches served here, guarded by mu: how many are in progress,
	// when one last started or ended, the ranges each task fetched whole
	// (at most maxFetchedRanges per task, the newest); served is closed,
	// and replaced, as each ends. Only a drain reads fetched, and only the
	// fetches that ended since it began, so fetched is kept only while a
	// drain runs (drains counts them) and emptied when the last ends.
	serving   int
	lastServe time.Time
	fetched   map[string][]fetchedRange
	drains    int
	served    chan struct{}

	fetches, failed, entries atomic.Uint64
}

// handoffClient is a client for one task at one address; hc is its own
// only with TLS (the task's certificate is checked), and closed when
// replaced or when Run ends.
type handoffClient struct {
	addr string
	hc   *http.Client
	c    slicerv1connect.HandoffServiceClient
}

// importRange is a range whose state is on its way.
type importRange struct {
	start, end assign.SliceKey
	gen        uint64 // the generation that gave the range here
	done       chan struct{}
	failed     atomic.Bool // set, if the fetch failed, before done closes
}

// handoffOn reports whether the job's state moves with its keys.
func (s *Slicelet) handoffOn() bool {
	return (s.cfg.ImportState != nil || s.cfg.ImportStates != nil) && s.cfg.ExportState != nil
}

// HandoffStats reports the fetches this task started, how many of them
// failed or were cut short, and the entries it imported.
func (s *Slicelet) HandoffStats() (fetches, failed, entries uint64) {
	return s.handoff.fetches.Load(), s.handoff.failed.Load(), s.handoff.entries.Load()
}

// startHandoff makes fetches possible until stopHandoff.
func (s *Slicelet) startHandoff(ctx context.Context) {
	s.handoff.mu.Lock()
	defer s.handoff.mu.Unlock()
	s.handoff.ctx = ctx
	s.handoff.sem = make(chan struct{}, maxConcurrentFetches)
	s.handoff.clients = make(map[string]handoffClient)
}

// stopHandoff waits for the fetches, which end with Run's context.
func (s *Slicelet) stopHandoff() {
	s.handoff.mu.Lock()
	s.handoff.ctx = nil
	s.handoff.mu.Unlock()
	s.handoff.wg.Wait()
	s.handoff.mu.Lock()
	for _, c := range s.handoff.clients {
		if c.hc != nil {
			c.hc.CloseIdleConnections()
		}
	}
	s.handoff.clients = nil
	s.handoff.mu.Unlock()
}

// setImporting replaces the ranges on their way by change's result.
// Called with handoff.mu held.
func (s *Slicelet) setImporting(change func([]*importRange) []*importRange) {
	var cur []*importRange
	if p := s.handoff.importing.Load(); p != nil {
		cur = *p
	}
	next := change(slices.Clone(cur))
	s.handoff.importing.Store(&next)
}

// piece is a part of a gained range and the task that held it.
type piece struct {
	start, end assign.SliceKey
	from       assign.Task
}

// startImports fetches the state of the ranges next gives this task anew
// (assigned) from the tasks that held them under old, and returns the
// imports it started. Called by install.
//
// A task whose first view (old is nil) already gives it keys fetches
// them from the other tasks next gives the same keys: the task joined
// before its watch delivered an assignment without it, and a make-before-
// break move keeps the tasks that held the keys in next until this task
// reports ready; a restarted task warms from its replicas.
func (s *Slicelet) startImports(old *view, next *assign.Assignment, assigned []assign.Slice) []*importRange {
	if !s.handoffOn() || len(assigned) == 0 {
		return nil
	}
	prev := next
	if old != nil {
		prev = old.table.Assignment()
	}
	noHandoff := s.noHandoffTasks()
	var pieces []piece
	for _, r := range assigned {
		for i := prev.Find(r.Start); i < len(prev.Slices) && prev.Slices[i].Start < r.End; i++ {
			sl := prev.Slices[i]
			from, ok := holder(prev, sl, s.cfg.Task, r.Start)
			if !ok || noHandoff[from.Name] {
				continue // nobody to fetch from: the keys start cold
			}
			a, b := max(sl.Start, r.Start), min(sl.End, r.End)
			if n := len(pieces); n > 0 && pieces[n-1].end == a && pieces[n-1].from == from {
				pieces[n-1].end = b
				continue
			}
			pieces = append(pieces, piece{start: a, end: b, from: from})
		}
	}
	s.handoff.mu.Lock()
	defer s.handoff.mu.Unlock()
	ctx := s.handoff.ctx
	if ctx == nil {
		return nil
	}
	imps := make([]*importRange, 0, len(pieces))
	for _, p := range pieces {
		imps = append(imps, &importRange{start: p.start, end: p.end, gen: next.Generation, done: make(chan struct{})})
	}
	s.setImporting(func(cur []*importRange) []*importRange { return append(cur, imps...) })
	for i, p := range pieces {
		s.handoff.wg.Add(1)
		go s.fetch(ctx, next.Generation, p, imps[i])
	}
	return imps
}

// reportReady tells the job's Assigner, once imps have ended, that this
// task is ready for generation gen, which gave it keys: a make-before-
// break move then drops the tasks that lose them without waiting for its
// deadline. A failed report is left to the deadline.
func (s *Slicelet) reportReady(gen uint64, imps []*importRange) {
	s.handoff.mu.Lock()
	ctx := s.handoff.ctx
	if ctx == nil {
		s.handoff.mu.Unlock()
		return
	}
	s.handoff.wg.Add(1)
	s.handoff.mu.Unlock()
	go func() {
		defer s.handoff.wg.Done()
		for _, imp := range imps {
			select {
			case <-imp.done:
			case <-ctx.Done():
				return
			}
			if imp.failed.Load() {
				return // not ready: the move completes at its deadline
			}
		}
		p, ok := s.assigner()
		if !ok || p.RPCAddr == "" {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := s.loadClient(p).ReportReady(rctx, connect.NewRequest(&slicerv1.ReportReadyRequest{Job: s.cfg.Job, Task: s.cfg.Task, Generation: gen}))
		if err != nil && ctx.Err() == nil {
			s.log.Debug("slicelet: readiness report failed; the move completes at its deadline", "generation", gen, "err", err)
		}
	}()
}

// holder picks the task of prev's slice sl, other than self, to fetch its
// state from: one of its replicas, spread by the range's start.
func holder(prev *assign.Assignment, sl assign.Slice, self string, start assign.SliceKey) (assign.Task, bool) {
	others := slices.DeleteFunc(slices.Clone(sl.Tasks), func(t string) bool { return t == self })
	if len(others) == 0 {
		return assign.Task{}, false
	}
	i, _ := prev.TaskIndex(others[int(start%uint64(len(others)))])
	return prev.Tasks[i], true
}

// Backoff between tries of a fetch refused for a passing reason.
const (
	fetchRetryMin = 20 * time.Millisecond
	fetchRetryMax = 500 * time.Millisecond
)

// retryableFetch reports whether a fetch that failed with err before any
// entry arrived may succeed if tried again: the holder has not seen the
// generation yet, is at its limit of fetches served, or was not reached.
// A holder that cannot be dialled at all has died or moved: its keys start
// cold at once rather than wait out the timeout.
func retryableFetch(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeResourceExhausted, connect.CodeAborted:
		return true
	}
	return false
}

// fetch imports the state of p from the task that held it.
func (s *Slicelet) fetch(ctx context.Context, gen uint64, p piece, imp *importRange) {
	defer s.handoff.wg.Done()
	defer s.doneImporting(imp)
	select {
	case s.handoff.sem <- struct{}{}:
	case <-ctx.Done():
		imp.failed.Store(true)
		return
	}
	defer func() { <-s.handoff.sem }()
	s.handoff.fetches.Add(1)
	timeout, limit := s.cfg.HandoffTimeout, s.cfg.HandoffMaxBytes
	if timeout == 0 {
		timeout = DefaultHandoffTimeout
	}
	if limit == 0 {
		limit = DefaultHandoffMaxBytes
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var (
		n, size int64
		err     error
		tries   int
	)
	for backoff := fetchRetryMin; ; backoff = min(2*backoff, fetchRetryMax) {
		tries++
		n, size, err = s.fetchOnce(fctx, gen, p, limit)
		if err == nil || n > 0 || !retryableFetch(err) {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-fctx.Done():
			t.Stop()
		case <-t.C:
		}
		if fctx.Err() != nil {
			break
		}
	}
	s.handoff.entries.Add(uint64(n))
	if err != nil {
		imp.failed.Store(true)
		s.handoff.failed.Add(1)
		if ctx.Err() == nil {
			s.log.Warn("slicelet: state handoff cut short; the rest of the range starts cold", "from", p.from.Name,
				"start", p.start, "end", p.end, "entries", n, "bytes", size, "tries", tries, "took", time.Since(start), "err", err)
		}
		return
	}
	s.log.Debug("slicelet: state handed off", "from", p.from.Name, "start", p.start, "end", p.end,
		"entries", n, "bytes", size, "tries", tries, "took", time.Since(start))
}

// fetchOnce runs one FetchState stream of p, importing each entry, and
// returns how many entries and bytes it imported.
func (s *Slicelet) fetchOnce(ctx context.Context, gen uint64, p piece, limit int64) (n, size int64, err error) {
	stream, err := s.handoffClient(s.handoffTarget(p.from)).FetchState(ctx, connect.NewRequest(&slicerv1.FetchStateRequest{
		Job: s.cfg.Job, Task: s.cfg.Task, Generation: gen, Start: uint64(p.start), End: uint64(p.end)}))
	if err != nil {
		return 0, 0, err
	}
	defer stream.Close()
	var batch []StateEntry
	for stream.Receive() {
		batch = batch[:0]
		for _, e := range stream.Msg().GetEntries() {
			if size += int64(len(e.GetKey()) + len(e.GetValue())); size > limit {
				if len(batch) > 0 {
					s.cfg.ImportStates(batch)
				}
				return n, size, fmt.Errorf("more than %d bytes of state; keeping what came", limit)
			}
			if s.cfg.ImportStates != nil {
				batch = append(batch, StateEntry{Key: e.GetKey(), Value: e.GetValue()})
			} else {
				s.cfg.ImportState(e.GetKey(), e.GetValue())
			}
			n++
		}
		if len(batch) > 0 {
			s.cfg.ImportStates(batch)
		}
	}
	return n, size, stream.Err()
}

func (s *Slicelet) doneImporting(imp *importRange) {
	s.handoff.mu.Lock()
	defer s.handoff.mu.Unlock()
	s.setImporting(func(cur []*importRange) []*importRange {
		return slices.DeleteFunc(cur, func(x *importRange) bool { return x == imp })
	})
	close(imp.done)
}

// ownMember reports whether p is the gossip member of the task of this
// job it claims to be: the one named after it (gossip.TaskMemberName),
// which the task holds while it is alive. Any holder of the gossip key
// can claim a task's job and name in its tags under a name of its own;
// only the task's own member speaks for the task's handoff.
func (s *Slicelet) ownMember(p gossip.Peer) bool {
	return p.Job == s.cfg.Job && p.Name == gossip.TaskMemberName(p.Job, p.Task)
}

// noHandoffTasks returns the tasks of the job whose gossip members say
// they serve no state handoff (gossip.Peer.NoHandoff): they cannot export
// state, so fetching from them would only delay their keys here.
func (s *Slicelet) noHandoffTasks() map[string]bool {
	n := s.node.Load()
	if n == nil {
		return nil
	}
	var none map[string]bool
	for _, p := range n.Peers() {
		if s.ownMember(p) && p.NoHandoff {
			if none == nil {
				none = make(map[string]bool)
			}
			none[p.Task] = true
		}
	}
	return none
}

// handoffTarget is t with the address it serves handoff at: the one its
// own gossip member (ownMember) advertises for handoff (a sidecar's), else
// its serving address. With TLS the fetch checks that the server's
// certificate names t, whichever address gossip gave.
func (s *Slicelet) handoffTarget(t assign.Task) assign.Task {
	n := s.node.Load()
	if n == nil {
		return t
	}
	for _, p := range n.Peers() {
		if s.ownMember(p) && p.Task == t.Name && p.HandoffAddr != "" {
			t.Addr = p.HandoffAddr
			return t
		}
	}
	return t
}

// handoffClient returns a client for the task t, reused while its address
// stays the same. With TLS it accepts only a certificate naming t.
func (s *Slicelet) handoffClient(t assign.Task) slicerv1connect.HandoffServiceClient {
	s.handoff.mu.Lock()
	defer s.handoff.mu.Unlock()
	old, ok := s.handoff.clients[t.Name]
	if ok && old.addr == t.Addr {
		return old.c
	}
	if ok && old.hc != nil {
		old.hc.CloseIdleConnections()
	}
	c := handoffClient{addr: t.Addr}
	shared, scheme := s.httpClient, "http://"
	if s.cfg.TLS != nil {
		c.hc = api.NewHTTPClient(s.cfg.TLS.ClientConfig(tlsconfig.WantTask(s.cfg.Job, t.Name)))
		shared, scheme = c.hc, "https://"
	}
	c.c = slicerv1connect.NewHandoffServiceClient(shared, scheme+t.Addr, connect.WithReadMaxBytes(2*maxHandoffChunk))
	if s.handoff.clients != nil {
		s.handoff.clients[t.Name] = c
	}
	return c.c
}

// AwaitState waits until the state of key, if a handoff is bringing it to
// this task, has arrived (or its fetch was abandoned), or ctx ends. It
// returns at once for keys no fetch is bringing. A request for a key this
// task has just gained calls it before answering from local state.
func (s *Slicelet) AwaitState(ctx context.Context, key []byte) error {
	return s.awaitState(ctx, assign.HashKey(key))
}

// AwaitStateString is AwaitState for a string key.
func (s *Slicelet) AwaitStateString(ctx context.Context, key string) error {
	return s.awaitState(ctx, assign.HashString(key))
}

func (s *Slicelet) awaitState(ctx context.Context, h assign.SliceKey) error {
	p := s.handoff.importing.Load() // no lock: every request calls this
	if p == nil {
		return nil
	}
	var done chan struct{}
	for _, imp := range *p {
		if imp.start <= h && h < imp.end {
			done = imp.done
			break
		}
	}
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitImportsBefore waits until no fetch started for a generation before
// gen is bringing state of keys in [start, end) here, or ctx ends.
func (s *Slicelet) awaitImportsBefore(ctx context.Context, gen uint64, start, end assign.SliceKey) error {
	for {
		p := s.handoff.importing.Load()
		if p == nil {
			return nil
		}
		var done chan struct{}
		for _, imp := range *p {
			if imp.gen < gen && imp.start < end && start < imp.end {
				done = imp.done
				break
			}
		}
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// HandoffHandler returns the path and handler of the HandoffService, for
// the task to serve on its own address (the one in Config.Addr) beside its
// application handlers, over HTTP/2 (h2c without TLS). Tasks of the job
// call it to fetch the state of keys they gain from this task. Without
// ExportState it answers UNIMPLEMENTED.
//
// Who may call it: with TLS (Config.TLS), only a task of the job whose
// certificate names the task the request is for, and only for keys the
// assignment gives that task; the server must then be served with TLS
// and ask for client certificates. Without TLS any caller that names a
// task the assignment gives the keys to. What it costs: one stream per
// fetch, reading entries through ExportState, at most 1 MiB a message; at
// most 16 are served at once, the others wait for a turn.
func (s *Slicelet) HandoffHandler() (string, http.Handler) {
	path, h := slicerv1connect.NewHandoffServiceHandler(handoffServer{s}, connect.WithReadMaxBytes(4096),
		connect.WithSendMaxBytes(2*maxHandoffChunk))
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p identity.Principal
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			if ids, err := identity.FromCert(r.TLS.PeerCertificates[0]); err == nil {
				p.IDs = ids
			}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, p)))
	})
}

// peerKey carries a handoff caller's verified identity in its context.
type peerKey struct{}

type handoffServer struct{ s *Slicelet }

// FetchState implements slicerv1connect.HandoffServiceHandler.
func (h handoffServer) FetchState(ctx context.Context, req *connect.Request[slicerv1.FetchStateRequest], out *connect.ServerStream[slicerv1.FetchStateResponse]) (err error) {
	s, m := h.s, req.Msg
	start, end := assign.SliceKey(m.GetStart()), assign.SliceKey(m.GetEnd())
	switch {
	case s.cfg.ExportState == nil:
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("task %s/%s does not export state; set ExportState and ImportState on every task of the job", s.cfg.Job, s.cfg.Task))
	case m.GetJob() != s.cfg.Job:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("this task serves job %q, not %q", s.cfg.Job, m.GetJob()))
	case assign.ValidateTaskName(m.GetTask()) != nil:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid task: %w", assign.ValidateTaskName(m.GetTask())))
	case start >= end || end > assign.KeySpaceEnd:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("range [%#x, %#x) is empty or past the key space end %#x", start, end, uint64(assign.KeySpaceEnd)))
	}
	if s.cfg.TLS != nil {
		if p, _ := ctx.Value(peerKey{}).(identity.Principal); !p.TaskOf(s.cfg.Job, m.GetTask()) {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("the caller's certificate does not name task %s/%s", s.cfg.Job, m.GetTask()))
		}
	}
	v, err := s.awaitView(ctx, m.GetGeneration())
	if err != nil {
		return err
	}
	a := v.table.Assignment()
	for i := a.Find(start); i < len(a.Slices) && a.Slices[i].Start < end; i++ {
		if !slices.Contains(a.Slices[i].Tasks, m.GetTask()) {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("generation %d does not give [%#x, %#x) to task %q", a.Generation, a.Slices[i].Start, a.Slices[i].End, m.GetTask()))
		}
	}
	// State of the range still on its way here, from a generation before
	// the one the caller fetches for (the keys moved on before it
	// arrived), is waited for: what this task holds is not the range's
	// state until it has. Fetches for the same generation are not waited
	// for, so two tasks fetching from each other cannot wait on each
	// other.
	if err := s.awaitImportsBefore(ctx, m.GetGeneration(), start, end); err != nil {
		return err
	}
	select {
	case s.handoff.serveSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.handoff.serveSem }()
	s.handoff.mu.Lock()
	s.handoff.serving++
	s.handoff.lastServe = time.Now()
	s.handoff.mu.Unlock()
	defer func() {
		s.handoff.mu.Lock()
		defer s.handoff.mu.Unlock()
		s.handoff.serving--
		s.handoff.lastServe = time.Now()
		if err == nil {
			// Only a fetch that sent everything lets a drain count its
			// range as served.
			s.handoff.recordFetch(m.GetTask(), start, end, s.handoff.lastServe)
		}
		close(s.handoff.served)
		s.handoff.served = make(chan struct{})
	}()
	msg := &slicerv1.FetchStateResponse{}
	size := 0
	flush := func() error {
		if len(msg.Entries) == 0 {
			return nil
		}
		err := out.Send(msg)
		msg.Entries, size = msg.Entries[:0], 0
		return err
	}
	err = s.cfg.ExportState(ctx, start, end, func(key, value []byte) error {
		if size+len(key)+len(value) > maxHandoffChunk {
			if err := flush(); err != nil {
				return err
			}
		}
		msg.Entries = append(msg.Entries, &slicerv1.StateEntry{Key: key, Value: value})
		size += len(key) + len(value)
		return ctx.Err()
	})
	if err == nil {
		err = flush()
	}
	return err
}

// awaitView returns the task's view once it is of generation gen or
// newer, waiting at most handoffViewWait for it.
func (s *Slicelet) awaitView(ctx context.Context, gen uint64) (*view, error) {
	t := time.NewTimer(handoffViewWait)
	defer t.Stop()
	for {
		v, changed := s.currentView()
		if v != nil && v.table.Assignment().Generation >= gen {
			return v, nil
		}
		select {
		case <-changed:
		case <-t.C:
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("task %s/%s has not seen generation %d yet; retry", s.cfg.Job, s.cfg.Task, gen))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fetchedRange is a range a task fetched whole, and when the fetch ended.
type fetchedRange struct {
	start, end assign.SliceKey
	at         time.Time
}

// maxFetchedRanges bounds the fetched ranges kept per task. A drain
// needs those since it began: one per range the task gained, which the
// gaining task fetches in at most a few batches.
const maxFetchedRanges = 1024

// recordFetch notes that task fetched [start, end) whole at at, while a
// drain runs. Call with mu held.
func (h *handoffState) recordFetch(task string, start, end assign.SliceKey, at time.Time) {
	if h.drains == 0 {
		return // no drain began before it: none will count it
	}
	rs := append(h.fetched[task], fetchedRange{start, end, at})
	if len(rs) > maxFetchedRanges {
		rs = slices.Delete(rs, 0, len(rs)-maxFetchedRanges)
	}
	h.fetched[task] = rs
}

// beginDrain makes the fetches that end from now on recorded, until the
// matching endDrain. Call it before taking the drain's start time.
func (h *handoffState) beginDrain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drains++
}

// endDrain ends what beginDrain began, forgetting the recorded fetches
// once no drain runs.
func (h *handoffState) endDrain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drains--; h.drains == 0 {
		clear(h.fetched)
	}
}

// fetchedSince reports whether every range of want, by gaining task, was
// fetched whole by that task after since. Call with mu held.
func (h *handoffState) fetchedSince(since time.Time, want map[string][]assign.Slice) bool {
	for task, ranges := range want {
		var got []fetchedRange
		for _, r := range h.fetched[task] {
			if r.at.After(since) {
				got = append(got, r)
			}
		}
		slices.SortFunc(got, func(a, b fetchedRange) int { return cmp.Compare(a.start, b.start) })
		for _, w := range ranges {
			// Sweep the fetched ranges in order, extending what of w is
			// covered from its start.
			at := w.Start
			for _, r := range got {
				if r.start <= at && r.end > at {
					at = r.end
				}
				if at >= w.End {
					break
				}
			}
			if at < w.End {
				return false
			}
		}
	}
	return true
}

// awaitFetches waits, after a drain emptied the task, for the tasks that
// took its keys to fetch their state (gained: by task, the ranges it took
// from here): until every gained range was fetched whole since the drain
// began (since) and no fetch is in progress, or no task has fetched for
// handoffGrace, or ctx ends.
func (s *Slicelet) awaitFetches(ctx context.Context, since, emptied time.Time, gained map[string][]assign.Slice) {
	if s.cfg.ExportState == nil {
		return
	}
	for {
		s.handoff.mu.Lock()
		served, serving := s.handoff.served, s.handoff.serving
		all := len(gained) > 0 && s.handoff.fetchedSince(since, gained)
		quiet := emptied
		if s.handoff.lastServe.After(quiet) {
			quiet = s.handoff.lastServe
		}
		s.handoff.mu.Unlock()
		wait := handoffGrace - time.Since(quiet)
		if serving == 0 && (all || wait <= 0) {
			return
		}
		t := time.NewTimer(max(wait, 50*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-served:
			t.Stop()
		case <-t.C:
		}
	}
}

// gained returns, by task, the parts of owned (self's ranges in prev)
// that next gives to a task that prev did not: the ranges whose state
// those tasks come to fetch.
func gained(prev, next *assign.Assignment, owned []assign.Slice, self string) map[string][]assign.Slice {
	out := map[string][]assign.Slice{}
	for _, r := range owned {
		for i := next.Find(r.Start); i < len(next.Slices) && next.Slices[i].Start < r.End; i++ {
			n := next.Slices[i]
			lo, hi := max(n.Start, r.Start), min(n.End, r.End)
			for j := prev.Find(lo); j < len(prev.Slices) && prev.Slices[j].Start < hi; j++ {
				p := prev.Slices[j]
				part := assign.Slice{Start: max(lo, p.Start), End: min(hi, p.End)}
				for _, t := range n.Tasks {
					if t != self && !slices.Contains(p.Tasks, t) {
						out[t] = append(out[t], part)
					}
				}
			}
		}
	}
	return out
}
