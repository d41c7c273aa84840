package roles

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/slicelet"
)

// noticing is a slog.Handler that passes records on to the one it wraps
// and sets seen once a record's message holds match.
type noticing struct {
	slog.Handler
	match string
	seen  *atomic.Bool
}

// Enabled is true at every level: a record is noticed whether or not next
// keeps it.
func (n noticing) Enabled(context.Context, slog.Level) bool { return true }

func (n noticing) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, n.match) {
		n.seen.Store(true)
	}
	if !n.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return n.Handler.Handle(ctx, r)
}

func (n noticing) WithAttrs(as []slog.Attr) slog.Handler {
	return noticing{Handler: n.Handler.WithAttrs(as), match: n.match, seen: n.seen}
}

func (n noticing) WithGroup(g string) slog.Handler {
	return noticing{Handler: n.Handler.WithGroup(g), match: n.match, seen: n.seen}
}

// A task restarted while its first process was paused or cut off long
// enough for gossip to lose it: the new process (a real Slicelet, under
// the same task name) is refused the job's guard while the first
// process's read of it is live, so the two never own the task's keys at
// once. Once that read has expired the new process owns them, and the
// first, resumed, can no longer renew its read.
//
// The first process is the task's gossip member and its lease calls, as
// its Slicelet makes them, sent from the test: it is paused between them.
func TestRestartedTaskWaitsForItsPausedProcess(t *testing.T) {
	node := startAgent(t, testConfig(t, "node-1", t.TempDir()))
	ctx := context.Background()
	hc := api.NewH2CClient()
	t.Cleanup(hc.CloseIdleConnections)
	jobs := slicerv1connect.NewJobServiceClient(hc, api.RPCURL(node.RPCAddr()))
	leases := slicerv1connect.NewLeaseServiceClient(hc, api.RPCURL(node.RPCAddr()))

	first := taskMember(t, "kv", "kv-0", node.GossipAddr())
	seesTask(t, node, "kv", "kv-0")
	if _, err := jobs.SetJobConfig(ctx, connect.NewRequest(&slicerv1.SetJobConfigRequest{Job: "kv", Config: &slicerv1.JobConfig{
		MinRedundancy: 1, MaxRedundancy: 1, Consistency: slicerv1.Consistency_CONSISTENCY_STRONG}})); err != nil {
		t.Fatal(err)
	}
	// read is a ReadLease of the guard by the first process (instance
	// "first"); v nil asks only for the leases' state.
	read := func(v *slicerv1.LeaseValue) (*slicerv1.ReadLeaseResponse, error) {
		resp, err := leases.ReadLease(ctx, connect.NewRequest(&slicerv1.ReadLeaseRequest{Job: "kv", Task: "kv-0",
			Kind: slicerv1.LeaseKind_LEASE_KIND_GUARD, Value: v, TtlMs: 10_000, Instance: "first"}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	var guard *slicerv1.LeaseValue
	testwait.For(t, "the job's guard to be set", func() bool {
		r, err := read(nil)
		if err != nil || !r.GetGuard().GetSet() || r.GetGuard().GetRecalled() {
			return false
		}
		guard = r.GetGuard().GetValue()
		return true
	})
	if r, err := read(guard); err != nil || !r.GetGranted() {
		t.Fatalf("the first process's read of the guard at %v: %v, %v", guard, r, err)
	}

	// The first process is paused: gossip loses its member (here it
	// leaves, which ends it at once, as gossip's failure detection would
	// after a while), and a supervisor starts the task again.
	if err := first.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the agent to see kv-0 gone", func() bool {
		for _, p := range node.Peers() {
			if p.Task == "kv-0" && p.Status == gossip.StatusAlive {
				return false
			}
		}
		return true
	})
	var refused atomic.Bool
	log := slog.New(noticing{Handler: testLogger(t).Handler(), match: "another process of this task holds the lease", seen: &refused})
	second := runSlicelet(t, node, slicelet.Config{Job: "kv", Task: "kv-0", Addr: first.Self().RPCAddr, Consistency: assign.Strong, Logger: log})
	const key = "user:42"
	// The first process's read stays live while the second tries: it
	// renews it whenever the Assigner takes its call (not while gossip
	// has no member of the task).
	renewed := time.Now()
	testwait.For(t, "the second process to read the guard or be refused it", func() bool {
		if time.Since(renewed) > time.Second { // paced: the task's lease calls are
			read(guard)
			renewed = time.Now()
		}
		return second.OwnsString(key) || refused.Load()
	})
	if second.OwnsString(key) {
		t.Fatal("the second process of kv-0 owns its keys while the first still holds a live read of the guard")
	}
	if r, err := read(guard); err != nil || !r.GetGranted() {
		t.Fatalf("the first process renewing its read while the second was refused: %v, %v", r, err)
	}

	// The first process stays paused: its read expires, and the second
	// takes the keys.
	testwait.For(t, "the second process to own the keys once the first's read expired", func() bool {
		return second.OwnsString(key)
	})
	// The first, resumed, is refused its read from then on.
	r, err := read(guard)
	if err == nil && r.GetGranted() {
		t.Fatal("the first process renewed its read of the guard while the second holds it")
	}
	if err != nil && api.Refusal(err) != api.RefusalOtherProcess {
		t.Fatalf("the first process's renewal: %v; want it refused with %s=%s", err, api.RefusalHeader, api.RefusalOtherProcess)
	}
}
