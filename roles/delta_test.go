package roles

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/testwait"
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

// Large assignments keep fewer bases: their slices, in all, stay within
// deltaBaseSlices, and the previous generation is always kept.
func TestLatestBoundsItsBases(t *testing.T) {
	l := newLatest()
	slicesPer := deltaBaseSlices / 3
	var prev *assign.Assignment
	for g := uint64(1); g <= deltaBases; g++ {
		a := &assign.Assignment{Job: "kv", Generation: g, Incarnation: "i", Tasks: []assign.Task{{Name: "a", Addr: "a:1"}}}
		w := assign.KeySpaceEnd / assign.SliceKey(slicesPer)
		for i := range slicesPer {
			end := assign.SliceKey(i+1) * w
			if i == slicesPer-1 {
				end = assign.KeySpaceEnd
			}
			a.Slices = append(a.Slices, assign.Slice{Start: assign.SliceKey(i) * w, End: end, Tasks: []string{"a"}})
		}
		l.publish(a, time.Time{})
		prev = a
	}
	s := l.get()
	if len(s.bases) != 3 || s.bases[len(s.bases)-1].Generation != prev.Generation-1 {
		t.Fatalf("kept %d bases, the newest generation %d; want the 3 latest", len(s.bases), s.bases[len(s.bases)-1].Generation)
	}
}

// A latest sends a delta only from a generation it keeps, and only when
// the delta is smaller than the full assignment.
func TestLatestDeltaChoice(t *testing.T) {
	l := newLatest()
	tasks := []assign.Task{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}}
	mk := func(gen uint64, owners ...string) *assign.Assignment {
		a := &assign.Assignment{Job: "kv", Generation: gen, Incarnation: "i", Tasks: tasks}
		w := assign.KeySpaceEnd / assign.SliceKey(len(owners))
		for i, o := range owners {
			end := assign.SliceKey(i+1) * w
			if i == len(owners)-1 {
				end = assign.KeySpaceEnd
			}
			a.Slices = append(a.Slices, assign.Slice{Start: assign.SliceKey(i) * w, End: end, Tasks: []string{o}})
		}
		return a
	}
	owners := make([]string, 100)
	for i := range owners {
		owners[i] = []string{"a", "b"}[i%2]
	}
	var gens []*assign.Assignment
	for g := uint64(1); g <= deltaBases+3; g++ {
		owners[g] = []string{"a", "b"}[(g+1)%2] // one slice moves per generation
		gens = append(gens, mk(g, owners...))
		l.publish(gens[len(gens)-1], time.Time{})
	}
	s := l.get()
	last := gens[len(gens)-1]
	for _, base := range gens[:len(gens)-1] {
		d := s.delta(base.Version())
		kept := last.Generation-base.Generation <= deltaBases
		if (d != nil) != kept {
			t.Errorf("from generation %d of %d: delta %v; want one only from the %d latest", base.Generation, last.Generation, d != nil, deltaBases)
			continue
		}
		if d == nil {
			continue
		}
		got, err := api.ApplyDelta(base, d.GetDelta())
		if err != nil || !reflect.DeepEqual(got, last) {
			t.Errorf("from generation %d: %v", base.Generation, err)
		}
		if s.delta(base.Version()) != d {
			t.Errorf("from generation %d: the delta was made again", base.Generation)
		}
	}
	if d := s.delta(assign.Version{Incarnation: "other", Generation: last.Generation - 1}); d != nil {
		t.Error("a delta for another incarnation")
	}
	if d := s.delta(assign.Version{}); d != nil {
		t.Error("a delta for a subscriber that holds nothing")
	}
	// Every slice and task changes: the delta is the assignment and more.
	flipped := make([]string, len(owners))
	for i, o := range owners {
		flipped[i] = map[string]string{"a": "b", "b": "a"}[o]
	}
	all := mk(last.Generation+1, flipped...)
	all.Tasks = []assign.Task{{Name: "a", Addr: "a:2"}, {Name: "b", Addr: "b:2"}}
	l.publish(all, time.Time{})
	if d := l.get().delta(last.Version()); d != nil {
		t.Error("a delta no smaller than the assignment")
	}
}

// pacedStreams runs n streams of l, each calling send for every new
// generation, until the test ends.
func pacedStreams(t *testing.T, l *latest, n int, send func(*sharedResponse) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		l.pacers.Wait()
		if got := l.inflight.Load(); got != 0 {
			t.Errorf("%d streams still counted in flight after every stream ended", got)
		}
	})
	for i := range n {
		known := l.current().Version()
		wg.Go(func() { _ = l.stream(ctx, nil, known, false, strconv.Itoa(i%10), send) })
	}
	testwait.For(t, "every stream to subscribe", func() bool { return l.subscribers() == n })
}

func pacedAssignment(gen uint64) *assign.Assignment {
	return &assign.Assignment{Job: "kv", Generation: gen, Incarnation: "i", Tasks: []assign.Task{{Name: "a", Addr: "a:1"}},
		Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{"a"}}}}
}

// A change to many streams wakes at most paceLimit of them at a time
// while their sends finish, and still reaches every one.
func TestPacedWakeUpBoundsSendsInFlight(t *testing.T) {
	const n = 4 * paceLimit
	l := newLatest()
	l.publish(pacedAssignment(1), time.Time{})
	var inSend, most, sent atomic.Int64
	pacedStreams(t, l, n, func(*sharedResponse) error {
		now := inSend.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		time.Sleep(100 * time.Microsecond) // a send that takes a while, so that sends overlap
		inSend.Add(-1)
		sent.Add(1)
		return nil
	})
	l.publish(pacedAssignment(2), time.Time{})
	testwait.For(t, "every stream to send generation 2", func() bool { return sent.Load() == n })
	if m := most.Load(); m > paceLimit {
		t.Errorf("%d sends at once; the pacer allows %d", m, paceLimit)
	}
}

// Streams whose sends never finish (stalled subscribers) do not keep the
// others from their update: the round lets more go after paceStall.
func TestPacedWakeUpGoesPastStalledSends(t *testing.T) {
	const n = 3 * paceLimit
	l := newLatest()
	l.publish(pacedAssignment(1), time.Time{})
	release := make(chan struct{})
	var sent atomic.Int64
	pacedStreams(t, l, n, func(*sharedResponse) error {
		sent.Add(1)
		<-release // stuck until the test ends
		return nil
	})
	t.Cleanup(func() { close(release) }) // runs before pacedStreams' cleanup
	l.publish(pacedAssignment(2), time.Time{})
	testwait.For(t, "every stream to start sending generation 2", func() bool { return sent.Load() == n })
}

// end stops a pacing round under way and waits for its goroutine, and
// every stream, woken at once, ends with the error.
func TestEndStopsPacing(t *testing.T) {
	const n = 3 * paceLimit
	l := newLatest()
	l.publish(pacedAssignment(1), time.Time{})
	release := make(chan struct{})
	var sent atomic.Int64
	pacedStreams(t, l, n, func(*sharedResponse) error {
		sent.Add(1)
		<-release
		return nil
	})
	l.publish(pacedAssignment(2), time.Time{})
	testwait.For(t, "the first paced streams to start sending generation 2", func() bool { return sent.Load() >= paceLimit })
	done := make(chan struct{})
	go func() {
		l.end(errors.New("job deleted"))
		close(done)
	}()
	select {
	case <-done: // end returned with the pacer stopped, while senders are still stuck
	case <-time.After(30 * time.Second):
		t.Fatal("end did not return while a pacing round was under way")
	}
	if n := l.running.Load(); n != 0 {
		t.Errorf("%d pacing goroutines still running after end", n)
	}
	close(release)
	testwait.For(t, "every stream to end", func() bool {
		l.subMu.Lock()
		defer l.subMu.Unlock()
		return len(l.subs) == 0
	})
}
