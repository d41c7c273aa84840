package inprocess

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

// A task asking for a LeaseTTL longer than the Assigner grants (a
// minute, against reads of at most 10 s) keeps owning its keys: the
// Slicelet paces its renewals by the TTL granted. Paced by the one asked
// for, it renewed every 20 s a lease that lapsed 9.5 s after each
// renewal, and a steady task with an unchanging assignment owned none of
// its keys for about half of the time.
func TestLongLeaseTTLDoesNotLapseBetweenRenewals(t *testing.T) {
	c := clustertest.New(t, clustertest.Options{ConfigureTask: func(cfg *slicelet.Config) {
		cfg.Consistency = assign.Strong
		cfg.LeaseTTL = time.Minute // valid: the config accepts up to lease.MaxTTL
	}})
	strong := assign.Config{MinRedundancy: 1, MaxRedundancy: 1, Consistency: assign.Strong}
	if err := c.Store().SetConfig(context.Background(), "kv", strong); err != nil {
		t.Fatal(err)
	}
	c.StartAgent("a1")
	task := c.StartTask("kv", "t0")
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	ownsAll := func() bool {
		for _, k := range keys {
			if !task.OwnsString(k) {
				return false
			}
		}
		return true
	}
	testwait.For(t, "the only task to own its keys under the guard", ownsAll)
	start := time.Now()
	gen := c.Record("kv").Generation()
	var firstGap time.Duration
	for time.Since(start) < 13*time.Second {
		if !ownsAll() && firstGap == 0 {
			firstGap = time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("generation %d -> %d over the watch", gen, c.Record("kv").Generation())
	if firstGap != 0 {
		t.Errorf("the only task of the job, with an unchanging assignment, stopped owning its keys %v after it first owned them (LeaseTTL %v; the Assigner grants at most 10s)",
			firstGap.Round(time.Millisecond), time.Minute)
	}
}
