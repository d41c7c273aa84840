package kvcache

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/slicelet"
)

// MaxValueBytes caps a stored value; a larger PUT body gets 413.
const MaxValueBytes = 1 << 20

// Server is one task of the cache: an http.Handler over an in-memory map
// that serves only the keys its Slicelet is assigned, and counts one unit
// of load per key request through it. It is safe for concurrent use.
type Server struct {
	sl  *slicelet.Slicelet
	log *slog.Logger
	mux *http.ServeMux

	// Strong mode (the Slicelet's consistency): every request holds a
	// handle on its key, writes go through to backing with the handle's
	// fencing token, and a satisfied request is passed to record.
	strong  bool
	await   time.Duration
	backing Backing
	now     func() int64
	record  func(key string, token uint64, start, end int64)

	// State handoff (WithHandoff): entries of slices moved away are kept
	// in leaving for retain, for their new owner to fetch.
	retain time.Duration

	mu      sync.RWMutex
	entries map[string]entry
	leaving map[string]leavingEntry
}

// leavingEntry is an entry of a slice moved away, kept until until.
type leavingEntry struct {
	entry
	until time.Time
}

type entry struct {
	val []byte
	sk  assign.SliceKey // cached so dropping a slice does not rehash every key
}

// Option configures a Server.
type Option func(*Server)

// WithBacking makes the cache write through to b, and read a key it does
// not hold from b. In strong mode each write carries its handle's fencing
// token, and b refuses a former owner's late write.
func WithBacking(b Backing) Option { return func(s *Server) { s.backing = b } }

// WithHandoff moves entries with their keys: the server serves the
// Slicelet's HandoffService, and keeps the entries of slices moved away
// for retain (DefaultRetain when 0) so that their new owner can fetch
// them. The Slicelet must have ExportState and ImportState set to the
// server's (see cmd/kvserver).
func WithHandoff(retain time.Duration) Option {
	return func(s *Server) {
		if retain <= 0 {
			retain = DefaultRetain
		}
		s.retain = retain
	}
}

// DefaultRetain is how long entries of slices moved away are kept for
// their new owner with WithHandoff.
const DefaultRetain = 30 * time.Second

// WithAwait sets how long a strongly consistent Server holds a request
// for a key that is on its way to this task (the newest assignment gives
// it here, the lease covering it has not come yet) before answering 421;
// DefaultAwait unless set. 0 answers at once.
func WithAwait(d time.Duration) Option { return func(s *Server) { s.await = max(d, 0) } }

// DefaultAwait is how long a request for a key on its way to the task
// waits for it: a move normally completes in tens of milliseconds.
const DefaultAwait = time.Second

// WithRecorder makes a strongly consistent Server report every satisfied
// request: its key, its fencing token, and now() before the handle was
// taken and after it was confirmed continuous. The end-to-end tests check
// the reports of every task (lease/leasecheck).
func WithRecorder(now func() int64, record func(key string, token uint64, start, end int64)) Option {
	return func(s *Server) { s.now, s.record = now, record }
}

// NewServer returns a Server for the task sl runs and registers it as a
// listener of sl, so that entries of slices moved away are dropped. A nil
// log discards. A Slicelet in strong mode makes a strongly consistent
// cache: it serves a key only while it holds a lease on it.
func NewServer(sl *slicelet.Slicelet, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{sl: sl, log: log, mux: http.NewServeMux(), entries: make(map[string]entry),
		strong: sl.Consistency() == assign.Strong, await: DefaultAwait}
	for _, o := range opts {
		o(s)
	}
	// Every key request counts one unit of load on its key, which the
	// Slicelet reports to slicerd so hot keys get spread out.
	count := func(h http.HandlerFunc) http.Handler {
		return slicelet.HTTPMiddleware(sl, func(r *http.Request) string { return r.PathValue("key") }, h)
	}
	s.mux.Handle("GET /kv/{key}", count(s.get))
	s.mux.Handle("PUT /kv/{key}", count(s.put))
	s.mux.Handle("DELETE /kv/{key}", count(s.del))
	s.mux.HandleFunc("GET /stats", s.stats)
	s.mux.Handle(s.grpcHandler())
	if s.retain > 0 {
		s.leaving = make(map[string]leavingEntry)
		s.mux.Handle(sl.HandoffHandler())
	}
	sl.AddListener(s)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Len is the number of entries held.
func (s *Server) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries)
}

// entryOverhead approximates what the Go map spends on an entry beyond
// its key and value bytes: the string and slice headers, the slice key
// and the map's own bookkeeping.
const entryOverhead = 64

// StateBytes calls add with each entry's slice key and its size (key,
// value and entryOverhead bytes): the state a Slicelet reports with the
// task's load (slicelet.Config.StateBytes), which keeps the task within
// its memory limit. It holds the read lock for one pass over the entries.
//
// It is also when entries kept for a handoff past their time go: the
// Slicelet calls it once per load window.
func (s *Server) StateBytes(add func(h assign.SliceKey, bytes int64)) {
	s.expireLeaving()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, e := range s.entries {
		add(e.sk, int64(len(k)+len(e.val)+entryOverhead))
	}
}

// OnChangedSlices drops the entries whose keys fall in slices no longer
// assigned to this task. It implements the Slicelet's listener.
func (s *Server) OnChangedSlices(assigned, unassigned []assign.Slice) {
	if len(unassigned) == 0 {
		return
	}
	// The Slicelet passes them sorted; sort a copy if ever not.
	byStart := func(a, b assign.Slice) int { return cmp.Compare(a.Start, b.Start) }
	ranges := unassigned
	if !slices.IsSortedFunc(ranges, byStart) {
		ranges = slices.Clone(ranges)
		slices.SortFunc(ranges, byStart)
	}
	s.expireLeaving()
	s.mu.Lock()
	dropped := 0
	now := time.Now()
	for k, e := range s.entries {
		if inRanges(ranges, e.sk) {
			delete(s.entries, k)
			if s.leaving != nil {
				s.leaving[k] = leavingEntry{entry: e, until: now.Add(s.retain)}
			}
			dropped++
		}
	}
	left := len(s.entries)
	s.mu.Unlock()
	s.log.Info("slices unassigned; dropped their entries", "slices", len(unassigned), "dropped", dropped, "kept", left)
}

// expireLeaving drops the entries kept for a handoff past their time.
func (s *Server) expireLeaving() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for k, e := range s.leaving {
		if now.After(e.until) {
			delete(s.leaving, k)
		}
	}
}

// ExportState emits the entries whose keys' slice keys are in [start,
// end), whether the task still owns them or keeps them for their new owner
// (slicelet.StateExporter). It copies them under the read lock and sends
// them without it.
func (s *Server) ExportState(ctx context.Context, start, end assign.SliceKey, emit func(key, value []byte) error) error {
	type kv struct {
		k string
		v []byte
	}
	var out []kv
	now := time.Now()
	s.mu.RLock()
	for k, e := range s.entries {
		if start <= e.sk && e.sk < end {
			out = append(out, kv{k, e.val})
		}
	}
	for k, e := range s.leaving {
		if _, current := s.entries[k]; !current && start <= e.sk && e.sk < end && now.Before(e.until) {
			out = append(out, kv{k, e.val})
		}
	}
	s.mu.RUnlock()
	for _, e := range out {
		if err := emit([]byte(e.k), e.v); err != nil {
			return err
		}
	}
	return nil
}

// ImportState stores an entry fetched from the task that held its key
// (slicelet.StateImporter), unless the key has an entry already (a write
// that came first is newer). An entry whose key the task no longer owns
// (it moved on while its state was on its way here) is kept in leaving,
// for the key's new owner to fetch from here: the Slicelet holds that
// fetch until this one has arrived.
func (s *Server) ImportState(key, value []byte) {
	k := string(key)
	owned := s.sl.IsAffinitizedKeyString(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.entries[k]; ok {
		return
	}
	e := entry{val: slices.Clone(value), sk: assign.HashString(k)}
	switch {
	case owned:
		s.entries[k] = e
	case s.leaving != nil:
		if _, ok := s.leaving[k]; !ok {
			s.leaving[k] = leavingEntry{entry: e, until: time.Now().Add(s.retain)}
		}
	}
}

// awaitState holds a request for a key the task has just gained until its
// entry, if a handoff is bringing it, has arrived.
func (s *Server) awaitState(ctx context.Context, key string) {
	if s.retain > 0 {
		_ = s.sl.AwaitStateString(ctx, key) // on ctx's end the request goes on; it ends anyway
	}
}

// inRanges reports whether k lies in one of ranges, sorted by Start.
func inRanges(ranges []assign.Slice, k assign.SliceKey) bool {
	// The last range starting at or below k is the only candidate.
	i, found := slices.BinarySearchFunc(ranges, k, func(s assign.Slice, k assign.SliceKey) int {
		return cmp.Compare(s.Start, k)
	})
	if !found {
		i--
	}
	return i >= 0 && k < ranges[i].End
}

// misdirected answers 421 for a key this task does not own; the client
// refreshes its assignment and retries.
func (s *Server) misdirected(w http.ResponseWriter, key string) {
	http.Error(w, fmt.Sprintf("kvcache: key %q is not assigned to task %s; refresh the assignment and retry at the owner", key, s.sl.Task()), http.StatusMisdirectedRequest)
}

// claim is a request's hold on its key: a handle in strong mode; in
// affinity mode, the assignment's say at the start.
type claim struct {
	s     *Server
	h     slicelet.Handle
	start int64
	owned bool
}

func (s *Server) claim(ctx context.Context, key string) claim {
	c := claim{s: s}
	if !s.strong {
		c.owned = s.sl.IsAffinitizedKeyString(key)
		return c
	}
	if s.now != nil {
		c.start = s.now()
	}
	if c.h = s.sl.HandleString(key); !c.h.Owned() && s.await > 0 {
		ctx, cancel := context.WithTimeout(ctx, s.await)
		h := s.sl.AwaitHandleString(ctx, key)
		cancel()
		if h.Owned() {
			// Take it again, so that a recorded request starts after the
			// wait, when the task owned the key, and not before.
			h.Release()
			if s.now != nil {
				c.start = s.now()
			}
			c.h = s.sl.HandleString(key)
		}
	}
	c.owned = c.h.Owned()
	return c
}

// kept reports whether the key stayed the task's throughout the request;
// in strong mode it records the satisfied request.
func (c claim) kept(key string) bool {
	if !c.s.strong {
		return true
	}
	if !c.h.IsAssignedContinuously() {
		return false
	}
	if c.s.record != nil {
		c.s.record(key, c.h.Token(), c.start, c.s.now())
	}
	return true
}

func (c claim) release() { c.h.Release() }

// The operations' errors: the key is not (or stopped being) the task's
// during the request; the key has no value; the backing store failed.
var (
	errNotOwner = errors.New("kvcache: key not assigned to this task")
	errNotFound = errors.New("kvcache: key not found")
	errBacking  = errors.New("kvcache: backing store")
)

// getValue returns key's value, from the cache or, with a backing store,
// from it.
func (s *Server) getValue(ctx context.Context, key string) ([]byte, error) {
	c := s.claim(ctx, key)
	defer c.release()
	if !c.owned {
		return nil, errNotOwner
	}
	s.awaitState(ctx, key)
	s.mu.RLock()
	e, ok := s.entries[key]
	s.mu.RUnlock()
	if !ok && s.backing != nil {
		val, found, err := s.backing.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("%w: reading: %w", errBacking, err)
		}
		if found {
			e, ok = entry{val: val, sk: assign.HashString(key)}, true
			s.mu.Lock()
			s.entries[key] = e
			s.mu.Unlock()
		}
	}
	if !c.kept(key) {
		return nil, errNotOwner
	}
	if !ok {
		return nil, errNotFound
	}
	return e.val, nil
}

// putValue stores val under key, through to the backing store if any.
func (s *Server) putValue(ctx context.Context, key string, val []byte) error {
	c := s.claim(ctx, key)
	defer c.release()
	if !c.owned {
		return errNotOwner
	}
	s.awaitState(ctx, key)
	if s.backing != nil {
		var token uint64
		if s.strong {
			token = c.h.Token()
		}
		err := s.backing.Put(ctx, key, val, token)
		if errors.Is(err, ErrStaleToken) {
			// A newer owner has written the key: this task's lease view
			// is behind. The client finds the owner and retries.
			return errNotOwner
		}
		if err != nil {
			return fmt.Errorf("%w: writing: %w", errBacking, err)
		}
	}
	sk := assign.HashString(key)
	s.mu.Lock()
	s.entries[key] = entry{val: val, sk: sk}
	s.mu.Unlock()
	// The slice may have moved away between the check and the store, after
	// the listener already dropped it: check again so no orphan survives.
	// In strong mode the write stands if the lease held throughout (it
	// went through to the backing store); only the cached copy goes.
	kept := c.kept(key)
	if !kept || !s.sl.IsAffinitizedKeyString(key) {
		s.mu.Lock()
		delete(s.entries, key)
		s.mu.Unlock()
		if !kept || !s.strong {
			return errNotOwner
		}
	}
	return nil
}

// deleteValue removes key.
func (s *Server) deleteValue(ctx context.Context, key string) error {
	c := s.claim(ctx, key)
	defer c.release()
	if !c.owned {
		return errNotOwner
	}
	s.awaitState(ctx, key)
	s.mu.Lock()
	delete(s.entries, key)
	s.mu.Unlock()
	if !c.kept(key) {
		return errNotOwner
	}
	return nil
}

// httpError answers err of an operation on key.
func (s *Server) httpError(w http.ResponseWriter, key string, err error) {
	switch {
	case errors.Is(err, errNotOwner):
		s.misdirected(w, key)
	case errors.Is(err, errNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	default:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	val, err := s.getValue(r.Context(), key)
	if err != nil {
		s.httpError(w, key, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(val)
}

func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	val, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("kvcache: value larger than %d bytes; store smaller values", MaxValueBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "kvcache: reading the value: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.putValue(r.Context(), key, val); err != nil {
		s.httpError(w, key, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) del(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := s.deleteValue(r.Context(), key); err != nil {
		s.httpError(w, key, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Stats is the body of GET /stats.
type Stats struct {
	Task       string `json:"task"`
	Keys       int    `json:"keys"`
	Generation uint64 `json:"generation"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	st := Stats{Task: s.sl.Task(), Keys: s.Len(), Generation: s.sl.Generation()}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}
