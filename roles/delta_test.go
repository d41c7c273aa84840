package roles

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
)

// rawWatcher keeps every message of a stream, and the assignment each
// brings the subscriber to.
type rawWatcher struct {
	msgs chan rawMsg
	err  chan error
}

type rawMsg struct {
	msg *slicerv1.WatchAssignmentResponse
	a   *assign.Assignment // nil when a delta did not apply
}

// watchRaw streams job's assignments from addr (a Backup when backup),
// asking for deltas when deltas is set.
func watchRaw(t *testing.T, addr, job string, backup, deltas bool, opts ...connect.ClientOption) *rawWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hc := api.NewH2CClient()
	req := &slicerv1.WatchAssignmentRequest{Job: job}
	if deltas {
		req.DeltaVersion = api.DeltaVersion
	}
	var stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse]
	var err error
	if backup {
		stream, err = slicerv1connect.NewBackupServiceClient(hc, api.RPCURL(addr), opts...).WatchAssignment(ctx, connect.NewRequest(req))
	} else {
		stream, err = slicerv1connect.NewDistributorServiceClient(hc, api.RPCURL(addr), opts...).WatchAssignment(ctx, connect.NewRequest(req))
	}
	return followRaw(t, hc, cancel, stream, err)
}

// followRaw keeps every message stream sends until the test ends, then
// cancels it and closes hc's connections.
func followRaw(t *testing.T, hc *http.Client, cancel context.CancelFunc, stream *connect.ServerStreamForClient[slicerv1.WatchAssignmentResponse], err error) *rawWatcher {
	t.Helper()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	w := &rawWatcher{msgs: make(chan rawMsg, 1000), err: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer stream.Close()
		var held *assign.Assignment
		for stream.Receive() {
			a, _ := api.Receive(held, stream.Msg())
			held = a
			w.msgs <- rawMsg{msg: stream.Msg(), a: a}
		}
		w.err <- stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		hc.CloseIdleConnections()
	})
	return w
}

// until returns the messages received up to and including the first that
// brings an assignment for which cond holds.
func (w *rawWatcher) until(t *testing.T, what string, cond func(*assign.Assignment) bool) []rawMsg {
	t.Helper()
	timeout := time.After(20 * time.Second)
	var got []rawMsg
	for {
		select {
		case m := <-w.msgs:
			got = append(got, m)
			if m.a == nil {
				t.Fatalf("waiting for %s: message %d did not apply: %v", what, len(got), m.msg)
			}
			if cond(m.a) {
				return got
			}
		case err := <-w.err:
			t.Fatalf("stream ended waiting for %s: %v", what, err)
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWatchDeltas follows a job through tasks joining on streams that ask
// for deltas (Connect, gRPC and gRPC-Web, from a Distributor and from a
// Backup) and on streams that do not: the first get the full assignment
// first and deltas after, which bring them to exactly the assignments the
// others receive whole.
func TestWatchDeltas(t *testing.T) {
	cfg := testConfig(t, "node-1", t.TempDir())
	cfg.BackupPollInterval = 20 * time.Millisecond
	node := startAgent(t, cfg)
	taskMember(t, "kv", "t0", node.GossipAddr())
	seesTask(t, node, "kv", "t0")

	type sub struct {
		name   string
		deltas bool
		w      *rawWatcher
	}
	addr := node.RPCAddr()
	subs := []sub{
		{"connect, deltas", true, watchRaw(t, addr, "kv", false, true)},
		{"grpc, deltas", true, watchRaw(t, addr, "kv", false, true, connect.WithGRPC())},
		{"grpc-web, deltas", true, watchRaw(t, addr, "kv", false, true, connect.WithGRPCWeb())},
		{"backup, deltas", true, watchRaw(t, addr, "kv", true, true)},
		{"connect, full", false, watchRaw(t, addr, "kv", false, false)},
		{"backup, full", false, watchRaw(t, addr, "kv", true, false)},
	}
	for _, s := range subs {
		s.w.until(t, s.name+": t0", hasTasks("t0"))
	}
	// Ten slices per task from the start, so that a join moves some of
	// them rather than every one.
	want := map[uint64]*assign.Assignment{}
	seen, deltasSeen := map[string]int{}, map[string]int{}
	for i := 1; i <= 3; i++ {
		task := "t" + string(rune('0'+i))
		taskMember(t, "kv", task, node.GossipAddr())
		names := []string{"t0"}
		for j := 1; j <= i; j++ {
			names = append(names, "t"+string(rune('0'+j)))
		}
		for _, s := range subs {
			msgs := s.w.until(t, s.name+": "+task, hasTasks(names...))
			for _, m := range msgs {
				if m.msg.GetDelta() != nil && !s.deltas {
					t.Fatalf("%s: a stream that did not ask for deltas got one", s.name)
				}
				if prev, ok := want[m.a.Generation]; ok && !reflect.DeepEqual(prev, m.a) {
					t.Fatalf("%s: generation %d differs between streams:\n%+v\n%+v", s.name, m.a.Generation, prev, m.a)
				}
				want[m.a.Generation] = m.a
				seen[s.name]++
				if m.msg.GetDelta() != nil {
					deltasSeen[s.name]++
				}
			}
		}
	}
	for _, s := range subs {
		if s.deltas && deltasSeen[s.name] == 0 {
			t.Errorf("%s: no delta in %d messages", s.name, seen[s.name])
		}
		t.Logf("%s: %d messages, %d deltas", s.name, seen[s.name], deltasSeen[s.name])
	}
}
