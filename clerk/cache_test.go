package clerk_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// logBuffer is a slog destination tests can search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// writeCache puts a in a cache file the way a Clerk would.
func writeCache(t *testing.T, a *assign.Assignment) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kv.cache")
	if err := cachefile.Write(path, a); err != nil {
		t.Fatal(err)
	}
	return path
}

func readCacheGen(t *testing.T, path string) uint64 {
	t.Helper()
	a, err := cachefile.Read(path, job)
	if err != nil {
		t.Fatal(err)
	}
	return a.Generation
}

func isReady(c *clerk.Clerk) bool {
	select {
	case <-c.Ready():
		return true
	default:
		return false
	}
}

// runUntil runs c until stop is called, which waits for Run to return.
func runUntil(t *testing.T, c *clerk.Clerk) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestCacheWrittenAndUsedOnRestart(t *testing.T) {
	srv := newServer(t)
	path := filepath.Join(t.TempDir(), "kv.cache")
	cfg := testConfig(srv.Addr())
	cfg.CacheFile = path
	c1, err := clerk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if isReady(c1) {
		t.Fatal("ready without a cache file or a server")
	}
	stop := runUntil(t, c1)
	for gen := uint64(1); gen <= 20; gen++ {
		srv.Publish(clerktest.Uniform(job, gen, tasks, int(gen)+1))
	}
	waitGen(t, c1, 20)
	stop()
	// Run flushed the newest generation before returning.
	if g := readCacheGen(t, path); g != 20 {
		t.Fatalf("cache file holds generation %d after Run returned, want 20", g)
	}

	// Every server is gone; a restarted Clerk routes from the cache at
	// once, before Run, and keeps doing so while Run finds nobody.
	srv.Close()
	want := clerktest.Uniform(job, 20, tasks, 21)
	var rec recorder
	cfg.OnAssignment = rec.on
	c2, err := clerk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !isReady(c2) || c2.Generation() != 20 {
		t.Fatalf("restarted Clerk: ready %v, generation %d; want ready at generation 20", isReady(c2), c2.Generation())
	}
	checkRouting(t, c2, want)
	runUntil(t, c2)
	testwait.For(t, "the cached assignment reported to OnAssignment", func() bool { return len(rec.generations()) == 1 })
	rec.mu.Lock()
	if first := rec.calls[0]; first[0] != nil || first[1].Generation != 20 {
		t.Fatalf("first OnAssignment call (%v, %v), want (nil, generation 20)", first[0], first[1])
	}
	rec.mu.Unlock()
	checkRouting(t, c2, want)
}

func TestCacheReplacedByNewerFromNetwork(t *testing.T) {
	path := writeCache(t, clerktest.Uniform(job, 5, tasks, 4))
	srv := newServer(t)
	newer := clerktest.Uniform(job, 7, tasks[:2], 9)
	srv.Publish(newer)
	cfg := testConfig(srv.Addr())
	cfg.CacheFile = path
	c := start(t, cfg)
	waitGen(t, c, 7)
	checkRouting(t, c, newer)
	// A Clerk routing from its cache asks for the server's current
	// assignment whatever its generation.
	if r := srv.Requests(); r[0].GetKnownGeneration() != 0 {
		t.Fatalf("first request after a cache start has known generation %d, want 0", r[0].GetKnownGeneration())
	}
	testwait.For(t, "the newer generation in the cache file", func() bool {
		a, err := cachefile.Read(path, job)
		return err == nil && a.Generation == 7
	})
}

func TestCacheNotReplacedByOlderFromNetwork(t *testing.T) {
	cached := clerktest.Uniform(job, 9, tasks, 4)
	path := writeCache(t, cached)
	srv := newServer(t)
	srv.Publish(clerktest.Uniform(job, 4, tasks[:1], 4))
	var logs logBuffer
	cfg := testConfig(srv.Addr())
	cfg.CacheFile = path
	cfg.Logger = logs.logger()
	c := start(t, cfg)
	testwait.For(t, "the warning about the older generation", func() bool {
		return strings.Contains(logs.String(), "older generation than the one held")
	})
	if c.Generation() != 9 {
		t.Fatalf("generation %d, want the cached 9", c.Generation())
	}
	checkRouting(t, c, cached)
	if g := readCacheGen(t, path); g != 9 {
		t.Fatalf("cache file holds %d, want 9", g)
	}
	newer := clerktest.Uniform(job, 10, tasks[1:], 3)
	srv.Publish(newer)
	waitGen(t, c, 10)
	checkRouting(t, c, newer)
}

func TestCacheBadFilesAreIgnoredAndReplaced(t *testing.T) {
	good, err := cachefile.Encode(clerktest.Uniform(job, 3, tasks, 4))
	if err != nil {
		t.Fatal(err)
	}
	other, err := cachefile.Encode(clerktest.Uniform("other", 3, tasks, 4))
	if err != nil {
		t.Fatal(err)
	}
	flipped := slices.Clone(good)
	flipped[len(flipped)-3] ^= 0x40
	newer := slices.Clone(good)
	newer[9] = cachefile.Version + 1 // the low byte of the version
	for name, tc := range map[string]struct {
		data []byte
		say  string
	}{
		"corrupt":      {flipped, "checksum"},
		"truncated":    {good[:len(good)/2], "truncated"},
		"empty":        {nil, "truncated"},
		"wrong job":    {other, "wrong job: holds job"},
		"newer format": {newer, "newer format"},
		"not ours":     {[]byte("#!/bin/sh\necho hello\n"), "not a slicerd assignment cache file"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kv.cache")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			srv := newServer(t)
			var logs logBuffer
			cfg := testConfig(srv.Addr())
			cfg.CacheFile = path
			cfg.Logger = logs.logger()
			c, err := clerk.New(cfg)
			if err != nil {
				t.Fatalf("New with a bad cache file = %v; want it to start empty", err)
			}
			if isReady(c) || c.Generation() != 0 || c.AssignedTasksString("k") != nil {
				t.Fatal("routing on a bad cache file")
			}
			if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, path) || !strings.Contains(l, tc.say) {
				t.Fatalf("log %q should warn, naming %s and saying %q", l, path, tc.say)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, tc.data) {
				t.Fatal("the bad file was changed before a good assignment arrived")
			}
			runUntil(t, c)
			a := clerktest.Uniform(job, 2, tasks, 6)
			srv.Publish(a)
			waitGen(t, c, 2)
			checkRouting(t, c, a)
			testwait.For(t, "the bad file replaced", func() bool {
				got, err := cachefile.Read(path, job)
				return err == nil && got.Generation == 2
			})
		})
	}
}

func TestCacheUnwritableIsAConfigError(t *testing.T) {
	dir := t.TempDir()
	for name, path := range map[string]string{
		"missing directory": filepath.Join(dir, "no-such-dir", "kv.cache"),
		"a directory":       dir,
	} {
		cfg := testConfig("127.0.0.1:1")
		cfg.CacheFile = path
		if _, err := clerk.New(cfg); !errors.Is(err, clerk.ErrInvalidConfig) || !strings.Contains(err.Error(), "cache file") {
			t.Errorf("%s: New = %v, want ErrInvalidConfig about the cache file", name, err)
		}
	}
}

// TestServiceIndependentMode kills every slicerd server: lookups keep
// answering with the last assignment, a restarted Clerk routes from its
// cache, Run keeps retrying, and streaming resumes when a server returns.
func TestServiceIndependentMode(t *testing.T) {
	dist, backup := newServer(t), newServer(t)
	a := clerktest.Uniform(job, 4, tasks, 8)
	dist.Publish(a)
	backup.Publish(a)
	path := filepath.Join(t.TempDir(), "kv.cache")
	cfg := testConfig(dist.Addr())
	cfg.BackupAddrs = []string{backup.Addr()}
	cfg.CacheFile = path
	c1, err := clerk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop1 := runUntil(t, c1)
	waitGen(t, c1, 4)

	distAddr, backupAddr := dist.Addr(), backup.Addr()
	dist.Close()
	backup.Close()
	checkRouting(t, c1, a)
	stop1()

	var rounds atomic.Int64
	cfg.Addrs, cfg.BackupAddrs = nil, nil
	cfg.Resolver = func() ([]string, []string) {
		rounds.Add(1)
		return []string{distAddr}, []string{backupAddr}
	}
	c2, err := clerk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkRouting(t, c2, a)
	runUntil(t, c2)
	testwait.For(t, "several rounds of retries", func() bool { return rounds.Load() >= 4 })
	checkRouting(t, c2, a)

	// The Backup comes back first, with a newer generation.
	backup2, err := clerktest.NewServerAt(backupAddr)
	if err != nil {
		t.Skipf("cannot reuse port %s: %v", backupAddr, err)
	}
	t.Cleanup(backup2.Close)
	b := clerktest.Uniform(job, 5, tasks[:2], 8)
	backup2.Publish(b)
	waitGen(t, c2, 5)
	checkRouting(t, c2, b)
	testwait.For(t, "generation 5 in the cache file", func() bool {
		got, err := cachefile.Read(path, job)
		return err == nil && got.Generation == 5
	})

	// Then a Distributor.
	dist2, err := clerktest.NewServerAt(distAddr)
	if err != nil {
		t.Skipf("cannot reuse port %s: %v", distAddr, err)
	}
	t.Cleanup(dist2.Close)
	d := clerktest.Uniform(job, 6, tasks[1:], 8)
	dist2.Publish(d)
	backup2.Publish(d)
	waitGen(t, c2, 6)
	checkRouting(t, c2, d)
}
