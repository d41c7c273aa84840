package clerk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/subset"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Clerk keeps a local copy of one job's assignment, streamed from slicerd,
// and maps keys to the tasks that serve them. Lookups are safe from any
// number of goroutines and never block on the network: a Clerk keeps
// routing with its last assignment while slicerd is unreachable.
type Clerk struct {
	cfg       Config
	log       *slog.Logger
	client    connect.HTTPClient
	ownClient *http.Client // set when the Clerk made client and must close it

	table   atomic.Pointer[Table]
	ready   chan struct{}
	wake    chan struct{}
	running atomic.Bool

	// metrics is nil without Config.Registerer; see metrics.go.
	metrics *clerkMetrics

	// cache persists accepted assignments; nil without Config.CacheFile.
	cache *cachefile.Writer
	// fromCache is the assignment New loaded from the cache file until Run
	// reports it to OnAssignment; owned by Run's goroutine.
	fromCache *assign.Assignment
	// received is set once an assignment from slicerd was installed;
	// owned by Run's goroutine.
	received bool

	// frontend is this client's number for subsetting.
	frontend uint64

	// Owned by Run's goroutine: where the next round starts among the
	// Distributors outside the subset (all of them without subsetting)
	// and among the Backups.
	nextDist, nextBackup int
	// heard is the newest assignment a server has sent this process; its
	// version is sent as the known generation and incarnation, and the
	// next stream's first delta applies to it. It lags the held assignment
	// while that came from the cache file, so the first server answers
	// with its current assignment, and a store that was recreated (another
	// incarnation) is noticed. nil when none: the server then sends a full
	// assignment first.
	heard *assign.Assignment
}

// maxMessageBytes bounds one WatchAssignment message, after
// decompression: the largest assignment a cache file holds.
const maxMessageBytes = cachefile.MaxFileSize

// New validates cfg and builds a Clerk without connecting; Run connects.
func New(cfg Config) (*Clerk, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Clerk{
		cfg:   cfg,
		log:   cfg.Logger.With("job", cfg.Job),
		ready: make(chan struct{}),
		wake:  make(chan struct{}, 1),
	}
	c.client = cfg.HTTPClient
	if c.client == nil {
		if cfg.TLS != nil {
			c.ownClient = api.NewHTTPClient(cfg.TLS.ClientConfig(tlsconfig.WantAgent(identity.Distributor, identity.Backup)))
		} else {
			c.ownClient = api.NewH2CClient()
		}
		c.client = c.ownClient
	}
	// Rotations start at a random server so that clients that are not
	// steered by subsetting spread out instead of piling onto the first.
	c.nextDist, c.nextBackup = rand.Int(), rand.Int()
	if cfg.Frontend != nil {
		c.frontend = *cfg.Frontend
	} else {
		id := cfg.ID
		if id == "" {
			id = defaultID()
		}
		c.frontend = subset.FrontendIndex(id)
	}
	if cfg.CacheFile != "" {
		if err := cachefile.CheckWritable(cfg.CacheFile); err != nil {
			return nil, fmt.Errorf("%w: job %q: cache file: %w", ErrInvalidConfig, cfg.Job, err)
		}
		c.cache = cachefile.NewWriter(cfg.CacheFile, c.loadCache(), c.log)
	}
	if cfg.Registerer != nil {
		c.metrics = newClerkMetrics(c)
		if err := metrics.Register(cfg.Registerer, c.metrics); err != nil {
			return nil, fmt.Errorf("%w: job %q: %w", ErrInvalidConfig, cfg.Job, err)
		}
	}
	return c, nil
}

// loadCache installs the assignment in the cache file, if the file holds a
// valid one for the job, and returns its version (zero if none). A bad
// file is logged and left alone: the next accepted assignment replaces it.
func (c *Clerk) loadCache() assign.Version {
	path := c.cfg.CacheFile
	a, err := cachefile.Read(path, c.cfg.Job)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.log.Info("clerk: no assignment cache file yet; waiting for slicerd", "file", path)
		return assign.Version{}
	case err != nil:
		c.log.Warn("clerk: ignoring the assignment cache file; starting without an assignment and fetching one from slicerd, which will overwrite the file",
			"file", path, "err", err)
		return assign.Version{}
	}
	c.table.Store(newTableAt(a, time.Now()))
	close(c.ready)
	c.fromCache = a
	c.log.Info("clerk: routing on the cached assignment until slicerd answers",
		"file", path, "generation", a.Generation, "incarnation", a.Incarnation, "tasks", len(a.Tasks), "slices", len(a.Slices))
	return a.Version()
}

// AssignedTasks returns the addresses of the tasks the current assignment
// gives key's slice to, or nil before the first assignment. It does not
// allocate or lock. The result is shared: do not modify it.
func (c *Clerk) AssignedTasks(key []byte) []string {
	h := assign.HashKey(key)
	c.counted(h)
	t := c.table.Load()
	if t == nil {
		return nil
	}
	return t.addrs[t.Lookup(h)]
}

// AssignedTasksString is AssignedTasks for a string key.
func (c *Clerk) AssignedTasksString(key string) []string {
	h := assign.HashString(key)
	c.counted(h)
	t := c.table.Load()
	if t == nil {
		return nil
	}
	return t.addrs[t.Lookup(h)]
}

// counted counts a lookup of slice key h when metrics are on.
func (c *Clerk) counted(h assign.SliceKey) {
	if m := c.metrics; m != nil {
		m.lookups.Inc(uint64(h))
	}
}

// PickTask returns the address of one of the tasks serving key's slice,
// chosen uniformly at random on every call, so that the requests for a key
// that slicerd replicated to several tasks share those tasks' load rather
// than all going to the first. Tasks without an address are skipped. ok
// is false before the first assignment or when no task of the slice has
// an address. It does not allocate or lock.
func (c *Clerk) PickTask(key []byte) (addr string, ok bool) {
	h := assign.HashKey(key)
	c.counted(h)
	t := c.table.Load()
	if t == nil {
		return "", false
	}
	return pick(t.addrs[t.Lookup(h)])
}

// PickTaskString is PickTask for a string key.
func (c *Clerk) PickTaskString(key string) (addr string, ok bool) {
	h := assign.HashString(key)
	c.counted(h)
	t := c.table.Load()
	if t == nil {
		return "", false
	}
	return pick(t.addrs[t.Lookup(h)])
}

// pick chooses one non-empty address uniformly at random. The runtime's
// per-thread generator behind math/rand/v2 needs no lock, so concurrent
// callers do not contend.
func pick(addrs []string) (string, bool) {
	n := uint32(len(addrs))
	switch n {
	case 0:
		return "", false
	case 1:
		return addrs[0], addrs[0] != ""
	}
	from := rand.Uint32N(n)
	for k := range n {
		if a := addrs[(from+k)%n]; a != "" {
			return a, true
		}
	}
	return "", false
}

// AssignedTaskNames returns the names of the tasks serving key's slice, in
// the same order as AssignedTasks, or nil before the first assignment. The
// result is shared: do not modify it.
func (c *Clerk) AssignedTaskNames(key []byte) []string {
	h := assign.HashKey(key)
	c.counted(h)
	t := c.table.Load()
	if t == nil {
		return nil
	}
	return t.Names(t.Lookup(h))
}

// Table returns the lookup table of the current assignment, or nil.
func (c *Clerk) Table() *Table { return c.table.Load() }

// Assignment returns the current assignment, or nil. It is read-only.
func (c *Clerk) Assignment() *assign.Assignment {
	if t := c.table.Load(); t != nil {
		return t.a
	}
	return nil
}

// Generation returns the generation of the current assignment, 0 if none.
func (c *Clerk) Generation() uint64 {
	if t := c.table.Load(); t != nil {
		return t.a.Generation
	}
	return 0
}

// Ready is closed when the first assignment has been installed.
func (c *Clerk) Ready() <-chan struct{} { return c.ready }

// WaitReady blocks until the first assignment arrives or ctx ends, in
// which case it returns an error wrapping ErrNoAssignment and ctx.Err().
func (c *Clerk) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w for job %q: %w; is slicerd reachable at the configured addresses?", ErrNoAssignment, c.cfg.Job, ctx.Err())
	}
}

// ResolveNow ends Run's current wait between connection attempts, so a
// change in the set of servers is acted on at once; with subsetting, it
// also makes an open stream move when the change alters this client's
// subset and the stream is not on its first choice. It never blocks.
func (c *Clerk) ResolveNow() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run keeps a WatchAssignment stream open until ctx ends, then returns nil.
// It tries its preferred Distributors (see Config.SubsetSize), then the
// other Distributors, then the Backups, and waits with jittered
// exponential backoff after a round in which no server answered. Run may
// be called again after it returns, but not concurrently.
func (c *Clerk) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: job %q: Run was called twice; call it once and cancel its context to stop", ErrRunning, c.cfg.Job)
	}
	defer c.running.Store(false)
	if c.ownClient != nil {
		defer c.ownClient.CloseIdleConnections()
	}
	if c.cache != nil {
		// The writer stops, flushing the newest assignment, once ctx has
		// ended and the stream has returned (so nothing accepted after
		// its last write is lost); Run returns after it has.
		wctx, stopWriter := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.cache.Run(wctx)
		}()
		defer func() {
			stopWriter()
			<-done
		}()
	}
	if a := c.fromCache; a != nil {
		c.fromCache = nil
		if c.cfg.OnAssignment != nil && c.Assignment() == a {
			c.cfg.OnAssignment(nil, a)
		}
	}
	backoff := c.cfg.MinBackoff
	failing := false
	for {
		dists, backups := c.resolve()
		ok, err := c.round(ctx, dists, backups)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case ok:
			backoff, failing = c.cfg.MinBackoff, false
		case !failing && c.Generation() == 0 && connect.CodeOf(err) == connect.CodeNotFound:
			// A server answered; the job is new to slicerd, as while its
			// first task joins gossip.
			failing = true
			c.log.Info("clerk: slicerd does not know the job yet; retrying until one of its tasks joins or it is configured",
				"distributors", dists, "backups", backups, "err", err)
		case !failing:
			failing = true
			c.log.Warn("clerk: no slicerd server answered; keeping the current assignment and retrying",
				"generation", c.Generation(), "distributors", dists, "backups", backups, "err", err)
		default:
			c.log.Debug("clerk: retry round failed", "backoff", backoff, "err", err)
		}
		// Always pause a little, even after a healthy stream, so that a
		// server that accepts and drops streams cannot make Run spin.
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.wake:
		case <-t.C:
		}
		t.Stop()
		if !ok {
			backoff = min(2*backoff, c.cfg.MaxBackoff)
		}
	}
}

func (c *Clerk) resolve() (dists, backups []string) {
	if c.cfg.Resolver != nil {
		return c.cfg.Resolver()
	}
	return c.cfg.Addrs, c.cfg.BackupAddrs
}

// round tries the servers in the order plan gives until one gives a
// healthy stream. It reports whether one did, or else the error of a
// server that failed, NotFound only when every server answered that.
func (c *Clerk) round(ctx context.Context, dists, backups []string) (bool, error) {
	var last error
	for _, t := range c.plan(dists, backups) {
		if t.cursor != nil {
			*t.cursor = t.after
		}
		ok, err := c.watch(ctx, t)
		if ctx.Err() != nil {
			return false, nil
		}
		if ok {
			return true, nil
		}
		if last == nil || connect.CodeOf(last) == connect.CodeNotFound {
			last = err // NotFound is reported only when every server said so
		}
		c.log.Debug("clerk: server did not answer", "addr", t.addr, "backup", t.backup, "err", err)
	}
	if last == nil {
		last = errors.New("no server address known")
	}
	return false, last
}

// target is one server a round tries.
type target struct {
	addr     string
	backup   bool     // a Backup Distributor
	fallback bool     // not a preferred server: end the stream after BackupRecheck
	pref     []string // the preferred Distributors when the round was planned
	cursor   *int     // rotation cursor to set to after when this is tried
	after    int
}

// preferred returns this client's subset of dists in preference order,
// and the other Distributors (sorted); without subsetting it returns nil
// and dists. Distributors that Config.Down lists keep their place in the
// numbering but are skipped: the next ones in this client's order stand
// in for them.
func (c *Clerk) preferred(dists []string) (pref, rest []string) {
	k := c.cfg.SubsetSize
	if k <= 0 || len(dists) == 0 {
		return nil, dists
	}
	var down []string
	if c.cfg.Down != nil {
		down = c.cfg.Down()
	}
	return subsetOf(c.frontend, k, dists, down)
}

// subsetOf numbers the Distributors over live and down together, sorted so
// every client numbers them alike, and takes the first k live ones of
// subset.Rocksteadier's order for frontend. rest is the other live ones,
// sorted.
func subsetOf(frontend uint64, k int, live, down []string) (pref, rest []string) {
	all := make([]string, 0, len(live)+len(down))
	all = append(all, live...)
	all = append(all, down...)
	slices.Sort(all)
	all = slices.Compact(all)
	isLive := make(map[string]bool, len(live))
	for _, a := range live {
		isLive[a] = true
	}
	in := make(map[string]bool, k)
	for _, i := range subset.Rocksteadier(frontend, len(all), len(all)) {
		if len(pref) == k {
			break
		}
		if a := all[i]; isLive[a] {
			pref = append(pref, a)
			in[a] = true
		}
	}
	for _, a := range all {
		if isLive[a] && !in[a] {
			rest = append(rest, a)
		}
	}
	return pref, rest
}

// plan orders one round's attempts: with subsetting, the Distributors of
// this client's subset in preference order, then the other Distributors,
// then the Backups; without, every Distributor then every Backup. The
// non-preferred groups are rotated, starting after the server last tried,
// so that clients that fall back spread out.
func (c *Clerk) plan(dists, backups []string) []target {
	pref, rest := c.preferred(dists)
	out := make([]target, 0, len(dists)+len(backups))
	for _, a := range pref {
		out = append(out, target{addr: a, pref: pref})
	}
	rotate := func(addrs []string, cursor *int, backup, fallback bool) {
		start := *cursor
		for k := range addrs {
			i := (start + k) % len(addrs)
			out = append(out, target{addr: addrs[i], backup: backup, fallback: fallback, pref: pref, cursor: cursor, after: i + 1})
		}
	}
	rotate(rest, &c.nextDist, false, len(pref) > 0)
	rotate(backups, &c.nextBackup, true, true)
	return out
}

// watchSubset ends the stream on t (by cancel) when ResolveNow reports a
// change of servers that changes this client's subset and leaves t.addr
// other than its first choice, so a client that planned on a partial
// view of the Distributors moves to its subset without waiting for the
// stream to end. It returns when ctx ends.
func (c *Clerk) watchSubset(ctx context.Context, t target, cancel context.CancelFunc, moved *atomic.Bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		}
		dists, _ := c.resolve()
		pref, _ := c.preferred(dists)
		if slices.Equal(pref, t.pref) || (len(pref) > 0 && pref[0] == t.addr) {
			continue
		}
		c.log.Info("clerk: the Distributors changed; moving the stream to this client's subset", "addr", t.addr, "subset", pref)
		moved.Store(true)
		cancel()
		return
	}
}

// defaultID is hostname:pid, which tells apart the processes of one host.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// watch runs one stream. The stream was healthy if it delivered a valid
// assignment message or stayed open for at least MaxBackoff after the
// server answered (a Clerk that is already current receives nothing until
// the next generation). An attempt that failed before any answer is not
// healthy however long it took: a server that accepts connections but
// hangs the TLS handshake (5 s) or never speaks HTTP/2 (until the pings
// give up) would otherwise count as one, and a Clerk whose subset starts
// with it would go back to it in every round. A
// stream on a fallback server ends after BackupRecheck. A stream whose
// server announced heartbeats fails, not healthy, once nothing arrived on
// it for api.HeartbeatMisses intervals (see silenceWatch).
func (c *Clerk) watch(ctx context.Context, t target) (bool, error) {
	addr, backup := t.addr, t.backup
	var cancel context.CancelFunc
	if t.fallback {
		ctx, cancel = context.WithTimeout(ctx, c.cfg.BackupRecheck)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	var moved atomic.Bool
	if c.cfg.SubsetSize > 0 {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { c.watchSubset(ctx, t, cancel, &moved) })
		defer cancel() // runs before wg.Wait: stops watchSubset
	}

	known := c.heard.Version()
	req := connect.NewRequest(&slicerv1.WatchAssignmentRequest{
		Job: c.cfg.Job, KnownGeneration: known.Generation, KnownIncarnation: known.Incarnation,
		DeltaVersion: api.DeltaVersion,
	})
	req.Header().Set(api.HeartbeatHeader, "1")
	// A server that announces heartbeats is dropped when its stream goes
	// silent (see silenceWatch); one that does not is watched as before.
	silence := &silenceWatch{announced: make(chan time.Duration, 1)}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs before wg.Wait: stops silence.run
	wg.Go(func() { silence.run(ctx, cancel) })
	client := silenceClient{HTTPClient: c.client, w: silence}
	var stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse]
	var err error
	// A message larger than any assignment the cache file could hold is
	// refused at its length prefix rather than buffered.
	limit := connect.WithReadMaxBytes(maxMessageBytes)
	if backup {
		stream, err = slicerv1connect.NewBackupServiceClient(client, api.URL(addr, c.cfg.TLS != nil), limit).WatchAssignment(ctx, req)
	} else {
		stream, err = slicerv1connect.NewDistributorServiceClient(client, api.URL(addr, c.cfg.TLS != nil), limit).WatchAssignment(ctx, req)
	}
	if err != nil {
		return moved.Load(), err
	}
	defer stream.Close()

	delivered := false
	for stream.Receive() {
		if api.IsHeartbeat(stream.Msg()) {
			continue // it counted as a sign of life when its bytes arrived
		}
		silence.handling()
		a, err := api.Receive(c.heard, stream.Msg())
		if errors.Is(err, api.ErrDelta) {
			// Watch again from nothing: the server sends the full
			// assignment, and the held one serves until it arrives.
			c.heard = nil
			c.log.Warn("clerk: server sent a delta that does not apply to the assignment it was sent for; keeping the held assignment and watching again for a full one",
				"addr", addr, "backup", backup, "err", err)
			return false, err
		}
		if err != nil {
			err = fmt.Errorf("%w: %w", errRejected, err)
		} else {
			err = c.accept(a, api.CommittedAt(stream.Msg()))
		}
		if err != nil {
			c.log.Error("clerk: server sent an assignment that is not valid; dropping the stream and trying another server",
				"addr", addr, "backup", backup, "err", err)
			return false, err
		}
		if !delivered {
			c.log.Info("clerk: streaming assignments", "addr", addr, "backup", backup, "fallback", t.fallback, "generation", c.Generation())
		}
		delivered = true
		silence.done()
	}
	err = stream.Err()
	if silence.fired.Load() && !moved.Load() {
		err = fmt.Errorf("%w: nothing arrived for %v (%d heartbeat intervals the server announced): %w",
			errSilent, silence.limit(), api.HeartbeatMisses, err)
		c.log.Warn("clerk: the server's assignment stream went silent although the server promised heartbeats; keeping the held assignment and trying another server",
			"addr", addr, "backup", backup, "generation", c.Generation(), "err", err)
		return false, err
	}
	healthy := delivered || silence.openFor() >= c.cfg.MaxBackoff || moved.Load()
	if healthy && ctx.Err() == nil {
		c.log.Info("clerk: assignment stream ended; reconnecting", "addr", addr, "backup", backup, "err", err)
	}
	if t.fallback && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The recheck timer ended a working fallback stream.
		return true, nil
	}
	return healthy, err
}

// accept installs a, a valid assignment a server sent, if it is of the
// job and supersedes the current one: a newer generation, or any
// generation of another store incarnation (slicerd's store was recreated,
// and the held assignment's tasks went with it). An older or equal
// generation of the same incarnation is ignored; another job is an error.
// committed is when the Assigner committed a, or the zero time when the
// server did not say.
func (c *Clerk) accept(a *assign.Assignment, committed time.Time) error {
	if a.Job != c.cfg.Job {
		return fmt.Errorf("%w: asked for job %q, got job %q", errRejected, c.cfg.Job, a.Job)
	}
	v := a.Version()
	if v.Supersedes(c.heard.Version()) {
		c.heard = a
	}
	prev := c.table.Load()
	if prev != nil && !v.Supersedes(prev.a.Version()) {
		if a.Generation < prev.a.Generation {
			// Within one incarnation generations only go forward: the
			// store was restored from an older copy, or the server
			// predates incarnations and its store was reset.
			c.log.Warn("clerk: slicerd sent an older generation than the one held, from the same store (or one without an incarnation); keeping the held one. If slicerd's store was restored from an older copy or reset, restart this client, deleting its cache file if it has one",
				"generation", a.Generation, "held", prev.a.Generation, "incarnation", a.Incarnation, "cache_file", c.cfg.CacheFile)
		} else {
			c.log.Debug("clerk: ignoring assignment that is not newer", "generation", a.Generation, "held", prev.a.Generation)
		}
		return nil
	}
	if prev != nil && v.Reset(prev.a.Version()) {
		c.log.Info("clerk: slicerd's assignment store was recreated; replacing the held assignment with the new store's",
			"generation", a.Generation, "incarnation", a.Incarnation, "held", prev.a.Generation, "held_incarnation", prev.a.Incarnation)
	}
	now := time.Now()
	if c.received {
		// The first assignment received (whether or not the cache file
		// gave one before) may have been committed long before: only an
		// update measures distribution. Recorded before the table is
		// stored, so whoever sees the generation sees its delay counted.
		c.metrics.installed(now, committed)
	}
	c.table.Store(newTableAt(a, now))
	c.received = true
	if c.cache != nil {
		c.cache.Store(a)
	}
	var old *assign.Assignment
	if prev == nil {
		close(c.ready)
		c.log.Info("clerk: first assignment", "generation", a.Generation, "tasks", len(a.Tasks), "slices", len(a.Slices))
	} else {
		old = prev.a
		c.log.Debug("clerk: new assignment", "generation", a.Generation, "tasks", len(a.Tasks), "slices", len(a.Slices))
	}
	if c.cfg.OnAssignment != nil {
		c.cfg.OnAssignment(old, a)
	}
	return nil
}
