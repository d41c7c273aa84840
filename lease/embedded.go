package lease

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Persister keeps the embedded manager's state across restarts: per job,
// the last epoch granted and the guard and bridge values. *storage.Bolt is
// one, and its fenced commits check the epoch written here in their own
// transaction.
type Persister interface {
	// LeaseStates returns every job's state as PutLeaseState stored it.
	LeaseStates(ctx context.Context) (map[string][]byte, error)
	// LeaseState returns job's state as PutLeaseState stored it, nil when
	// none is stored.
	LeaseState(ctx context.Context, job string) ([]byte, error)
	// PutLeaseState stores job's state, whose first 8 bytes are the job
	// lease's epoch, big-endian; it refuses an epoch below the stored one.
	PutLeaseState(ctx context.Context, job string, state []byte) error
}

// EmbeddedOptions configures NewEmbedded.
type EmbeddedOptions struct {
	// MaxReadTTL caps the lifetime of a read lease (default
	// DefaultMaxReadTTL): longer requests are granted this. It is also how
	// long after starting the manager keeps every guard and bridge as if
	// held by readers it cannot see, those that a previous run of the
	// process granted.
	MaxReadTTL time.Duration
	// Logger receives grants, losses and recalls; nil discards them.
	Logger *slog.Logger
}

// DefaultMaxReadTTL is EmbeddedOptions.MaxReadTTL's default.
const DefaultMaxReadTTL = 10 * time.Second

// Embedded is the lease manager of a single-node slicerd: leases live in
// its memory, and what must survive a restart (epochs, guard and bridge
// values) in its store. See the package documentation for what it
// guarantees while its process is down.
type Embedded struct {
	p       Persister
	log     *slog.Logger
	maxRead time.Duration
	// unknownUntil: until then, readers granted by the process's previous
	// run may still hold the guards and bridges it persisted.
	unknownUntil time.Time

	mu     sync.Mutex
	closed bool
	nextID int64
	// jobs holds the states of the jobs in use: a job lease held, a
	// reader of a guard or bridge, or one the previous run may have
	// granted. An idle job's state is dropped (see sweep) and read back
	// from the Persister when the job is used again, so memory follows
	// the jobs in use rather than every job ever leased, deleted ones
	// included, while the persisted epoch, which outlives a job's
	// deletion, keeps growing across it.
	jobs      map[string]*jobState
	nextSweep time.Time // the earliest next sweep
	// writing holds, per job, the write (Acquire, Set, Recall) storing
	// its state now, outside mu; closed when it is done. See writeSlot.
	writing map[string]chan struct{}
	changed chan struct{} // closed and replaced whenever a reader leaves
}

var _ Manager = (*Embedded)(nil)

// jobState is one job's leases in the embedded manager.
type jobState struct {
	epoch   uint64 // last granted, persisted
	holder  string // "" when nobody holds the job lease
	id      int64
	ttl     time.Duration
	expires time.Time
	shared  [2]sharedState // Guard, Bridge
}

type sharedState struct {
	st      State
	unknown bool // persisted before this run: readers of the last run may hold it
	readers map[string]heldRead
}

type heldRead struct {
	value    Value
	instance string // the reader's process; see Manager.Read
	expires  time.Time
}

// NewEmbedded reads the persisted state and returns a manager serving it.
func NewEmbedded(ctx context.Context, p Persister, opts EmbeddedOptions) (*Embedded, error) {
	if opts.MaxReadTTL == 0 {
		opts.MaxReadTTL = DefaultMaxReadTTL
	}
	if err := CheckTTL("embedded lease manager", opts.MaxReadTTL); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	states, err := p.LeaseStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease: read the stored lease states: %w", err)
	}
	m := &Embedded{
		p:            p,
		log:          opts.Logger,
		maxRead:      opts.MaxReadTTL,
		unknownUntil: time.Now().Add(opts.MaxReadTTL),
		jobs:         make(map[string]*jobState, len(states)),
		writing:      make(map[string]chan struct{}),
		changed:      make(chan struct{}),
	}
	now := time.Now()
	for job, b := range states {
		js, err := decodeState(b)
		if err != nil {
			return nil, fmt.Errorf("%w: the stored lease state of job %q: %w; the data file is damaged: restore slicerd.db from a backup (docs/operations.md, The data directory)", ErrCorrupt, job, err)
		}
		for i := range js.shared {
			js.shared[i].unknown = js.shared[i].st.Set
		}
		if !m.idle(job, js, now) {
			m.jobs[job] = js // the others are read back when used
		}
	}
	return m, nil
}

// Acquire implements Manager.
func (m *Embedded) Acquire(ctx context.Context, job, holder string, ttl time.Duration) (Job, error) {
	const op = "acquire job lease"
	if err := m.checkCall(ctx, op, job); err != nil {
		return Job{}, err
	}
	if err := CheckName(op, "holder", holder); err != nil {
		return Job{}, err
	}
	if err := CheckTTL(op, ttl); err != nil {
		return Job{}, err
	}
	done, err := m.writeSlot(ctx, op, job)
	if err != nil {
		return Job{}, err
	}
	defer done()
	if err := m.lockOpen(op, job); err != nil {
		return Job{}, err
	}
	now := time.Now()
	m.sweep(now)
	js, err := m.lookup(ctx, op, job)
	if err != nil {
		m.mu.Unlock()
		return Job{}, err
	}
	if js == nil {
		js = &jobState{}
	}
	if js.holder != "" && now.Before(js.expires) {
		m.mu.Unlock()
		return Job{}, &HeldError{Job: job, Holder: js.holder, Epoch: js.epoch, Remaining: js.expires.Sub(now)}
	}
	// Kept in memory while the new epoch is stored (a job being written
	// is never idle), so that the grant lands on the state others see.
	m.jobs[job] = js
	next := *js
	next.epoch++
	state := encodeState(&next)
	m.mu.Unlock()
	if err := m.p.PutLeaseState(ctx, job, state); err != nil {
		return Job{}, fmt.Errorf("lease: %s %q: store the new epoch: %w", op, job, err)
	}
	if err := m.lockOpen(op, job); err != nil {
		return Job{}, err
	}
	defer m.mu.Unlock()
	// The lease lasts its TTL from now: no earlier than the holder counts
	// it from, the moment it sent the request.
	now = time.Now()
	m.nextID++
	js.epoch, js.holder, js.id, js.ttl, js.expires = next.epoch, holder, m.nextID, ttl, now.Add(ttl)
	m.log.Info("job lease granted", "job", job, "holder", holder, "epoch", js.epoch, "ttl", ttl)
	return Job{Job: job, Holder: holder, Epoch: js.epoch, TTL: ttl, ID: js.id}, nil
}

// writeSlot serialises the writes of one job that store its state
// (Acquire, Set, Recall) and returns the func that ends the caller's turn.
// They store outside mu, so that every other call, the reads and renewals
// of the job's tasks included, goes on while a write waits for its store
// to sync; a write decides under mu, stores, then applies under mu, and no
// other write of the job runs meanwhile.
func (m *Embedded) writeSlot(ctx context.Context, op, job string) (func(), error) {
	for {
		if err := m.lockOpen(op, job); err != nil {
			return nil, err
		}
		busy := m.writing[job]
		if busy == nil {
			mine := make(chan struct{})
			m.writing[job] = mine
			m.mu.Unlock()
			return func() {
				m.mu.Lock()
				delete(m.writing, job)
				m.mu.Unlock()
				close(mine)
			}, nil
		}
		m.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("lease: %s of job %q: %w", op, job, ctx.Err())
		}
	}
}

// Renew implements Manager.
func (m *Embedded) Renew(ctx context.Context, l Job) (Job, error) {
	const op = "renew job lease"
	if err := m.checkCall(ctx, op, l.Job); err != nil {
		return Job{}, err
	}
	if err := m.lockOpen(op, l.Job); err != nil {
		return Job{}, err
	}
	defer m.mu.Unlock()
	now := time.Now()
	m.sweep(now)
	js := m.jobs[l.Job]
	if err := m.held(js, l, now); err != nil {
		return Job{}, err
	}
	js.expires = now.Add(js.ttl)
	l.TTL = js.ttl
	return l, nil
}

// RenewAll implements Manager: each lease in turn, from memory.
func (m *Embedded) RenewAll(ctx context.Context, ls []Job) []Renewal {
	out := make([]Renewal, len(ls))
	for i, l := range ls {
		out[i].Job, out[i].Err = m.Renew(ctx, l)
	}
	return out
}

// Release implements Manager.
func (m *Embedded) Release(ctx context.Context, l Job) error {
	const op = "release job lease"
	if err := m.checkCall(ctx, op, l.Job); err != nil {
		return err
	}
	if err := m.lockOpen(op, l.Job); err != nil {
		return err
	}
	defer m.mu.Unlock()
	js := m.jobs[l.Job]
	if js != nil && js.epoch == l.Epoch && js.id == l.ID && js.holder != "" {
		js.holder = ""
		m.log.Info("job lease released", "job", l.Job, "holder", l.Holder, "epoch", l.Epoch)
		if m.idle(l.Job, js, time.Now()) {
			delete(m.jobs, l.Job) // a deleted job's goes here, as its Assigner forgets it
		}
	}
	return nil
}

// Holder implements Manager.
func (m *Embedded) Holder(ctx context.Context, job string) (Job, error) {
	const op = "read job lease"
	if err := m.checkCall(ctx, op, job); err != nil {
		return Job{}, err
	}
	if err := m.lockOpen(op, job); err != nil {
		return Job{}, err
	}
	defer m.mu.Unlock()
	js := m.jobs[job]
	now := time.Now()
	if js == nil || js.holder == "" || !now.Before(js.expires) {
		return Job{}, fmt.Errorf("%w: job %q", ErrNotHeld, job)
	}
	return Job{Job: job, Holder: js.holder, Epoch: js.epoch, TTL: js.expires.Sub(now), ID: js.id}, nil
}

// State implements Manager.
func (m *Embedded) State(ctx context.Context, job string, kind Kind) (State, error) {
	const op = "read lease state"
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return State{}, err
	}
	if err := m.lockOpen(op, job); err != nil {
		return State{}, err
	}
	defer m.mu.Unlock()
	js, err := m.lookup(ctx, op, job)
	if err != nil || js == nil {
		return State{}, err
	}
	return js.shared[kind-1].st, nil
}

// Set implements Manager.
func (m *Embedded) Set(ctx context.Context, l Job, kind Kind, v Value) error {
	op := "set " + kind.String()
	if err := m.checkShared(ctx, op, l.Job, kind); err != nil {
		return err
	}
	if err := CheckValue(op, kind, v); err != nil {
		return err
	}
	done, err := m.writeSlot(ctx, op, l.Job)
	if err != nil {
		return err
	}
	defer done()
	if err := m.lockOpen(op, l.Job); err != nil {
		return err
	}
	js := m.jobs[l.Job]
	now := time.Now()
	if err := m.held(js, l, now); err != nil {
		m.mu.Unlock()
		return err
	}
	sh := &js.shared[kind-1]
	if n := m.prune(sh, now); n > 0 {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s of job %q: %d readers still hold %v; recall it and wait for them",
			ErrBusy, op, l.Job, n, sh.st.Value)
	}
	if sh.unknown {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s of job %q: readers granted before this manager started may hold %v for another %v",
			ErrBusy, op, l.Job, sh.st.Value, m.unknownUntil.Sub(now).Round(time.Millisecond))
	}
	next := *js
	next.shared[kind-1].st = State{Set: true, Value: v}
	state := encodeState(&next)
	// Closed to readers while the new value is stored: none may take the
	// old one meanwhile, and none sees the new one before it is stored.
	// If storing fails, the lease stays closed; the holder sets it again.
	sh.st.Recalled = sh.st.Set
	m.mu.Unlock()
	if err := m.p.PutLeaseState(ctx, l.Job, state); err != nil {
		return fmt.Errorf("lease: %s of job %q: store it: %w", op, l.Job, err)
	}
	m.mu.Lock()
	sh.st = next.shared[kind-1].st
	m.mu.Unlock()
	m.log.Debug("lease set", "job", l.Job, "kind", kind.String(), "value", v.String(), "epoch", l.Epoch)
	return nil
}

// Recall implements Manager.
func (m *Embedded) Recall(ctx context.Context, l Job, kind Kind) error {
	op := "recall " + kind.String()
	if err := m.checkShared(ctx, op, l.Job, kind); err != nil {
		return err
	}
	done, err := m.writeSlot(ctx, op, l.Job)
	if err != nil {
		return err
	}
	defer done()
	if err := m.lockOpen(op, l.Job); err != nil {
		return err
	}
	js := m.jobs[l.Job]
	if err := m.held(js, l, time.Now()); err != nil {
		m.mu.Unlock()
		return err
	}
	sh := &js.shared[kind-1]
	if !sh.st.Set {
		m.mu.Unlock()
		return nil
	}
	next := *js
	next.shared[kind-1].st.Recalled = true
	state := encodeState(&next)
	// Closed to readers at once; stored after (again, if an earlier
	// recall closed it but failed to store).
	sh.st.Recalled = true
	readers := len(sh.readers)
	m.mu.Unlock()
	if err := m.p.PutLeaseState(ctx, l.Job, state); err != nil {
		return fmt.Errorf("lease: %s of job %q: store it: %w", op, l.Job, err)
	}
	m.log.Debug("lease recalled", "job", l.Job, "kind", kind.String(), "value", next.shared[kind-1].st.Value.String(), "readers", readers)
	return nil
}

// Wait implements Manager.
func (m *Embedded) Wait(ctx context.Context, l Job, kind Kind) error {
	op := "wait for " + kind.String() + " readers"
	if err := m.checkShared(ctx, op, l.Job, kind); err != nil {
		return err
	}
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return fmt.Errorf("%w: %s of job %q", ErrClosed, op, l.Job)
		}
		js := m.jobs[l.Job]
		now := time.Now()
		if err := m.held(js, l, now); err != nil {
			m.mu.Unlock()
			return err
		}
		sh := &js.shared[kind-1]
		m.prune(sh, now)
		var next time.Time
		for _, r := range sh.readers {
			if next.IsZero() || r.expires.Before(next) {
				next = r.expires
			}
		}
		if sh.unknown && (next.IsZero() || m.unknownUntil.Before(next)) {
			next = m.unknownUntil
		}
		changed := m.changed
		m.mu.Unlock()
		if next.IsZero() {
			return nil
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lease: %s of job %q: %w", op, l.Job, ctx.Err())
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// Readers implements Manager.
func (m *Embedded) Readers(ctx context.Context, job string, kind Kind) ([]Reader, error) {
	const op = "list readers"
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return nil, err
	}
	if err := m.lockOpen(op, job); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	js := m.jobs[job]
	if js == nil {
		return nil, nil
	}
	sh := &js.shared[kind-1]
	m.prune(sh, time.Now())
	out := make([]Reader, 0, len(sh.readers))
	for name, r := range sh.readers {
		out = append(out, Reader{Name: name, Value: r.value})
	}
	slices.SortFunc(out, func(a, b Reader) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Read implements Manager.
func (m *Embedded) Read(ctx context.Context, job string, kind Kind, reader, instance string, v Value, ttl time.Duration) (Read, error) {
	op := "read " + kind.String()
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return Read{}, err
	}
	if err := CheckName(op, "reader", reader); err != nil {
		return Read{}, err
	}
	if err := CheckInstance(op, instance); err != nil {
		return Read{}, err
	}
	if err := CheckValue(op, kind, v); err != nil {
		return Read{}, err
	}
	if err := CheckTTL(op, ttl); err != nil {
		return Read{}, err
	}
	ttl = min(ttl, m.maxRead)
	if err := m.lockOpen(op, job); err != nil {
		return Read{}, err
	}
	defer m.mu.Unlock()
	js, err := m.lookup(ctx, op, job)
	if err != nil {
		return Read{}, err
	}
	var st State
	if js != nil {
		st = js.shared[kind-1].st
	}
	if !st.Set || st.Recalled || st.Value != v {
		return Read{}, RecalledError(job, kind, v, st)
	}
	// A live read of either kind by another process of the reader
	// refuses this one: the guard and the bridge both give the reader
	// keys.
	now := time.Now()
	for k := range js.shared {
		if r, ok := js.shared[k].readers[reader]; ok && now.Before(r.expires) && OtherInstance(r.instance, instance) {
			return Read{}, &OtherProcessError{Job: job, Kind: Kind(k + 1), Reader: reader, Remaining: r.expires.Sub(now)}
		}
	}
	sh := &js.shared[kind-1]
	if sh.readers == nil {
		sh.readers = make(map[string]heldRead)
	}
	sh.readers[reader] = heldRead{value: v, instance: instance, expires: now.Add(ttl)}
	m.jobs[job] = js
	return Read{Job: job, Kind: kind, Reader: reader, Value: v, TTL: ttl}, nil
}

// Unread implements Manager.
func (m *Embedded) Unread(ctx context.Context, job string, kind Kind, reader, instance string, v Value) error {
	op := "release " + kind.String()
	if err := m.checkShared(ctx, op, job, kind); err != nil {
		return err
	}
	if err := CheckName(op, "reader", reader); err != nil {
		return err
	}
	if err := CheckInstance(op, instance); err != nil {
		return err
	}
	if err := m.lockOpen(op, job); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if js := m.jobs[job]; js != nil {
		if r, ok := js.shared[kind-1].readers[reader]; ok && (v == Value{} || r.value == v) && !OtherInstance(r.instance, instance) {
			delete(js.shared[kind-1].readers, reader)
			m.signal()
		}
	}
	return nil
}

// Close implements Manager.
func (m *Embedded) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		m.signal()
	}
	return nil
}

// lockOpen locks mu, which the caller unlocks, unless the manager is
// closed.
func (m *Embedded) lockOpen(op, job string) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s of job %q", ErrClosed, op, job)
	}
	return nil
}

// lookup returns job's state: the one in memory, or else the persisted
// one read back, not yet kept (nil when none is persisted). Called with mu
// held.
func (m *Embedded) lookup(ctx context.Context, op, job string) (*jobState, error) {
	if js := m.jobs[job]; js != nil {
		return js, nil
	}
	b, err := m.p.LeaseState(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("lease: %s of job %q: read its stored state: %w", op, job, err)
	}
	if b == nil {
		return nil, nil
	}
	js, err := decodeState(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s of job %q: its stored lease state: %w", ErrCorrupt, op, job, err)
	}
	now := time.Now()
	for i := range js.shared {
		js.shared[i].unknown = js.shared[i].st.Set && now.Before(m.unknownUntil)
	}
	return js, nil
}

// idle reports whether js may be dropped from memory: nobody holds its job
// lease, and no reader holds its guard or bridge, nor may one the previous
// run granted. Called with mu held.
func (m *Embedded) idle(job string, js *jobState, now time.Time) bool {
	if _, w := m.writing[job]; w || (js.holder != "" && now.Before(js.expires)) {
		return false
	}
	for i := range js.shared {
		if m.prune(&js.shared[i], now) > 0 || js.shared[i].unknown {
			return false
		}
	}
	return true
}

// sweep drops the idle jobs' states, at most once per maxRead (the longest
// read lease), so that its pass over the jobs in memory costs little
// beside the grants and renewals that run it. A state dropped is read back
// from the Persister when its job is used again. Called with mu held.
func (m *Embedded) sweep(now time.Time) {
	if now.Before(m.nextSweep) {
		return
	}
	m.nextSweep = now.Add(m.maxRead)
	for job, js := range m.jobs {
		if m.idle(job, js, now) {
			delete(m.jobs, job)
		}
	}
}

// held checks that l is job's current lease. Called with mu held.
func (m *Embedded) held(js *jobState, l Job, now time.Time) error {
	switch {
	case js == nil || js.epoch != l.Epoch || js.id != l.ID:
		return fmt.Errorf("%w: job %q: the lease of epoch %d is no longer the job's", ErrLost, l.Job, l.Epoch)
	case js.holder == "":
		return fmt.Errorf("%w: job %q: the lease of epoch %d was released", ErrLost, l.Job, l.Epoch)
	case !now.Before(js.expires):
		return fmt.Errorf("%w: job %q: the lease of epoch %d expired %v ago", ErrLost, l.Job, l.Epoch, now.Sub(js.expires).Round(time.Millisecond))
	}
	return nil
}

// prune drops expired readers and ends the restart's uncertainty once it
// has passed, returning how many readers are left. Called with mu held.
func (m *Embedded) prune(sh *sharedState, now time.Time) int {
	for name, r := range sh.readers {
		if !now.Before(r.expires) {
			delete(sh.readers, name)
		}
	}
	if sh.unknown && !now.Before(m.unknownUntil) {
		sh.unknown = false
	}
	return len(sh.readers)
}

// signal wakes every Wait. Called with mu held.
func (m *Embedded) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Embedded) checkCall(ctx context.Context, op, job string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease: %s %q: %w", op, job, err)
	}
	return CheckJob(op, job)
}

func (m *Embedded) checkShared(ctx context.Context, op, job string, kind Kind) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("lease: %s of job %q: %w", op, job, err)
	}
	return CheckArgs(op, job, kind)
}

// RecalledError is the error of a Read of v that found the lease in state
// st, saying why.
func RecalledError(job string, kind Kind, v Value, st State) error {
	switch {
	case !st.Set:
		return fmt.Errorf("%w: job %q has no %s yet; retry once its assigner sets one", ErrRecalled, job, kind)
	case st.Value != v:
		return fmt.Errorf("%w: job %q's %s is at %v, not %v; use the assignment of its generation", ErrRecalled, job, kind, st.Value, v)
	}
	return fmt.Errorf("%w: job %q's %s at %v is recalled; stop using it and read the next value once it is set", ErrRecalled, job, kind, v)
}

// The persisted state of one job, as the embedded manager stores it:
//
//	epoch    uint64, big-endian (the storage layer's fence)
//	version  1 byte, stateVersion
//	guard    flags 1 byte (1 set, 2 recalled), from uint64, to uint64
//	bridge   the same
const (
	stateVersion = 1
	stateLen     = 8 + 1 + 2*17
	flagSet      = 1
	flagRecalled = 2
)

func encodeState(js *jobState) []byte {
	b := make([]byte, 0, stateLen)
	b = binary.BigEndian.AppendUint64(b, js.epoch)
	b = append(b, stateVersion)
	for _, sh := range js.shared {
		var flags byte
		if sh.st.Set {
			flags |= flagSet
		}
		if sh.st.Recalled {
			flags |= flagRecalled
		}
		b = append(b, flags)
		b = binary.BigEndian.AppendUint64(b, sh.st.Value.From)
		b = binary.BigEndian.AppendUint64(b, sh.st.Value.To)
	}
	return b
}

func decodeState(b []byte) (*jobState, error) {
	if len(b) != stateLen {
		return nil, fmt.Errorf("it is %d bytes long, want %d", len(b), stateLen)
	}
	if b[8] != stateVersion {
		return nil, fmt.Errorf("it is of version %d; this slicerd reads version %d", b[8], stateVersion)
	}
	js := &jobState{epoch: binary.BigEndian.Uint64(b)}
	for i := range js.shared {
		rec := b[9+17*i : 9+17*(i+1)]
		flags := rec[0]
		if flags&^(flagSet|flagRecalled) != 0 || (flags&flagSet == 0 && flags != 0) {
			return nil, fmt.Errorf("the %s has flags %#x", Kind(i+1), flags)
		}
		v := Value{From: binary.BigEndian.Uint64(rec[1:]), To: binary.BigEndian.Uint64(rec[9:])}
		if flags&flagSet == 0 {
			if v != (Value{}) {
				return nil, fmt.Errorf("the %s is unset but has value %v", Kind(i+1), v)
			}
			continue
		}
		if CheckValue("decode", Kind(i+1), v) != nil {
			return nil, fmt.Errorf("the %s has the invalid value %v", Kind(i+1), v)
		}
		js.shared[i].st = State{Set: true, Value: v, Recalled: flags&flagRecalled != 0}
	}
	return js, nil
}
