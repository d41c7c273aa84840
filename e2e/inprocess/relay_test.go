package inprocess

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles"
)

// A relay Distributor (roles.Config.DistributorUpstreams) streams a job
// from its first-ranked upstream Distributor rather than from the
// Assigner, and serves its own subscribers every new generation, as
// deltas, with the commit time intact. Its upstreams killed one after the
// other, it moves to the next and then to the job's Assigner; the
// subscriber's one stream, open throughout, gets every later generation.
func TestRelayDistributor(t *testing.T) {
	var upstreams []string
	opts := clustertest.Options{Configure: func(cfg *roles.Config) {
		if cfg.NodeName == "r" {
			cfg.DistributorUpstreams = upstreams
		}
	}}
	c := clustertest.New(t, opts)
	c.StartAgent("a", gossip.RoleAssigner, gossip.RoleBackup)
	d1 := c.StartAgent("d1", gossip.RoleDistributor)
	d2 := c.StartAgent("d2", gossip.RoleDistributor)
	upstreams = []string{d1.Addr(), d2.Addr()}
	r := c.StartAgent("r", gossip.RoleDistributor)
	c.StartTask("kv", "t0")
	c.WaitGeneration("kv", 1)

	// One subscriber stream on the relay, applying deltas.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := api.NewH2CClient()
	defer hc.CloseIdleConnections()
	stream, err := slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(r.Addr())).WatchAssignment(ctx,
		connect.NewRequest(&slicerv1.WatchAssignmentRequest{Job: "kv", DeltaVersion: api.DeltaVersion}))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		held     *assign.Assignment
		deltas   int
		untimed  int
		streamed = make(chan error, 1)
	)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			a, err := api.Receive(held, stream.Msg())
			if err != nil {
				streamed <- err
				return
			}
			mu.Lock()
			if held != nil && a.Generation <= held.Generation {
				mu.Unlock()
				streamed <- errors.New("the relay sent a generation that does not supersede the last")
				return
			}
			if stream.Msg().GetDelta() != nil {
				deltas++
			}
			if api.CommittedAt(stream.Msg()).IsZero() {
				untimed++
			}
			held = a
			mu.Unlock()
		}
		streamed <- stream.Err()
	}()
	// has waits until the stream holds the newest committed generation,
	// once it gives task keys.
	has := func(what, task string) {
		t.Helper()
		var want uint64
		testwait.For(t, "a commit giving "+task+" keys", func() bool {
			a := c.Record("kv").Current
			if a == nil {
				return false
			}
			for _, sl := range a.Slices {
				if slices.Contains(sl.Tasks, task) {
					want = a.Generation
					return true
				}
			}
			return false
		})
		testwait.For(t, what, func() bool {
			select {
			case err := <-streamed:
				t.Fatalf("the subscriber's stream ended: %v", err)
			default:
			}
			mu.Lock()
			defer mu.Unlock()
			return held != nil && held.Generation >= want
		})
	}
	has("the first assignment through the relay", "t0")

	ranked := []*clustertest.Agent{d1, d2}
	if r.PullsFrom("kv") == d2.Addr() {
		ranked = []*clustertest.Agent{d2, d1}
	}
	if got := r.PullsFrom("kv"); got != ranked[0].Addr() {
		t.Fatalf("the relay pulls from %q; want an upstream distributor (%v)", got, upstreams)
	}
	// The upstream sends the relay's stream first (it says it is a
	// relay, and nothing authenticates here); the subscriber's is not.
	testwait.For(t, "the upstream to count the relay's stream", func() bool { return ranked[0].Relays("kv") == 1 })
	if n := r.Relays("kv"); n != 0 {
		t.Errorf("the relay counts %d relay streams; its one subscriber is not one", n)
	}
	c.StartTask("kv", "t1")
	has("a new generation through the relay", "t1")

	for i, victim := range ranked {
		victim.Kill()
		want := "a"
		if i == 0 {
			want = ranked[1].Addr()
		}
		testwait.For(t, "the relay to move to "+want, func() bool { return r.PullsFrom("kv") == want })
		task := "t" + strconv.Itoa(2+i)
		c.StartTask("kv", task)
		has("a generation after "+victim.Name+" was killed", task)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the subscriber holds generation %d; %d deltas, %d messages without a commit time", held.Generation, deltas, untimed)
	if deltas == 0 {
		t.Error("the relay sent no delta")
	}
	if untimed != 0 {
		t.Errorf("%d messages lost their commit time on the way through the relay", untimed)
	}
}
