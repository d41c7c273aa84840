package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/slicerd/slicerd/assign"
)

var ctx = context.Background()

func TestRoundTrip(t *testing.T) {
	s := openTest(t)
	cfg := assign.Config{MinRedundancy: 2, MaxRedundancy: 5}
	if err := s.SetConfig(ctx, "web", cfg); err != nil {
		t.Fatal(err)
	}
	rec := mustLoad(t, s, "web")
	if rec.Current != nil || rec.Previous != nil || !rec.Configured || rec.Config != cfg || rec.Job != "web" {
		t.Fatalf("config-only record: %+v", rec)
	}
	if rec.Generation() != 0 {
		t.Fatalf("Generation() = %d, want 0", rec.Generation())
	}

	a := testAssignment("web", 1, 5, 3)
	mustCommit(t, s, "web", 0, a)
	rec = mustLoad(t, s, "web")
	if !sameAssignment(rec.Current, a) || rec.Previous != nil || rec.Config != cfg || !rec.Configured {
		t.Fatalf("after commit: %+v", rec)
	}
	// The caller owns what Load returns.
	rec.Current.Slices[0].Tasks[0] = "mutated"
	if got := mustLoad(t, s, "web"); !sameAssignment(got.Current, a) {
		t.Fatal("mutating a loaded record changed the store")
	}

	// A job with an assignment but no config gets the default config.
	mustCommit(t, s, "api", 0, testAssignment("api", 7, 2, 1))
	rec = mustLoad(t, s, "api")
	if rec.Configured || rec.Config != assign.DefaultConfig() || rec.Generation() != 7 {
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

func TestLoadNotFound(t *testing.T) {
	s := openTest(t)
	_, err := s.Load(ctx, "nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Load of a missing job: %v, want ErrNotFound naming it", err)
	}
	jobs, err := s.Jobs(ctx)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs of an empty store = %q, %v", jobs, err)
	}
}

func TestPreviousKept(t *testing.T) {
	s := openTest(t)
	var gens []*assign.Assignment
	for g := uint64(1); g <= 4; g++ {
		a := testAssignment("j", g*10, int(g), 2)
		mustCommit(t, s, "j", (g-1)*10, a)
		gens = append(gens, a)
		rec := mustLoad(t, s, "j")
		if !sameAssignment(rec.Current, a) {
			t.Fatalf("gen %d: current %+v", g*10, rec.Current)
		}
		var want *assign.Assignment
		if len(gens) > 1 {
			want = gens[len(gens)-2]
		}
		if !sameAssignment(rec.Previous, want) {
			t.Fatalf("gen %d: previous is generation %d, want the one before", g*10, rec.Previous.Generation)
		}
	}
}

func TestCommitConflict(t *testing.T) {
	s := openTest(t)
	tests := []struct {
		name    string
		prevGen uint64
		next    uint64
		want    string
	}{
		{"stale", 1, 3, "stored generation is 2, expected 1"},
		{"zero when one is stored", 0, 3, "stored generation is 2, expected 0"},
		{"ahead of the store", 5, 6, "stored generation is 2, expected 5"},
	}
	mustCommit(t, s, "j", 0, testAssignment("j", 1, 2, 1))
	mustCommit(t, s, "j", 1, testAssignment("j", 2, 3, 1))
	before := readFile(t, s.Path())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Commit(ctx, "j", tt.prevGen, testAssignment("j", tt.next, 4, 1))
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Commit: %v, want ErrConflict with %q", err, tt.want)
			}
			assertUnchanged(t, s.Path(), before)
		})
	}
	// A job that does not exist yet conflicts with any prevGen but 0.
	err := s.Commit(ctx, "new", 4, testAssignment("new", 5, 1, 1))
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "stored generation is 0, expected 4") {
		t.Fatalf("Commit to a missing job with prevGen 4: %v", err)
	}
	assertUnchanged(t, s.Path(), before)
	if rec := mustLoad(t, s, "j"); rec.Generation() != 2 || rec.Previous.Generation != 1 {
		t.Fatalf("record changed: current %d previous %d", rec.Generation(), rec.Previous.Generation)
	}
}

func TestCommitInvalid(t *testing.T) {
	s := openTest(t)
	mustCommit(t, s, "j", 0, testAssignment("j", 1, 2, 1))
	gap := testAssignment("j", 2, 2, 2)
	gap.Slices[1].Start++
	tests := []struct {
		name    string
		job     string
		prevGen uint64
		next    *assign.Assignment
		want    string
	}{
		{"bad job name", "Bad Name", 0, testAssignment("j", 2, 1, 1), "job name"},
		{"empty job name", "", 0, testAssignment("j", 2, 1, 1), "job name is empty"},
		{"nil", "j", 1, nil, "nil"},
		{"other job", "j", 1, testAssignment("k", 2, 1, 1), `for job "k"`},
		{"same generation", "j", 1, testAssignment("j", 1, 1, 1), "must be above"},
		{"older generation", "j", 2, testAssignment("j", 1, 1, 1), "must be above"},
		{"generation zero", "j", 0, func() *assign.Assignment { a := testAssignment("j", 1, 1, 1); a.Generation = 0; return a }(), "must be above"},
		{"invalid assignment", "j", 1, gap, "gap"},
	}
	before := readFile(t, s.Path())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Commit(ctx, tt.job, tt.prevGen, tt.next)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Commit: %v, want ErrInvalid with %q", err, tt.want)
			}
			assertUnchanged(t, s.Path(), before)
		})
	}
}

func TestSetConfigInvalid(t *testing.T) {
	s := openTest(t)
	before := readFile(t, s.Path())
	for _, tc := range []struct {
		job string
		cfg assign.Config
	}{
		{"j", assign.Config{MinRedundancy: 0, MaxRedundancy: 1}},
		{"j", assign.Config{MinRedundancy: 3, MaxRedundancy: 2}},
		{"j", assign.Config{MinRedundancy: 1, MaxRedundancy: assign.MaxRedundancyLimit + 1}},
		{"-j", assign.DefaultConfig()},
	} {
		err := s.SetConfig(ctx, tc.job, tc.cfg)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("SetConfig(%q, %+v) = %v, want ErrInvalid", tc.job, tc.cfg, err)
		}
	}
	assertUnchanged(t, s.Path(), before)
	if _, err := s.Load(ctx, "j"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an invalid config created the job: %v", err)
	}
	if _, err := s.Load(ctx, "Bad"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Load with an invalid name: %v, want ErrInvalid", err)
	}
}

// TestConcurrentCommitters runs Assigners that race to commit each
// generation: every generation is won by exactly one of them, and each sees
// generations only grow.
func TestConcurrentCommitters(t *testing.T) {
	s := openTest(t)
	const (
		committers = 6
		target     = 60
	)
	var (
		mu      sync.Mutex
		winners = make(map[uint64]int)
		wg      sync.WaitGroup
		errs    = make(chan error, committers)
	)
	for c := range committers {
		wg.Go(func() {
			var last uint64
			for {
				rec, err := s.Load(ctx, "j")
				if err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				gen := rec.Generation()
				if gen < last {
					errs <- fmt.Errorf("committer %d saw generation %d after %d", c, gen, last)
					return
				}
				last = gen
				if gen >= target {
					return
				}
				err = s.Commit(ctx, "j", gen, testAssignment("j", gen+1, c+1, 1))
				switch {
				case err == nil:
					mu.Lock()
					winners[gen+1]++
					mu.Unlock()
				case !errors.Is(err, ErrConflict):
					errs <- err
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
		if winners[g] != 1 {
			t.Errorf("generation %d committed %d times, want once", g, winners[g])
		}
	}
	if len(winners) != target {
		t.Errorf("%d generations committed, want %d", len(winners), target)
	}
	rec := mustLoad(t, s, "j")
	if rec.Generation() != target || rec.Previous.Generation != target-1 {
		t.Fatalf("final generations: current %d previous %d", rec.Generation(), rec.Previous.Generation)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	s := openTest(t)
	cfg := assign.Config{MinRedundancy: 1, MaxRedundancy: 3}
	if err := s.SetConfig(ctx, "a", cfg); err != nil {
		t.Fatal(err)
	}
	a1, a2 := testAssignment("a", 1, 3, 2), testAssignment("a", 2, 4, 2)
	b1 := testAssignment("b", 9, 10, 10)
	mustCommit(t, s, "a", 0, a1)
	mustCommit(t, s, "a", 1, a2)
	mustCommit(t, s, "b", 0, b1)

	s = reopen(t, s, BoltOptions{})
	rec := mustLoad(t, s, "a")
	if !sameAssignment(rec.Current, a2) || !sameAssignment(rec.Previous, a1) || rec.Config != cfg || !rec.Configured {
		t.Fatalf("job a after reopen: %+v", rec)
	}
	if rec := mustLoad(t, s, "b"); !sameAssignment(rec.Current, b1) || rec.Previous != nil || rec.Configured {
		t.Fatalf("job b after reopen: %+v", rec)
	}
	if jobs, err := s.Jobs(ctx); err != nil || !slices.Equal(jobs, []string{"a", "b"}) {
		t.Fatalf("Jobs after reopen = %q, %v", jobs, err)
	}
	// Writing continues from the stored generation.
	mustCommit(t, s, "a", 2, testAssignment("a", 3, 1, 1))
}

func TestReadOnly(t *testing.T) {
	s := openTest(t)
	a := testAssignment("j", 1, 2, 2)
	mustCommit(t, s, "j", 0, a)
	path := s.Path()
	ro := reopen(t, s, BoltOptions{ReadOnly: true})
	// Read-only openers share the file.
	ro2, err := OpenBolt(path, BoltOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("second read-only open: %v", err)
	}
	defer ro2.Close()
	for _, r := range []*Bolt{ro, ro2} {
		if rec := mustLoad(t, r, "j"); !sameAssignment(rec.Current, a) {
			t.Fatalf("read-only Load: %+v", rec)
		}
	}
	before := readFile(t, path)
	if err := ro.Commit(ctx, "j", 1, testAssignment("j", 2, 1, 1)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only Commit: %v, want ErrReadOnly", err)
	}
	if err := ro.SetConfig(ctx, "j", assign.DefaultConfig()); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only SetConfig: %v, want ErrReadOnly", err)
	}
	assertUnchanged(t, path, before)
	// A writer cannot join readers.
	if _, err := OpenBolt(path, BoltOptions{LockTimeout: shortLock}); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer open beside readers: %v, want ErrLocked", err)
	}
}

func TestReadOnlyMissingFile(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenDataDir(dir, BoltOptions{ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := openTest(t)
	mustCommit(t, s, "j", 0, testAssignment("j", 1, 1, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Load(ctx, "j"); !errors.Is(err, ErrClosed) {
		t.Errorf("Load after Close: %v", err)
	}
	if err := s.Commit(ctx, "j", 1, testAssignment("j", 2, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	if err := s.SetConfig(ctx, "j", assign.DefaultConfig()); !errors.Is(err, ErrClosed) {
		t.Errorf("SetConfig after Close: %v", err)
	}
	if _, err := s.Jobs(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Jobs after Close: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	s := openTest(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Load(cctx, "j"); !errors.Is(err, context.Canceled) {
		t.Errorf("Load: %v", err)
	}
	if err := s.Commit(cctx, "j", 0, testAssignment("j", 1, 1, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit: %v", err)
	}
	if _, err := s.Load(ctx, "j"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a canceled Commit stored something: %v", err)
	}
}

func TestReadOnlyBareBoltFile(t *testing.T) {
	// A bbolt file without slicerd's buckets yet reads as an empty store.
	path := filepath.Join(t.TempDir(), DataFileName)
	rawUpdate(t, path, func(*bbolt.Tx) error { return nil })
	b, err := OpenBolt(path, BoltOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if jobs, err := b.Jobs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("Jobs = %q, %v", jobs, err)
	}
	if _, err := b.Load(ctx, "j"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load: %v, want ErrNotFound", err)
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := OpenDataDir(t.TempDir(), BoltOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, b, "j", 0, testAssignment("j", 1, 1, 1))
	_ = b.Commit(ctx, "j", 0, testAssignment("j", 2, 1, 1))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"creating a new data file", "storage opened", "committed", "commit conflict", "storage closed", b.Path()} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}
