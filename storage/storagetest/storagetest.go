// Package storagetest is the contract every storage.Store keeps, as a test
// suite: each implementation runs it from its own tests, so the bbolt and
// etcd stores are held to the same guarantees (see the storage package
// documentation). It is for tests only.
package storagetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
)

// Opener opens the stores the suite runs against.
type Opener struct {
	// Open returns a new, empty store. The suite closes it, and may close
	// it twice: a second Close must return nil.
	Open func(t *testing.T) storage.Store
	// Peer returns another client of the data s holds, as a second process
	// would open it. Nil when an implementation allows a single client
	// (bbolt locks its file): the suite then shares s.
	Peer func(t *testing.T, s storage.Store) storage.Store
	// Raw returns everything s keeps in its backing storage, byte for
	// byte (bbolt's file; etcd's keys under the prefix with their
	// revisions), so that the suite can check a failed write wrote nothing
	// at all, not only nothing a Load would see. Nil skips that check.
	Raw func(t *testing.T, s storage.Store) []byte
	// Reopen closes s and opens its data again, as a restarted process
	// would. Nil skips the checks across reopening.
	Reopen func(t *testing.T, s storage.Store) storage.Store
}

// watchTimeout guards a wait for a watch notification, so that a broken
// Watcher fails the test instead of hanging it. It is no performance claim.
const watchTimeout = 30 * time.Second

// Run runs the contract suite as subtests of t.
func Run(t *testing.T, o Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"RoundTrip", testRoundTrip},
		{"LoadNotFound", testLoadNotFound},
		{"PreviousKept", testPreviousKept},
		{"CommitConflict", testCommitConflict},
		{"CommitInvalid", testCommitInvalid},
		{"SetConfig", testSetConfig},
		{"SetConfigInvalid", testSetConfigInvalid},
		{"SetConfigIf", testSetConfigIf},
		{"JobsSorted", testJobsSorted},
		{"FreshCopies", testFreshCopies},
		{"Closed", testClosed},
		{"CanceledContext", testCanceledContext},
		{"ConcurrentCommitters", testConcurrentCommitters},
		{"Watch", testWatch},
		{"Incarnation", testIncarnation},
		{"Delete", testDelete},
		{"DeleteRacingCommits", testDeleteRacingCommits},
		{"LoadCurrent", testLoadCurrent},
		{"LargeJob", testLargeJob},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, o) })
	}
}

// Assignment builds a valid assignment of job with nTasks tasks and
// nTasks*slicesPerTask equal slices; every fifth slice has two tasks.
func Assignment(job string, gen uint64, nTasks, slicesPerTask int) *assign.Assignment {
	return assignment(job, gen, nTasks, slicesPerTask, "task")
}

// assignment is Assignment with task names starting with prefix, so that
// tests can tell assignments of one generation apart.
func assignment(job string, gen uint64, nTasks, slicesPerTask int, prefix string) *assign.Assignment {
	a := &assign.Assignment{Job: job, Generation: gen}
	for i := range nTasks {
		a.Tasks = append(a.Tasks, assign.Task{
			Name: fmt.Sprintf("%s-%04d", prefix, i),
			Addr: fmt.Sprintf("10.0.%d.%d:7070", i/256, i%256),
		})
	}
	n := nTasks * slicesPerTask
	width := assign.KeySpaceEnd / assign.SliceKey(n)
	for i := range n {
		s := assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width}
		if i == n-1 {
			s.End = assign.KeySpaceEnd
		}
		t := i % nTasks
		s.Tasks = []string{a.Tasks[t].Name}
		if i%5 == 0 && nTasks > 1 {
			u := (t + 1) % nTasks
			s.Tasks = []string{a.Tasks[min(t, u)].Name, a.Tasks[max(t, u)].Name}
		}
		a.Slices = append(a.Slices, s)
	}
	if err := a.Validate(); err != nil {
		panic(err)
	}
	return a
}

// Same reports whether a and b are the same assignment, generation included.
func Same(a, b *assign.Assignment) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Generation == b.Generation && assign.Equal(a, b)
}

func open(t *testing.T, o Opener) storage.Store {
	t.Helper()
	s := o.Open(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// peer returns a second client of s's data, or s itself.
func peer(t *testing.T, o Opener, s storage.Store) storage.Store {
	t.Helper()
	if o.Peer == nil {
		return s
	}
	p := o.Peer(t, s)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func mustCommit(t testing.TB, s storage.Store, job string, prevGen uint64, a *assign.Assignment) {
	t.Helper()
	if err := s.Commit(context.Background(), job, prevGen, a); err != nil {
		t.Fatalf("Commit(%q, %d, gen %d): %v", job, prevGen, a.Generation, err)
	}
}

func mustLoad(t *testing.T, s storage.Store, job string) storage.Record {
	t.Helper()
	rec, err := s.Load(context.Background(), job)
	if err != nil {
		t.Fatalf("Load(%q): %v", job, err)
	}
	return rec
}

func mustSetConfig(t *testing.T, s storage.Store, job string, cfg assign.Config) {
	t.Helper()
	if err := s.SetConfig(context.Background(), job, cfg); err != nil {
		t.Fatalf("SetConfig(%q): %v", job, err)
	}
}

// snapshot is everything a store holds, to check a failed write changed
// nothing.
type snapshot struct {
	records map[string]storage.Record
	raw     []byte // from Opener.Raw, when set
}

func snap(t *testing.T, o Opener, s storage.Store) snapshot {
	t.Helper()
	jobs, err := s.Jobs(context.Background())
	if err != nil {
		t.Fatalf("Jobs: %v", err)
	}
	m := snapshot{records: map[string]storage.Record{}}
	for _, j := range jobs {
		m.records[j] = mustLoad(t, s, j)
	}
	if o.Raw != nil {
		m.raw = o.Raw(t, s)
	}
	return m
}

func assertUnchanged(t *testing.T, o Opener, s storage.Store, before snapshot) {
	t.Helper()
	after := snap(t, o, s)
	if len(after.records) != len(before.records) {
		t.Fatalf("jobs changed: %d before, %d after", len(before.records), len(after.records))
	}
	for j, b := range before.records {
		a, ok := after.records[j]
		if !ok || !Same(a.Current, b.Current) || !Same(a.Previous, b.Previous) || !a.Config.Equal(b.Config) || a.Configured != b.Configured {
			t.Fatalf("job %q changed: before %+v, after %+v", j, b, a)
		}
	}
	if !bytes.Equal(after.raw, before.raw) {
		t.Fatalf("the backing storage changed (%d bytes before, %d after)", len(before.raw), len(after.raw))
	}
}

func testRoundTrip(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	cfg := assign.Config{MinRedundancy: 2, MaxRedundancy: 5}
	mustSetConfig(t, s, "web", cfg)
	rec := mustLoad(t, s, "web")
	if rec.Current != nil || rec.Previous != nil || !rec.Configured || !rec.Config.Equal(cfg) || rec.Job != "web" || rec.Generation() != 0 {
		t.Fatalf("config-only record: %+v", rec)
	}
	a := Assignment("web", 1, 5, 3)
	mustCommit(t, s, "web", 0, a)
	rec = mustLoad(t, s, "web")
	if !Same(rec.Current, a) || rec.Previous != nil || !rec.Config.Equal(cfg) || !rec.Configured {
		t.Fatalf("after commit: %+v", rec)
	}
	// A job with an assignment but no config gets the default config.
	mustCommit(t, s, "api", 0, Assignment("api", 7, 2, 1))
	rec = mustLoad(t, s, "api")
	if rec.Configured || !rec.Config.Equal(assign.DefaultConfig()) || rec.Generation() != 7 || rec.Job != "api" {
		t.Fatalf("unconfigured record: %+v", rec)
	}
	jobs, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"api", "web"}; !slices.Equal(jobs, want) {
		t.Fatalf("Jobs = %q, want %q", jobs, want)
	}
}

func testLoadNotFound(t *testing.T, o Opener) {
	s := open(t, o)
	_, err := s.Load(context.Background(), "nope")
	if !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Load of a missing job: %v, want ErrNotFound naming it", err)
	}
	jobs, err := s.Jobs(context.Background())
	if err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs of an empty store = %q, %v", jobs, err)
	}
	for _, name := range []string{"Bad Name", "Bad"} {
		if _, err := s.Load(context.Background(), name); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("Load(%q): %v, want ErrInvalid", name, err)
		}
	}
}

func testPreviousKept(t *testing.T, o Opener) {
	s := open(t, o)
	var gens []*assign.Assignment
	for g := uint64(1); g <= 4; g++ {
		a := Assignment("j", g*10, int(g), 2)
		var prev uint64
		if len(gens) > 0 {
			prev = gens[len(gens)-1].Generation
		}
		mustCommit(t, s, "j", prev, a)
		gens = append(gens, a)
		rec := mustLoad(t, s, "j")
		if !Same(rec.Current, a) {
			t.Fatalf("gen %d: current %+v", a.Generation, rec.Current)
		}
		var want *assign.Assignment // none before the first commit
		if len(gens) > 1 {
			want = gens[len(gens)-2]
		}
		if !Same(rec.Previous, want) {
			t.Fatalf("gen %d: previous is not the assignment it replaced", a.Generation)
		}
	}
}

func testCommitConflict(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	mustCommit(t, s, "j", 0, Assignment("j", 1, 2, 1))
	mustCommit(t, s, "j", 1, Assignment("j", 2, 3, 1))
	before := snap(t, o, s)
	for _, tt := range []struct {
		name          string
		prevGen, next uint64
		want          string
	}{
		{"stale", 1, 3, "stored generation is 2, expected 1"},
		{"zero when one is stored", 0, 3, "stored generation is 2, expected 0"},
		{"ahead of the store", 5, 6, "stored generation is 2, expected 5"},
	} {
		err := s.Commit(ctx, "j", tt.prevGen, Assignment("j", tt.next, 4, 1))
		if !errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("%s: Commit: %v, want ErrConflict with %q", tt.name, err, tt.want)
		}
		assertUnchanged(t, o, s, before)
	}
	// A job that does not exist yet conflicts with any prevGen but 0.
	err := s.Commit(ctx, "new", 4, Assignment("new", 5, 1, 1))
	if !errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "stored generation is 0, expected 4") {
		t.Fatalf("Commit to a missing job with prevGen 4: %v", err)
	}
	assertUnchanged(t, o, s, before)
}

func testCommitInvalid(t *testing.T, o Opener) {
	s := open(t, o)
	mustCommit(t, s, "j", 0, Assignment("j", 1, 2, 1))
	gap := Assignment("j", 2, 2, 2)
	gap.Slices[1].Start++
	zero := Assignment("j", 1, 1, 1)
	zero.Generation = 0
	before := snap(t, o, s)
	for _, tt := range []struct {
		name    string
		job     string
		prevGen uint64
		next    *assign.Assignment
		want    string
	}{
		{"bad job name", "Bad Name", 0, Assignment("j", 2, 1, 1), "job name"},
		{"empty job name", "", 0, Assignment("j", 2, 1, 1), "job name is empty"},
		{"nil", "j", 1, nil, "nil"},
		{"other job", "j", 1, Assignment("k", 2, 1, 1), `for job "k"`},
		{"same generation", "j", 1, Assignment("j", 1, 1, 1), "must be above"},
		{"older generation", "j", 2, Assignment("j", 1, 1, 1), "must be above"},
		{"generation zero", "j", 0, zero, "must be above"},
		{"invalid assignment", "j", 1, gap, "gap"},
	} {
		err := s.Commit(context.Background(), tt.job, tt.prevGen, tt.next)
		if !errors.Is(err, storage.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Fatalf("%s: Commit: %v, want ErrInvalid with %q", tt.name, err, tt.want)
		}
		assertUnchanged(t, o, s, before)
	}
}

// testSetConfig: config writes are unconditional, create the job and leave
// its assignments alone.
func testSetConfig(t *testing.T, o Opener) {
	s := open(t, o)
	a1, a2 := Assignment("j", 1, 2, 1), Assignment("j", 2, 3, 1)
	mustCommit(t, s, "j", 0, a1)
	mustCommit(t, s, "j", 1, a2)
	for _, cfg := range []assign.Config{{MinRedundancy: 1, MaxRedundancy: 3}, {MinRedundancy: 2, MaxRedundancy: 2}} {
		mustSetConfig(t, s, "j", cfg)
		rec := mustLoad(t, s, "j")
		if !rec.Config.Equal(cfg) || !rec.Configured || !Same(rec.Current, a2) || !Same(rec.Previous, a1) {
			t.Fatalf("after SetConfig(%+v): %+v", cfg, rec)
		}
	}
	// A later commit keeps the config.
	mustCommit(t, s, "j", 2, Assignment("j", 3, 1, 1))
	if rec := mustLoad(t, s, "j"); !rec.Config.Equal(assign.Config{MinRedundancy: 2, MaxRedundancy: 2}) {
		t.Fatalf("commit changed the config: %+v", rec.Config)
	}
}

// SetConfigIf writes only over the version read: none stored (0) for a
// job without a config, ConfigVersion of the stored one after; a write
// over another version is ErrConflict and changes nothing, as two
// read-modify-writes of one job at once would otherwise lose one change.
// A peer's write is seen, and the same config written again keeps its
// version.
func testSetConfigIf(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	p := peer(t, o, s)
	c1 := assign.Config{MinRedundancy: 1, MaxRedundancy: 3}
	c2 := assign.Config{MinRedundancy: 2, MaxRedundancy: 2}
	c3 := assign.Config{MinRedundancy: 1, MaxRedundancy: 1, MoveChurn: 0.05}
	if err := s.SetConfigIf(ctx, "j", c1, storage.ConfigVersion(c1)); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("SetConfigIf over a version of a job with no config: %v, want ErrConflict", err)
	}
	if err := s.SetConfigIf(ctx, "j", c1, 0); err != nil {
		t.Fatalf("SetConfigIf of a job with no config, at version 0: %v", err)
	}
	if err := p.SetConfigIf(ctx, "j", c2, 0); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("a peer's SetConfigIf at version 0 after a config was stored: %v, want ErrConflict", err)
	}
	if err := p.SetConfigIf(ctx, "j", c2, storage.ConfigVersion(c1)); err != nil {
		t.Fatalf("a peer's SetConfigIf over the version stored: %v", err)
	}
	before := snap(t, o, s)
	if err := s.SetConfigIf(ctx, "j", c3, storage.ConfigVersion(c1)); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("SetConfigIf over a version a peer replaced: %v, want ErrConflict", err)
	}
	assertUnchanged(t, o, s, before)
	if rec := mustLoad(t, s, "j"); !rec.Config.Equal(c2) {
		t.Fatalf("after a conflicting SetConfigIf the config is %+v, want %+v", rec.Config, c2)
	}
	mustSetConfig(t, s, "j", c2) // the same config again: the same version
	if err := s.SetConfigIf(ctx, "j", c3, storage.ConfigVersion(c2)); err != nil {
		t.Fatalf("SetConfigIf over the stored config's version: %v", err)
	}
	if rec := mustLoad(t, s, "j"); !rec.Config.Equal(c3) || !rec.Configured {
		t.Fatalf("after SetConfigIf: %+v, want %+v", rec.Config, c3)
	}
	if err := s.SetConfigIf(ctx, "j", assign.Config{}, storage.ConfigVersion(c3)); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("SetConfigIf of an invalid config: %v, want ErrInvalid", err)
	}
}

func testSetConfigInvalid(t *testing.T, o Opener) {
	s := open(t, o)
	before := snap(t, o, s)
	for _, tc := range []struct {
		job string
		cfg assign.Config
	}{
		{"j", assign.Config{MinRedundancy: 0, MaxRedundancy: 1}},
		{"j", assign.Config{MinRedundancy: 3, MaxRedundancy: 2}},
		{"j", assign.Config{MinRedundancy: 1, MaxRedundancy: assign.MaxRedundancyLimit + 1}},
		{"-j", assign.DefaultConfig()},
	} {
		if err := s.SetConfig(context.Background(), tc.job, tc.cfg); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("SetConfig(%q, %+v) = %v, want ErrInvalid", tc.job, tc.cfg, err)
		}
	}
	assertUnchanged(t, o, s, before)
	if _, err := s.Load(context.Background(), "j"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("an invalid config created the job: %v", err)
	}
}

func testJobsSorted(t *testing.T, o Opener) {
	s := open(t, o)
	names := []string{"web", "a-b", "a", "a.b", "a_b", "api", "0", "b9", "b10"}
	for i, n := range names {
		if i%2 == 0 {
			mustSetConfig(t, s, n, assign.DefaultConfig())
		} else {
			mustCommit(t, s, n, 0, Assignment(n, 1, 1, 1))
		}
	}
	mustSetConfig(t, s, "api", assign.DefaultConfig()) // a job with both
	jobs, err := s.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(jobs, want) {
		t.Fatalf("Jobs = %q, want %q", jobs, want)
	}
}

// testFreshCopies: neither the caller's assignment nor a loaded record is
// shared with the store.
func testFreshCopies(t *testing.T, o Opener) {
	s := open(t, o)
	a := Assignment("j", 1, 3, 2)
	want := a.Clone()
	mustCommit(t, s, "j", 0, a)
	a.Slices[0].Tasks[0] = "mutated-after-commit"
	a.Tasks[0].Addr = "mutated"
	rec := mustLoad(t, s, "j")
	if !Same(rec.Current, want) {
		t.Fatal("mutating a committed assignment changed the store")
	}
	rec.Current.Slices[0].Tasks[0] = "mutated-after-load"
	rec.Current.Tasks = nil
	if got := mustLoad(t, s, "j"); !Same(got.Current, want) {
		t.Fatal("mutating a loaded record changed the store")
	}
}

func testClosed(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	mustCommit(t, s, "j", 0, Assignment("j", 1, 1, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Load(ctx, "j"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Load after Close: %v", err)
	}
	if err := s.Commit(ctx, "j", 1, Assignment("j", 2, 1, 1)); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	if err := s.SetConfig(ctx, "j", assign.DefaultConfig()); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("SetConfig after Close: %v", err)
	}
	if _, err := s.Jobs(ctx); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Jobs after Close: %v", err)
	}
	if err := s.Delete(ctx, "j"); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Delete after Close: %v", err)
	}
	if w, ok := s.(storage.Watcher); ok {
		if _, open := <-w.Watch(ctx, ""); open {
			t.Error("Watch after Close delivered a name")
		}
	}
}

func testCanceledContext(t *testing.T, o Opener) {
	s := open(t, o)
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Load(cctx, "j"); !errors.Is(err, context.Canceled) {
		t.Errorf("Load: %v", err)
	}
	if err := s.Commit(cctx, "j", 0, Assignment("j", 1, 1, 1)); !errors.Is(err, context.Canceled) || errors.Is(err, storage.ErrConflict) {
		t.Errorf("Commit: %v", err)
	}
	if err := s.SetConfig(cctx, "j", assign.DefaultConfig()); !errors.Is(err, context.Canceled) {
		t.Errorf("SetConfig: %v", err)
	}
	mustSetConfig(t, s, "k", assign.DefaultConfig())
	if err := s.Delete(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete: %v", err)
	}
	mustLoad(t, s, "k")
	if _, err := s.Load(context.Background(), "j"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a canceled write stored something: %v", err)
	}
}

// testConcurrentCommitters races Assigners on two clients of one store (or
// one shared client): every generation is committed exactly once, each
// committer sees generations only grow, and whatever any committer loads at
// a generation is the assignment that won it, with the previous one
// behind it.
func testConcurrentCommitters(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	clients := []storage.Store{s, peer(t, o, s)}
	const (
		committers = 6
		target     = 40
	)
	type seen struct{ cur, prev *assign.Assignment }
	var (
		mu       sync.Mutex
		winners  = map[uint64]*assign.Assignment{}
		wins     = map[uint64]int{}
		observed []seen
		wg       sync.WaitGroup
		errs     = make(chan error, committers)
	)
	for c := range committers {
		store := clients[c%len(clients)]
		wg.Go(func() {
			var last uint64
			for {
				rec, err := store.Load(ctx, "j")
				if err != nil && !errors.Is(err, storage.ErrNotFound) {
					errs <- err
					return
				}
				gen := rec.Generation()
				if gen < last {
					errs <- fmt.Errorf("committer %d saw generation %d after %d", c, gen, last)
					return
				}
				last = gen
				mu.Lock()
				observed = append(observed, seen{rec.Current, rec.Previous})
				mu.Unlock()
				if gen >= target {
					return
				}
				next := assignment("j", gen+1, 1+c%3, 1, fmt.Sprintf("c%d-g%d", c, gen+1))
				err = store.Commit(ctx, "j", gen, next)
				switch {
				case err == nil:
					mu.Lock()
					wins[gen+1]++
					winners[gen+1] = next
					mu.Unlock()
				case !errors.Is(err, storage.ErrConflict):
					errs <- fmt.Errorf("committer %d: %w", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for g := uint64(1); g <= target; g++ {
		if wins[g] != 1 {
			t.Errorf("generation %d committed %d times, want once", g, wins[g])
		}
	}
	if len(wins) != target {
		t.Errorf("%d generations committed, want %d", len(wins), target)
	}
	for _, o := range observed {
		if o.cur == nil {
			continue
		}
		if w := winners[o.cur.Generation]; !Same(o.cur, w) {
			t.Errorf("loaded generation %d is not the assignment that won it", o.cur.Generation)
		}
		if o.cur.Generation > 1 && !Same(o.prev, winners[o.cur.Generation-1]) {
			t.Errorf("previous of generation %d is not the winner of %d", o.cur.Generation, o.cur.Generation-1)
		}
	}
	for _, c := range clients {
		rec := mustLoad(t, c, "j")
		if !Same(rec.Current, winners[target]) || !Same(rec.Previous, winners[target-1]) {
			t.Fatalf("final record: current %d previous %d, not the last two winners", rec.Generation(), rec.Previous.Generation)
		}
	}
}

// testWatch runs when the store is a storage.Watcher: commits and config
// writes, through either client, are delivered by name.
func testWatch(t *testing.T, o Opener) {
	s := open(t, o)
	w, ok := s.(storage.Watcher)
	if !ok {
		t.Skip("the store does not implement storage.Watcher")
	}
	p := peer(t, o, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := w.Watch(ctx, "")
	onlyB := w.Watch(ctx, "b")

	mustCommit(t, p, "a", 0, Assignment("a", 1, 1, 1))
	if got := next(t, all); got != "a" {
		t.Fatalf("watch of every job delivered %q, want a", got)
	}
	mustSetConfig(t, p, "b", assign.DefaultConfig())
	if got := next(t, all); got != "b" {
		t.Fatalf("watch of every job delivered %q, want b", got)
	}
	// The watch of b skipped a's commit.
	if got := next(t, onlyB); got != "b" {
		t.Fatalf("watch of b delivered %q, want b", got)
	}
	mustCommit(t, s, "b", 0, Assignment("b", 1, 1, 1))
	if got := next(t, onlyB); got != "b" {
		t.Fatalf("watch of b delivered %q, want b", got)
	}
	if rec := mustLoad(t, s, "b"); rec.Generation() != 1 {
		t.Fatalf("after the notification, b is at generation %d", rec.Generation())
	}
	// A deletion is a change.
	if err := p.Delete(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, onlyB); got != "b" {
		t.Fatalf("watch of b delivered %q after b was deleted, want b", got)
	}
	cancel()
	for range all {
	}
	for range onlyB {
	}

	// Closing the store ends a watch.
	last := w.Watch(context.Background(), "")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range last {
	}
}

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case name, ok := <-ch:
		if !ok {
			t.Fatal("watch closed")
		}
		return name
	case <-time.After(watchTimeout):
		t.Fatalf("no watch notification within %v", watchTimeout)
		return ""
	}
}

// testIncarnation checks that a store has an incarnation of its own, kept
// across reopening and shared by its peers, that Load and Commit stamp it
// on assignments, even on one that carried another.
func testIncarnation(t *testing.T, o Opener) {
	s := open(t, o)
	inc := s.Incarnation()
	if err := assign.ValidateIncarnation(inc); err != nil {
		t.Fatalf("a new store's incarnation %q: %v", inc, err)
	}
	if other := open(t, o).Incarnation(); other == inc {
		t.Fatalf("two new stores have the same incarnation %q", inc)
	}
	if p := peer(t, o, s); p.Incarnation() != inc {
		t.Fatalf("a peer sees incarnation %q, the store %q", p.Incarnation(), inc)
	}

	a := Assignment("inc", 1, 3, 2)
	mustCommit(t, s, "inc", 0, a)
	if a.Incarnation != inc {
		t.Fatalf("Commit left the committed assignment's incarnation %q, want the store's %q", a.Incarnation, inc)
	}
	b := Assignment("inc", 2, 3, 2)
	b.Incarnation = inc
	mustCommit(t, s, "inc", 1, b)
	rec := mustLoad(t, s, "inc")
	if rec.Current.Incarnation != inc || rec.Previous.Incarnation != inc {
		t.Fatalf("Load returned incarnations %q and %q, want the store's %q", rec.Current.Incarnation, rec.Previous.Incarnation, inc)
	}

	// An assignment derived from another store's is stored as this one's.
	c := Assignment("inc", 3, 3, 2)
	c.Incarnation = "another0incarnation"
	mustCommit(t, s, "inc", 2, c)
	if rec := mustLoad(t, s, "inc"); rec.Current.Incarnation != inc || c.Incarnation != inc {
		t.Fatalf("an assignment committed with another incarnation has %q stored and %q after Commit, want the store's %q",
			rec.Current.Incarnation, c.Incarnation, inc)
	}

	if o.Reopen == nil {
		return
	}
	r := o.Reopen(t, s)
	t.Cleanup(func() { _ = r.Close() })
	if r.Incarnation() != inc {
		t.Fatalf("reopened store has incarnation %q, want %q as before", r.Incarnation(), inc)
	}
	if rec := mustLoad(t, r, "inc"); rec.Current.Incarnation != inc || rec.Current.Generation != 3 {
		t.Fatalf("reopened store loads generation %d of incarnation %q, want 3 of %q", rec.Current.Generation, rec.Current.Incarnation, inc)
	}
}

// EncodeV1 encodes a as a slicerd before store incarnations stored it:
// assignment codec version 1, which has no incarnation field. Stores must
// still read it, giving it their incarnation.
func EncodeV1(tb testing.TB, a *assign.Assignment) []byte {
	tb.Helper()
	c := a.Clone()
	c.Incarnation = ""
	b, err := c.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	// magic, version 2, job length and job, generation, then the empty
	// incarnation's length byte, which version 1 does not have.
	const magic = 4
	if b[magic] != 2 {
		tb.Fatalf("assignment codec version %d; EncodeV1 knows version 2", b[magic])
	}
	off := magic + 1
	jobLen, n := binary.Uvarint(b[off:])
	off += n + int(jobLen)
	_, n = binary.Uvarint(b[off:])
	off += n
	if b[off] != 0 {
		tb.Fatal("expected an empty incarnation")
	}
	out := append([]byte(nil), b[:magic]...)
	out = append(out, 1)
	out = append(out, b[magic+1:off]...)
	return append(out, b[off+1:]...)
}

// testDelete: Delete removes a whole job and nothing else, peers see it at
// once, a missing job is ErrNotFound and changes nothing, a Commit based on
// what was read before conflicts, and a job created again starts afresh,
// its generations above the deleted job's.
func testDelete(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	p := peer(t, o, s)
	cfg := assign.Config{MinRedundancy: 2, MaxRedundancy: 3}
	mustSetConfig(t, s, "j", cfg)
	mustCommit(t, s, "j", 0, Assignment("j", 1, 2, 1))
	mustCommit(t, s, "j", 1, Assignment("j", 2, 3, 1))
	mustCommit(t, s, "k", 0, Assignment("k", 4, 2, 1))
	mustSetConfig(t, s, "only-config", assign.DefaultConfig())
	keep := mustLoad(t, s, "k")

	var deleted <-chan string
	if w, ok := s.(storage.Watcher); ok {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		deleted = w.Watch(wctx, "j")
	}
	if err := p.Delete(ctx, "j"); err != nil {
		t.Fatalf("Delete(j): %v", err)
	}
	if deleted != nil {
		if got := next(t, deleted); got != "j" {
			t.Fatalf("watch of j delivered %q after the Delete, want j", got)
		}
	}
	for _, c := range []storage.Store{s, p} {
		if _, err := c.Load(ctx, "j"); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("Load after Delete: %v, want ErrNotFound", err)
		}
		jobs, err := c.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"k", "only-config"}; !slices.Equal(jobs, want) {
			t.Fatalf("Jobs after Delete = %q, want %q", jobs, want)
		}
	}
	if rec := mustLoad(t, s, "k"); !Same(rec.Current, keep.Current) {
		t.Fatalf("deleting j changed k: %+v", rec)
	}
	if err := s.Delete(ctx, "only-config"); err != nil {
		t.Fatalf("Delete of a job with only a config: %v", err)
	}

	before := snap(t, o, s)
	for _, tt := range []struct {
		job  string
		want error
		msg  string
	}{
		{"j", storage.ErrNotFound, `"j"`},
		{"never", storage.ErrNotFound, `"never"`},
		{"Bad Name", storage.ErrInvalid, "job name"},
		{"", storage.ErrInvalid, "job name is empty"},
	} {
		err := s.Delete(ctx, tt.job)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
			t.Fatalf("Delete(%q): %v, want %v naming %s", tt.job, err, tt.want, tt.msg)
		}
		assertUnchanged(t, o, s, before)
	}

	// A committer that read generation 2 before the Delete loses.
	err := s.Commit(ctx, "j", 2, Assignment("j", 3, 2, 1))
	if !errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "stored generation is 0, expected 2") {
		t.Fatalf("Commit on the generation read before the Delete: %v, want ErrConflict", err)
	}
	assertUnchanged(t, o, s, before)
	// The job created again has nothing of the deleted one, and its
	// generations continue above it.
	fresh := Assignment("j", 1, 1, 1)
	mustCommit(t, p, "j", 0, fresh)
	if fresh.Generation != 3 {
		t.Fatalf("Commit of generation 1 creating a job deleted at generation 2 set generation %d, want 3", fresh.Generation)
	}
	rec := mustLoad(t, s, "j")
	if !Same(rec.Current, fresh) || rec.Previous != nil || rec.Configured || !rec.Config.Equal(assign.DefaultConfig()) {
		t.Fatalf("job created again after Delete: current %d, previous %v, config %+v (configured %v); want only the new assignment at generation 3",
			rec.Generation(), rec.Previous, rec.Config, rec.Configured)
	}
	// However long a committer of the deleted job stalls, it conflicts.
	err = s.Commit(ctx, "j", 2, Assignment("j", 3, 2, 1))
	if !errors.Is(err, storage.ErrConflict) || !strings.Contains(err.Error(), "stored generation is 3, expected 2") {
		t.Fatalf("Commit on a generation of the deleted job: %v, want ErrConflict", err)
	}
	mustCommit(t, s, "j", 3, Assignment("j", 4, 2, 1))
	if err := s.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	again := Assignment("j", 1, 1, 1)
	mustCommit(t, s, "j", 0, again)
	if again.Generation != 5 {
		t.Fatalf("a job deleted twice, at generations 2 and 4, is created again at generation %d, want 5", again.Generation)
	}
	// A job deleted with only a config has no generation to continue.
	mustCommit(t, s, "only-config", 0, Assignment("only-config", 1, 1, 1))
	if rec := mustLoad(t, p, "only-config"); rec.Generation() != 1 {
		t.Fatalf("a job deleted before any commit is created again at generation %d, want 1", rec.Generation())
	}

	if o.Reopen == nil {
		return
	}
	r := o.Reopen(t, s)
	t.Cleanup(func() { _ = r.Close() })
	jobs, err := r.Jobs(ctx)
	if err != nil || !slices.Equal(jobs, []string{"j", "k", "only-config"}) {
		t.Fatalf("Jobs after reopening = %q, %v; want [j k only-config]", jobs, err)
	}
	if err := r.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	last := Assignment("j", 1, 1, 1)
	mustCommit(t, r, "j", 0, last)
	if last.Generation != 6 {
		t.Fatalf("after reopening, a job deleted at generation 5 is created again at generation %d, want 6", last.Generation)
	}
}

// testDeleteRacingCommits races committers on two clients against repeated
// Deletes of their job. Whenever a committer loads the job, the record is
// whole: it decodes, and its previous assignment is exactly the one its
// current's committer read, never one from before a Delete; and the
// generations each committer sees only grow, across deletions too.
func testDeleteRacingCommits(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	clients := []storage.Store{s, peer(t, o, s)}
	const (
		committers = 4
		commits    = 60 // in all
		deleteEach = 3  // commits
	)
	var (
		mu        sync.Mutex
		replaced  = map[string]string{} // assignment ID → ID of the current its committer read, "" for none
		committed = map[string]uint64{} // assignment ID → generation, for the commits that succeeded
		records   []storage.Record
		total     int
		deletes   int
		wg        sync.WaitGroup
		errs      = make(chan error, committers+1)
		done      = make(chan struct{})
		signal    = make(chan struct{}, 1)
	)
	id := func(a *assign.Assignment) string {
		if a == nil {
			return ""
		}
		return strings.TrimSuffix(a.Tasks[0].Name, "-0000")
	}
	for c := range committers {
		store := clients[c%len(clients)]
		wg.Go(func() {
			var last uint64 // the highest generation this committer loaded
			for n := 0; ; n++ {
				mu.Lock()
				finished := total >= commits
				mu.Unlock()
				if finished {
					return
				}
				rec, err := store.Load(ctx, "j")
				switch {
				case errors.Is(err, storage.ErrNotFound):
				case err != nil:
					errs <- fmt.Errorf("committer %d: Load: %w", c, err)
					return
				default:
					mu.Lock()
					records = append(records, rec)
					mu.Unlock()
				}
				if gen := rec.Generation(); err == nil && gen < last {
					errs <- fmt.Errorf("committer %d saw generation %d after %d", c, gen, last)
					return
				}
				last = max(last, rec.Generation())
				nextID := fmt.Sprintf("c%d-n%d", c, n)
				mu.Lock()
				replaced[nextID] = id(rec.Current)
				mu.Unlock()
				next := assignment("j", rec.Generation()+1, 1+c%2, 1, nextID)
				err = store.Commit(ctx, "j", rec.Generation(), next)
				switch {
				case err == nil:
					mu.Lock()
					total++
					committed[nextID] = next.Generation
					mu.Unlock()
					select {
					case signal <- struct{}{}:
					default:
					}
				case !errors.Is(err, storage.ErrConflict):
					errs <- fmt.Errorf("committer %d: Commit: %w", c, err)
					return
				}
			}
		})
	}
	var deleter sync.WaitGroup
	deleter.Go(func() {
		for seen := 0; ; {
			select {
			case <-done:
				return
			case <-signal:
			}
			if seen++; seen%deleteEach != 0 {
				continue
			}
			err := clients[seen%len(clients)].Delete(ctx, "j")
			switch {
			case err == nil:
				mu.Lock()
				deletes++
				mu.Unlock()
			case !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, storage.ErrConflict):
				errs <- fmt.Errorf("Delete: %w", err)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	deleter.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if deletes == 0 {
		t.Fatal("no Delete succeeded while the committers ran")
	}
	if rec, err := s.Load(ctx, "j"); err == nil {
		records = append(records, rec)
	} else if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("final Load: %v", err)
	}
	for _, rec := range records {
		cur, prev := id(rec.Current), id(rec.Previous)
		if gen, ok := committed[cur]; !ok || gen != rec.Generation() {
			t.Fatalf("loaded generation %d (%s), which no Commit stored", rec.Generation(), cur)
		}
		if gen, ok := committed[prev]; rec.Previous != nil && (!ok || gen != rec.Previous.Generation) {
			t.Fatalf("generation %d (%s) loads with previous %s at generation %d, which no Commit stored",
				rec.Generation(), cur, prev, rec.Previous.Generation)
		}
		if want := replaced[cur]; prev != want {
			t.Fatalf("generation %d (%s) was committed over %q, but loads with previous %q", rec.Generation(), cur, want, prev)
		}
	}
	t.Logf("%d commits, %d deletes, %d records checked", total, deletes, len(records))
}

// testLargeJob: a job of 10^6 slices on 10,000 tasks, the largest slicerd
// is sized for, is committed and loaded whole by another client;
// replacing it keeps it as the previous assignment; a commit of one on a
// stale generation conflicts and leaves nothing behind; a small assignment
// replaces a large one and the other way round; and Delete removes it.
// Under the race detector the job has 10^5 slices (about 1 MB encoded);
// scripts/test.sh runs the full size without it.
func testLargeJob(t *testing.T, o Opener) {
	tasks, perTask := 10_000, 100
	if raceEnabled {
		perTask = 10
	}
	ctx := context.Background()
	s := open(t, o)
	p := peer(t, o, s)
	a1 := Assignment("big", 1, tasks, perTask)
	mustCommit(t, s, "big", 0, a1)
	if rec := mustLoad(t, p, "big"); !Same(rec.Current, a1) || rec.Previous != nil {
		t.Fatalf("loaded generation %d after %v, want the committed generation 1 alone",
			rec.Generation(), rec.Previous.Version())
	}
	a2 := assignment("big", 2, tasks, perTask, "next")
	mustCommit(t, s, "big", 1, a2)

	before := snap(t, o, s)
	if err := s.Commit(ctx, "big", 1, Assignment("big", 3, tasks, perTask)); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("Commit of a large job on a stale generation: %v, want ErrConflict", err)
	}
	assertUnchanged(t, o, s, before)

	a3 := Assignment("big", 3, tasks, perTask)
	mustCommit(t, s, "big", 2, a3)
	if rec := mustLoad(t, p, "big"); !Same(rec.Current, a3) || !Same(rec.Previous, a2) {
		t.Fatalf("loaded generation %d after %v, want 3 after 2", rec.Generation(), rec.Previous.Version())
	}
	if rec, err := storage.LoadCurrent(ctx, p, "big"); err != nil || !Same(rec.Current, a3) || rec.Previous != nil {
		t.Fatalf("LoadCurrent: generation %d after %v, %v; want 3 alone", rec.Generation(), rec.Previous.Version(), err)
	}
	small := Assignment("big", 4, 3, 2)
	mustCommit(t, s, "big", 3, small)
	if rec := mustLoad(t, p, "big"); !Same(rec.Current, small) || !Same(rec.Previous, a3) {
		t.Fatalf("loaded generation %d after %v, want the small 4 after the large 3", rec.Generation(), rec.Previous.Version())
	}
	a5 := assignment("big", 5, tasks, perTask, "last")
	mustCommit(t, s, "big", 4, a5)
	if rec := mustLoad(t, p, "big"); !Same(rec.Current, a5) || !Same(rec.Previous, small) {
		t.Fatalf("loaded generation %d after %v, want the large 5 after the small 4", rec.Generation(), rec.Previous.Version())
	}

	if err := s.Delete(ctx, "big"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := p.Load(ctx, "big"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Load after Delete: %v, want ErrNotFound", err)
	}
	a6 := Assignment("big", 1, tasks, perTask)
	mustCommit(t, s, "big", 0, a6)
	if rec := mustLoad(t, p, "big"); rec.Generation() != 6 || rec.Previous != nil || !assign.Equal(rec.Current, a6) {
		t.Fatalf("the job created again loads generation %d after %v, want 6 alone", rec.Generation(), rec.Previous.Version())
	}
}

// testLoadCurrent: the store loads a job without its previous assignment,
// as Load does otherwise, through its own LoadCurrent (both stores have
// one).
func testLoadCurrent(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o)
	if _, ok := s.(storage.CurrentLoader); !ok {
		t.Fatalf("%T does not implement storage.CurrentLoader", s)
	}
	cfg := assign.Config{MinRedundancy: 1, MaxRedundancy: 3}
	mustSetConfig(t, s, "j", cfg)
	if rec, err := storage.LoadCurrent(ctx, s, "j"); err != nil || rec.Current != nil || !rec.Configured || !rec.Config.Equal(cfg) {
		t.Fatalf("LoadCurrent of a configured job: %+v, %v", rec, err)
	}
	a1, a2 := Assignment("j", 1, 3, 2), Assignment("j", 2, 4, 2)
	mustCommit(t, s, "j", 0, a1)
	mustCommit(t, s, "j", 1, a2)
	rec, err := storage.LoadCurrent(ctx, peer(t, o, s), "j")
	if err != nil || !Same(rec.Current, a2) || rec.Previous != nil || !rec.Configured || !rec.Config.Equal(cfg) || rec.Job != "j" ||
		rec.Current.Incarnation != s.Incarnation() {
		t.Fatalf("LoadCurrent: %+v, %v; want generation 2 alone, configured, of the store's incarnation", rec, err)
	}
	if _, err := storage.LoadCurrent(ctx, s, "nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("LoadCurrent of a missing job: %v, want ErrNotFound", err)
	}
	if _, err := storage.LoadCurrent(ctx, s, "Bad Name"); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("LoadCurrent of an invalid name: %v, want ErrInvalid", err)
	}
}
