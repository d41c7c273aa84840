package slicelet

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
)

// storeTask is an offline Slicelet with state handoff on whose state is
// one map, as a cache's: it exports what the map holds (after gate, if
// set, is closed: a large state that takes a while to send), and imports
// into it, keeping an entry it already holds. opts adjust its Config.
type storeTask struct {
	*Slicelet
	mu    sync.Mutex
	state map[string]string
}

func newStoreTask(t *testing.T, task string, state map[string]string, gate <-chan struct{}, opts ...func(*Config)) *storeTask {
	t.Helper()
	st := &storeTask{state: maps.Clone(state)}
	if st.state == nil {
		st.state = map[string]string{}
	}
	cfg := Config{Job: "j", Task: task, Addr: "127.0.0.1:9000", Join: []string{"127.0.0.1:7946"},
		HandoffTimeout: 10 * time.Second,
		ExportState: func(ctx context.Context, start, end assign.SliceKey, emit func(k, v []byte) error) error {
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			st.mu.Lock()
			snap := maps.Clone(st.state)
			st.mu.Unlock()
			for k, v := range snap {
				if h := assign.HashString(k); start <= h && h < end {
					if err := emit([]byte(k), []byte(v)); err != nil {
						return err
					}
				}
			}
			return nil
		},
		ImportState: func(k, v []byte) {
			st.mu.Lock()
			defer st.mu.Unlock()
			if _, ok := st.state[string(k)]; !ok {
				st.state[string(k)] = string(v)
			}
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.Slicelet = s
	ctx, cancel := context.WithCancel(context.Background())
	s.startHandoff(ctx)
	t.Cleanup(func() { cancel(); s.stopHandoff() })
	return st
}

func (st *storeTask) snapshot() map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return maps.Clone(st.state)
}

// allOn is an assignment of generation gen giving the whole key space to
// owner, with tasks at addrs.
func allOn(gen uint64, owner string, addrs map[string]string) *assign.Assignment {
	a := &assign.Assignment{Job: "j", Generation: gen,
		Slices: []assign.Slice{{Start: 0, End: assign.KeySpaceEnd, Tasks: []string{owner}}}}
	for _, name := range []string{"a", "b", "c"} {
		if addr, ok := addrs[name]; ok {
			a.Tasks = append(a.Tasks, assign.Task{Name: name, Addr: addr})
		}
	}
	return a
}

// Keys that move a → b (generation 6) and, while b's fetch from a is
// still on its way, b → c (generation 7) reach c with their state: c
// fetches the range from b, its holder under generation 6, and b answers
// once its own import of the range from an earlier generation has
// arrived, not at once with what it holds (nothing yet), which would let
// the keys start cold at c, a request there having waited (AwaitState)
// only for that empty fetch.
func TestChainedMoveFetchesFromATaskStillImporting(t *testing.T) {
	state := map[string]string{}
	for _, k := range testKeys(200) {
		state[k] = "v-" + k
	}
	gate := make(chan struct{})
	a := newStoreTask(t, "a", state, gate) // a's export takes a while
	b := newStoreTask(t, "b", nil, nil)
	c := newStoreTask(t, "c", nil, nil)
	addrs := map[string]string{}
	for name, st := range map[string]*storeTask{"a": a, "b": b, "c": c} {
		path, handler := st.HandoffHandler()
		addrs[name] = strings.TrimPrefix(h2cServer(t, path, handler).URL, "http://")
	}
	g5, g6, g7 := allOn(5, "a", addrs), allOn(6, "b", addrs), allOn(7, "c", addrs)
	for _, st := range []*storeTask{a, b, c} {
		st.install(nil, g5)
	}
	a.install(g5, g6)
	b.install(g5, g6) // b starts fetching from a; a's export is slow
	waitServing(t, a.Slicelet)
	a.install(g6, g7)
	b.install(g6, g7) // the keys move on to c before b's fetch ended
	c.install(g5, g6)
	c.install(g6, g7) // c fetches from b, the holder under generation 6

	// a's export completes a little later; b's import then arrives.
	go func() {
		time.Sleep(300 * time.Millisecond)
		close(gate)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := testKeys(1)[0]
	began := time.Now()
	if err := c.AwaitStateString(ctx, key); err != nil {
		t.Fatalf("await at c: %v", err)
	}
	waited := time.Since(began)
	got := c.snapshot()
	fetches, failed, entries := c.HandoffStats()
	t.Logf("c: waited %v for %s; %d fetches, %d failed, %d entries; holds %d of %d keys",
		waited, key, fetches, failed, entries, len(got), len(state))
	if _, ok := got[key]; !ok || len(got) != len(state) {
		// Let b's fetch finish, to show where the state went.
		deadline := time.Now().Add(5 * time.Second)
		for len(b.snapshot()) < len(state) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("c holds %d of %d keys once its fetch ended (failed fetches: %d), and a request for %q at c was let through after %v without its state; "+
			"b, which c fetched from, received all %d keys only after it had answered c",
			len(got), len(state), failed, key, waited, len(b.snapshot()))
	}
}

// A task drained (slicerd task drain, which returns once the assignment
// gives the task no key) and then stopped, whose SIGTERM handler calls
// Drain, stays up while a fetch of its state is being served, as the docs
// promise ("until the tasks that took its keys have fetched the state of
// every range they took from it, or no fetch has reached it for a
// second"), although its view was empty already when Drain began:
// returning at once, the process would exit and cut the fetch short.
func TestDrainOfAnEmptiedTaskWaitsForFetches(t *testing.T) {
	state := map[string]string{}
	for _, k := range testKeys(200) {
		state[k] = "v-" + k
	}
	gate := make(chan struct{})
	a := newStoreTask(t, "a", state, gate)
	b := newStoreTask(t, "b", nil, nil)
	addrs := map[string]string{}
	for name, st := range map[string]*storeTask{"a": a, "b": b} {
		path, handler := st.HandoffHandler()
		addrs[name] = strings.TrimPrefix(h2cServer(t, path, handler).URL, "http://")
	}
	// A real gossip member for a, for Drain to advertise the drain on.
	cfg := gossip.TestConfig("a")
	cfg.Self = gossip.Peer{Roles: []gossip.Role{gossip.RoleTask}, Job: "j", Task: "a"}
	n, err := gossip.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	a.node.Store(n)

	g5, g6 := allOn(5, "a", addrs), allOn(6, "b", addrs)
	a.install(nil, g5)
	b.install(nil, g5)
	// slicerd task drain: generation 6 takes every key off a.
	a.install(g5, g6)
	b.install(g5, g6) // b fetches a's state; a's export takes a while
	waitServing(t, a.Slicelet)
	// Then the task is stopped: its SIGTERM handler drains.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	began := time.Now()
	go func() { drained <- a.Drain(ctx) }()
	select {
	case err := <-drained:
		a.handoff.mu.Lock()
		serving := a.handoff.serving
		a.handoff.mu.Unlock()
		t.Errorf("Drain returned (%v) after %v while %d fetch(es) of the task's state were being served; "+
			"b holds %d of %d keys: the process would now exit and cut the fetch short",
			err, time.Since(began), serving, len(b.snapshot()), len(state))
		close(gate)
		return
	case <-time.After(time.Second):
		// Waiting for the fetch, as the docs say.
	}
	close(gate)
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Error("Drain did not return after the fetch ended")
	}
	if got := b.snapshot(); len(got) != len(state) {
		t.Errorf("b holds %d of %d keys after the drain", len(got), len(state))
	}
}

// waitServing waits until s serves a fetch.
func waitServing(t *testing.T, s *Slicelet) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.handoff.mu.Lock()
		serving := s.handoff.serving
		s.handoff.mu.Unlock()
		if serving > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no fetch reached the task")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
