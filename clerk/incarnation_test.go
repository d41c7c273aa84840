package clerk_test

import (
	"fmt"
	"testing"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/internal/testwait"
)

// ofStore returns a uniform assignment of the given store incarnation.
func ofStore(incarnation string, gen uint64, ts []assign.Task, n int) *assign.Assignment {
	a := clerktest.Uniform(job, gen, ts, n)
	a.Incarnation = incarnation
	return a
}

// waitVersion waits until the Clerk holds the assignment version v.
func waitVersion(t *testing.T, c interface{ Assignment() *assign.Assignment }, v assign.Version) {
	t.Helper()
	testwait.For(t, fmt.Sprintf("generation %d of incarnation %q", v.Generation, v.Incarnation), func() bool {
		return c.Assignment().Version() == v
	})
}

// TestAcceptsAnotherIncarnation: an assignment of a recreated store
// replaces the held one although its generation is lower, and the Clerk
// routes by it.
func TestAcceptsAnotherIncarnation(t *testing.T) {
	srv := newServer(t)
	srv.Publish(ofStore("old", 5, tasks, 4))
	var rec recorder
	cfg := testConfig(srv.Addr())
	cfg.OnAssignment = rec.on
	c := start(t, cfg)
	waitVersion(t, c, assign.Version{Incarnation: "old", Generation: 5})

	fresh := ofStore("new", 1, tasks[:1], 3)
	srv.Publish(fresh)
	waitVersion(t, c, fresh.Version())
	checkRouting(t, c, fresh)
	// Within the new incarnation generations go forward again.
	srv.Publish(ofStore("new", 1, tasks[1:], 3))
	next := ofStore("new", 2, tasks[1:], 5)
	srv.Publish(next)
	waitVersion(t, c, next.Version())
	checkRouting(t, c, next)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 3 || rec.calls[1][0].Incarnation != "old" || rec.calls[1][1].Incarnation != "new" {
		t.Fatalf("OnAssignment got %d calls, want 3: old/5, then new/1 replacing it, then new/2", len(rec.calls))
	}
}

// TestResumesAfterStoreRecreated: a Clerk reconnecting to slicerd after its
// store was recreated (generations started again from 1) tells the server
// what it holds, and gets the new store's assignment at once.
func TestResumesAfterStoreRecreated(t *testing.T) {
	srv := newServer(t)
	addr := srv.Addr()
	srv.Publish(ofStore("old", 7, tasks, 4))
	c := start(t, testConfig(addr))
	waitVersion(t, c, assign.Version{Incarnation: "old", Generation: 7})
	srv.Close()

	srv2, err := clerktest.NewServerAt(addr)
	if err != nil {
		t.Skipf("cannot reuse port %s: %v", addr, err)
	}
	t.Cleanup(srv2.Close)
	fresh := ofStore("new", 2, tasks[1:], 4)
	srv2.Publish(fresh)
	waitVersion(t, c, fresh.Version())
	checkRouting(t, c, fresh)
	reqs := srv2.Requests()
	if len(reqs) == 0 || reqs[0].GetKnownIncarnation() != "old" || reqs[0].GetKnownGeneration() != 7 {
		t.Fatalf("first request after the restart = %v, want known old/7", reqs)
	}
}

// TestCacheReplacedByAnotherIncarnation: a cached assignment gives way to a
// recreated store's of a lower generation, and the file follows; so does
// one cached by an older library, whose incarnation is unknown.
func TestCacheReplacedByAnotherIncarnation(t *testing.T) {
	for name, cached := range map[string]*assign.Assignment{
		"other incarnation":   ofStore("old", 9, tasks, 4),
		"unknown incarnation": ofStore("", 9, tasks, 4),
	} {
		t.Run(name, func(t *testing.T) {
			path := writeCache(t, cached)
			srv := newServer(t)
			fresh := ofStore("new", 4, tasks[:1], 4)
			srv.Publish(fresh)
			cfg := testConfig(srv.Addr())
			cfg.CacheFile = path
			c := start(t, cfg)
			waitVersion(t, c, fresh.Version())
			checkRouting(t, c, fresh)
			testwait.For(t, "the new store's assignment in the cache file", func() bool {
				a, err := cachefile.Read(path, job)
				return err == nil && a.Version() == fresh.Version()
			})
		})
	}
}
