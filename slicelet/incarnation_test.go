package slicelet_test

import (
	"path/filepath"
	"testing"

	"github.com/slicerd/slicerd/clerk/cachefile"
	"github.com/slicerd/slicerd/clerk/clerktest"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
)

// TestSliceletFollowsRecreatedStore: when slicerd's store is recreated and
// counts generations from 1 again, the Slicelet takes the new store's
// assignment (another incarnation) although its generation is lower, owns
// what it says, and caches it.
func TestSliceletFollowsRecreatedStore(t *testing.T) {
	dist, srv := slicerdNode(t, "slicerd-1", gossip.RoleDistributor)
	path := filepath.Join(t.TempDir(), "kv-0.cache")
	old := clerktest.Uniform(job, 6, tasks, 8)
	old.Incarnation = "old"
	srv.Publish(old)
	r := startWithCache(t, "kv-0", dist.GossipAddr(), path)
	testwait.For(t, "generation 6 of the old store", func() bool { return r.sl.Generation() == 6 })
	checkAffinity(t, r.sl, old)

	fresh := clerktest.Uniform(job, 1, tasks[1:], 4) // kv-0 owns nothing now
	fresh.Incarnation = "new"
	srv.Publish(fresh)
	testwait.For(t, "generation 1 of the new store", func() bool {
		return r.sl.Assignment().Version() == fresh.Version()
	})
	checkAffinity(t, r.sl, fresh)
	testwait.For(t, "the new store's assignment in the cache file", func() bool {
		a, err := cachefile.Read(path, job)
		return err == nil && a.Version() == fresh.Version()
	})
}
