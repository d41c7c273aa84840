package slicelet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/assign"
)

// h2cServer serves h over cleartext HTTP/2, as tasks serve handoffs.
func h2cServer(t *testing.T, path string, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(path, h)
	ts := httptest.NewUnstartedServer(mux)
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// handoffTask is an offline Slicelet with state handoff on: its exporter
// serves state, its importer records what arrives.
type handoffTask struct {
	*Slicelet
	mu       sync.Mutex
	imported map[string]string
}

func newHandoffTask(t *testing.T, task string, state map[string]string) *handoffTask {
	return newHandoffTaskB(t, task, state)
}

func newHandoffTaskB(t testing.TB, task string, state map[string]string) *handoffTask {
	t.Helper()
	h := &handoffTask{imported: map[string]string{}}
	s, err := New(Config{Job: "j", Task: task, Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"},
		HandoffTimeout: 300 * time.Millisecond,
		ExportState: func(ctx context.Context, start, end assign.SliceKey, emit func(k, v []byte) error) error {
			for k, v := range state {
				if h := assign.HashString(k); start <= h && h < end {
					if err := emit([]byte(k), []byte(v)); err != nil {
						return err
					}
				}
			}
			return nil
		},
		ImportState: func(k, v []byte) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.imported[string(k)] = string(v)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Slicelet = s
	ctx, cancel := context.WithCancel(context.Background())
	s.startHandoff(ctx)
	t.Cleanup(func() { cancel(); s.stopHandoff() })
	return h
}

// beginImport registers an import of the whole key space, as startImports
// does for each range, for a test to run its fetch.
func beginImport(s *Slicelet) (*importRange, context.Context) {
	imp := &importRange{start: 0, end: assign.KeySpaceEnd, done: make(chan struct{})}
	s.handoff.mu.Lock()
	defer s.handoff.mu.Unlock()
	s.setImporting(func(cur []*importRange) []*importRange { return append(cur, imp) })
	s.handoff.wg.Add(1)
	return imp, s.handoff.ctx
}

// fetchFrom runs one fetch of the whole key space from the task at addr
// and returns once it is over, as awaitState sees it.
func (h *handoffTask) fetchFrom(t *testing.T, addr string) {
	t.Helper()
	imp, ctx := beginImport(h.Slicelet)
	go h.fetch(ctx, 7, piece{start: 0, end: assign.KeySpaceEnd, from: assign.Task{Name: "peer", Addr: addr}}, imp)
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.AwaitStateString(actx, "any key"); err != nil {
		t.Fatalf("the fetch never ended: %v", err)
	}
}

// peerFunc is a hostile or broken handoff peer.
type peerFunc func(context.Context, *connect.ServerStream[slicerv1.FetchStateResponse]) error

func (f peerFunc) FetchState(ctx context.Context, _ *connect.Request[slicerv1.FetchStateRequest], out *connect.ServerStream[slicerv1.FetchStateResponse]) error {
	return f(ctx, out)
}

// TestFetchEndsWhenThePeerFails: a peer that dies mid-stream, one that
// never answers and one that sends more than the byte limit each end the
// fetch (error, deadline, limit): what arrived is kept, the range is no
// longer awaited, and the failure is counted.
func TestFetchEndsWhenThePeerFails(t *testing.T) {
	one := &slicerv1.FetchStateResponse{Entries: []*slicerv1.StateEntry{{Key: []byte("a"), Value: []byte("1")}}}
	for name, peer := range map[string]peerFunc{
		"dies mid-stream": func(_ context.Context, out *connect.ServerStream[slicerv1.FetchStateResponse]) error {
			out.Send(one)
			return errors.New("crashed")
		},
		"never answers": func(ctx context.Context, out *connect.ServerStream[slicerv1.FetchStateResponse]) error {
			out.Send(one)
			<-ctx.Done()
			return ctx.Err()
		},
		"sends too much": func(ctx context.Context, out *connect.ServerStream[slicerv1.FetchStateResponse]) error {
			out.Send(one)
			big := &slicerv1.FetchStateResponse{Entries: []*slicerv1.StateEntry{{Key: []byte("b"), Value: make([]byte, 1<<20-10)}}}
			for ctx.Err() == nil {
				if err := out.Send(big); err != nil {
					return err
				}
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHandoffTask(t, "b", nil)
			h.cfg.HandoffMaxBytes = 3 << 20
			path, handler := slicerv1connect.NewHandoffServiceHandler(peer)
			ts := h2cServer(t, path, handler)
			h.fetchFrom(t, strings.TrimPrefix(ts.URL, "http://"))
			fetches, failed, entries := h.HandoffStats()
			if fetches != 1 || failed != 1 || entries == 0 || h.imported["a"] != "1" {
				t.Errorf("fetches %d, failed %d, entries %d, imported %v; want one failed fetch that kept the first entry",
					fetches, failed, entries, h.imported)
			}
		})
	}
}

// A holder that answers "retry" (it has not seen the new generation yet)
// before sending anything is asked again, and the state arrives.
func TestFetchRetriesARefusalThatPasses(t *testing.T) {
	var calls atomic.Int32
	peer := peerFunc(func(_ context.Context, out *connect.ServerStream[slicerv1.FetchStateResponse]) error {
		if calls.Add(1) <= 2 {
			return connect.NewError(connect.CodeUnavailable, errors.New("has not seen generation 7 yet; retry"))
		}
		return out.Send(&slicerv1.FetchStateResponse{Entries: []*slicerv1.StateEntry{{Key: []byte("a"), Value: []byte("1")}}})
	})
	h := newHandoffTask(t, "b", nil)
	h.cfg.HandoffTimeout = 10 * time.Second
	path, handler := slicerv1connect.NewHandoffServiceHandler(peer)
	ts := h2cServer(t, path, handler)
	h.fetchFrom(t, strings.TrimPrefix(ts.URL, "http://"))
	fetches, failed, entries := h.HandoffStats()
	if fetches != 1 || failed != 0 || entries != 1 || h.imported["a"] != "1" || calls.Load() != 3 {
		t.Errorf("fetches %d, failed %d, entries %d, imported %v after %d calls; want one fetch that succeeded on the third call",
			fetches, failed, entries, h.imported, calls.Load())
	}
}

// TestFetchStateServesOnlyTheNewOwner: a task hands over the state of a
// range only to the task its assignment gives that range, only for its own
// job, and waits a little for a generation it has not seen.
func TestFetchStateServesOnlyTheNewOwner(t *testing.T) {
	state := map[string]string{}
	for _, k := range testKeys(200) {
		state[k] = "v-" + k
	}
	a := newHandoffTask(t, "a", state)
	half := assign.KeySpaceEnd / 2
	next := &assign.Assignment{Job: "j", Generation: 5,
		Tasks:  []assign.Task{{Name: "a", Addr: "a:1"}, {Name: "b", Addr: "b:1"}},
		Slices: []assign.Slice{{Start: 0, End: half, Tasks: []string{"b"}}, {Start: half, End: assign.KeySpaceEnd, Tasks: []string{"a"}}}}
	a.install(nil, next)
	path, handler := a.HandoffHandler()
	ts := h2cServer(t, path, handler)
	client := slicerv1connect.NewHandoffServiceClient(api.NewH2CClient(), ts.URL)
	fetch := func(req *slicerv1.FetchStateRequest) (int, error) {
		stream, err := client.FetchState(context.Background(), connect.NewRequest(req))
		if err != nil {
			return 0, err
		}
		defer stream.Close()
		n := 0
		for stream.Receive() {
			n += len(stream.Msg().GetEntries())
		}
		return n, stream.Err()
	}
	want := 0
	for k := range state {
		if assign.HashString(k) < half {
			want++
		}
	}
	if n, err := fetch(&slicerv1.FetchStateRequest{Job: "j", Task: "b", Generation: 5, Start: 0, End: uint64(half)}); err != nil || n != want {
		t.Errorf("the new owner's fetch: %d entries, %v; want %d", n, err, want)
	}
	for name, tc := range map[string]struct {
		req  *slicerv1.FetchStateRequest
		code connect.Code
	}{
		"another task":       {&slicerv1.FetchStateRequest{Job: "j", Task: "c", Generation: 5, Start: 0, End: uint64(half)}, connect.CodePermissionDenied},
		"keys it lacks":      {&slicerv1.FetchStateRequest{Job: "j", Task: "b", Generation: 5, Start: 0, End: uint64(assign.KeySpaceEnd)}, connect.CodePermissionDenied},
		"another job":        {&slicerv1.FetchStateRequest{Job: "k", Task: "b", Generation: 5, Start: 0, End: uint64(half)}, connect.CodeInvalidArgument},
		"empty range":        {&slicerv1.FetchStateRequest{Job: "j", Task: "b", Generation: 5, Start: 9, End: 9}, connect.CodeInvalidArgument},
		"bad task":           {&slicerv1.FetchStateRequest{Job: "j", Task: "b/1", Generation: 5, Start: 0, End: 9}, connect.CodeInvalidArgument},
		"a future assigment": {&slicerv1.FetchStateRequest{Job: "j", Task: "b", Generation: 6, Start: 0, End: uint64(half)}, connect.CodeUnavailable},
	} {
		if _, err := fetch(tc.req); connect.CodeOf(err) != tc.code {
			t.Errorf("%s: err = %v, want %v", name, err, tc.code)
		}
	}
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + string(rune('0'+i%10)) + string(rune('A'+i/26%26))
	}
	return keys
}

// BenchmarkHandoffFetch times one fetch of 10,000 entries of 100-byte
// values over loopback h2c, serving side and importing side both real.
func BenchmarkHandoffFetch(b *testing.B) {
	state := make(map[string]string, 10_000)
	for i := range 10_000 {
		state["key-"+strings.Repeat("k", i%5)+string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('A'+i/260%26))+string(rune('a'+i/6760%26))] = strings.Repeat("v", 100)
	}
	a := newHandoffTaskB(b, "a", state)
	a.install(nil, &assign.Assignment{Job: "j", Generation: 5,
		Tasks:  []assign.Task{{Name: "b", Addr: "b:1"}},
		Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{"b"}}}})
	path, handler := a.HandoffHandler()
	mux := http.NewServeMux()
	mux.Handle(path, handler)
	ts := httptest.NewUnstartedServer(mux)
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	defer ts.Close()
	recv := newHandoffTaskB(b, "b", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		imp, ctx := beginImport(recv.Slicelet)
		recv.fetch(ctx, 5, piece{start: 0, end: assign.KeySpaceEnd, from: assign.Task{Name: "a", Addr: strings.TrimPrefix(ts.URL, "http://")}}, imp)
	}
	b.StopTimer()
	if _, failed, entries := recv.HandoffStats(); failed != 0 || entries != uint64(b.N)*uint64(len(state)) {
		b.Fatalf("%d failed fetches, %d entries for %d fetches of %d", failed, entries, b.N, len(state))
	}
	b.ReportMetric(float64(len(state)), "entries/fetch")
}

// With ImportStates the importer takes each received message's entries in
// one call, and a fetch cut short by the byte bound still hands over the
// entries of the message it stopped in that fit.
func TestFetchImportsWholeMessages(t *testing.T) {
	peer := peerFunc(func(_ context.Context, out *connect.ServerStream[slicerv1.FetchStateResponse]) error {
		out.Send(&slicerv1.FetchStateResponse{Entries: []*slicerv1.StateEntry{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}})
		return out.Send(&slicerv1.FetchStateResponse{Entries: []*slicerv1.StateEntry{{Key: []byte("c"), Value: []byte("3")}, {Key: []byte("d"), Value: make([]byte, 100)}}})
	})
	h := newHandoffTask(t, "b", nil)
	var calls [][]string
	h.cfg.ImportState = nil
	h.cfg.ImportStates = func(entries []StateEntry) {
		var keys []string
		for _, e := range entries {
			keys = append(keys, string(e.Key))
		}
		calls = append(calls, keys)
	}
	h.cfg.HandoffMaxBytes = 50
	path, handler := slicerv1connect.NewHandoffServiceHandler(peer)
	ts := h2cServer(t, path, handler)
	h.fetchFrom(t, strings.TrimPrefix(ts.URL, "http://"))
	if fmt.Sprint(calls) != "[[a b] [c]]" {
		t.Errorf("ImportStates calls %v; want [[a b] [c]]: one per message, and what fit of the one cut short", calls)
	}
	if _, failed, entries := h.HandoffStats(); failed != 1 || entries != 3 {
		t.Errorf("%d failed, %d entries; want 1 and 3", failed, entries)
	}
}

// ImportState and ImportStates are alternatives: a Config with both is
// refused, as one with an importer and no exporter, or a handoff address
// and nothing to export.
func TestConfigTakesOneImporter(t *testing.T) {
	export := func(context.Context, assign.SliceKey, assign.SliceKey, func(k, v []byte) error) error { return nil }
	base := Config{Job: "j", Task: "t", Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"}}
	both := base
	both.ExportState, both.ImportState, both.ImportStates = export, func(k, v []byte) {}, func([]StateEntry) {}
	if _, err := New(both); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "set one") {
		t.Errorf("both importers: %v", err)
	}
	noExport := base
	noExport.ImportStates = func([]StateEntry) {}
	if _, err := New(noExport); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ImportStates without ExportState: %v", err)
	}
	badAddr := base
	badAddr.ExportState, badAddr.ImportState = export, func(k, v []byte) {}
	badAddr.HandoffAddr = "nowhere"
	if _, err := New(badAddr); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "handoff address") {
		t.Errorf("handoff address without a port: %v", err)
	}
	nothingToServe := base
	nothingToServe.HandoffAddr = "127.0.0.1:9001"
	if _, err := New(nothingToServe); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "no ExportState") {
		t.Errorf("handoff address without ExportState: %v", err)
	}
}

// TestFirstViewFetchesFromItsSlicesOtherTasks: a task whose first view
// already gives it keys (it joined before its watch delivered an
// assignment without it) fetches their state from the tasks the same
// view keeps on them, as a make-before-break move does, instead of
// starting them cold and reporting ready at once.
func TestFirstViewFetchesFromItsSlicesOtherTasks(t *testing.T) {
	state := map[string]string{}
	for _, k := range testKeys(200) {
		state[k] = "v-" + k
	}
	a := newHandoffTask(t, "a", state)
	path, handler := a.HandoffHandler()
	ts := h2cServer(t, path, handler)
	half := assign.KeySpaceEnd / 2
	// The move's first step: b joins a on the lower half.
	mid := &assign.Assignment{Job: "j", Generation: 5,
		Tasks: []assign.Task{{Name: "a", Addr: strings.TrimPrefix(ts.URL, "http://")}, {Name: "b", Addr: "127.0.0.1:1"}},
		Slices: []assign.Slice{{Start: 0, End: half, Tasks: []string{"a", "b"}},
			{Start: half, End: assign.KeySpaceEnd, Tasks: []string{"a"}}}}
	a.install(nil, mid)
	b := newHandoffTask(t, "b", nil)
	b.cfg.HandoffTimeout = 10 * time.Second
	b.install(nil, mid)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := map[string]string{}
	for k, v := range state {
		if assign.HashString(k) < half {
			want[k] = v
			if err := b.AwaitStateString(ctx, k); err != nil {
				t.Fatalf("await %s: %v", k, err)
			}
		}
	}
	fetches, failed, entries := b.HandoffStats()
	b.mu.Lock()
	defer b.mu.Unlock()
	if fetches != 1 || failed != 0 || !maps.Equal(b.imported, want) {
		t.Errorf("fetches %d, failed %d, %d entries, %d of %d keys imported; want one fetch of the lower half's state",
			fetches, failed, entries, len(b.imported), len(want))
	}
}
