package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testwait"
)

// TestAssignerFailover measures, over several rounds, the time from a
// SIGKILL of the preferred Assigner to the first new generation a client
// sees (committed by the next-nearest Assigner and pushed through a
// Distributor). Each round restarts the killed Assigner with the same name
// and data, waits until it leads the job again, and kills it again.
// SLICERD_FAILOVER_ROUNDS sets the number of rounds (default 2); the times
// are logged, not asserted:
//
//	SLICERD_FAILOVER_ROUNDS=10 go test -run TestAssignerFailover -v ./e2e
func TestAssignerFailover(t *testing.T) {
	rounds := 2
	if v := os.Getenv("SLICERD_FAILOVER_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLICERD_FAILOVER_ROUNDS=%q: want a positive number of rounds", v)
		}
		rounds = n
	}
	h := startHACluster(t)
	r := startRouter(t, h, filepath.Join(t.TempDir(), "kv.assignment"))
	defer func() { r.stop() }()
	nearDir := t.TempDir()

	var took []time.Duration
	for round := 1; round <= rounds; round++ {
		h.waitNearLeads(t, r)
		done := r.phase()
		before := r.c.Generation()
		killed := time.Now()
		h.near.signal(syscall.SIGKILL)
		testwait.Until(t, 30*time.Second, "a new generation after the near assigner was killed", func() bool {
			return r.c.Generation() > before
		})
		d := time.Since(killed)
		took = append(took, d)
		t.Logf("round %d: kill to first new generation seen by the client: %v", round, d.Round(time.Millisecond))
		if os.Getenv("SLICERD_FAILOVER_DEBUG") != "" {
			t.Logf("killed at %s; far assigner:\n%s", killed.UTC().Format(time.RFC3339Nano), h.far.output())
		}
		h.near.wait(10 * time.Second)
		done("failover round " + strconv.Itoa(round))
		if round < rounds {
			h.near = startSlicerd(t, "assigner-near", "--role", "assigner", "--store", h.storeFlag,
				"--data-dir", nearDir, "--join", h.far.gossipAddr)
		}
	}
	slices.Sort(took)
	t.Logf("failover over %d rounds: median %v, min %v, max %v", len(took),
		took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}
