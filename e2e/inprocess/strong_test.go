package inprocess

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/lease/leasecheck"
	"github.com/slicerd/slicerd/slicelet"
)

// serve drives requests on keys at a task until ctx ends, recording every
// satisfied one: the span starts before the handle is taken and ends after
// the handle confirmed the key stayed the task's throughout.
func serve(ctx context.Context, rec *leasecheck.Recorder, task *clustertest.Task, keys []string, served *sync.Map) {
	pace := time.NewTicker(time.Millisecond) // a request rate, not a wait: the agents share these cores
	defer pace.Stop()
	for ctx.Err() == nil {
		<-pace.C
		for _, k := range keys {
			start := rec.Now()
			h := task.HandleString(k)
			if !h.Owned() {
				continue
			}
			ok := h.IsAssignedContinuously()
			end := rec.Now()
			token := h.Token()
			h.Release()
			if ok {
				rec.Add(leasecheck.Op{Task: task.Name, Key: k, Token: token, Start: start, End: end})
				served.Store(task.Name, true)
			}
		}
	}
}

// A strong job's tasks use keys only under its guard and bridge leases:
// while tasks leave and join, and the guard moves with every generation,
// the history of requests has no instant at which two tasks owned a key
// and no fencing token going backwards, and the tasks keep serving.
func TestStrongJobOneOwnerPerKey(t *testing.T) {
	order := &readOrder{bridged: map[string]uint64{}}
	c := clustertest.New(t, clustertest.Options{ConfigureTask: func(cfg *slicelet.Config) {
		cfg.Consistency = assign.Strong
		cfg.LeaseTTL = 500 * time.Millisecond
	}, WrapLeases: func(m lease.Manager) lease.Manager {
		order.once.Do(func() { order.Manager = m })
		return order
	}})
	strong := assign.Config{MinRedundancy: 1, MaxRedundancy: 1, Consistency: assign.Strong}
	if err := c.Store().SetConfig(context.Background(), "kv", strong); err != nil {
		t.Fatal(err)
	}
	c.StartAgent("a1")
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	rec := leasecheck.NewRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var served sync.Map
	start := func(name string) *clustertest.Task {
		task := c.StartTask("kv", name)
		wg.Go(func() { serve(ctx, rec, task, keys, &served) })
		return task
	}
	tasks := []*clustertest.Task{start("t0"), start("t1"), start("t2")}
	servedBy := func(names ...string) func() bool {
		return func() bool {
			for _, n := range names {
				if _, ok := served.Load(gossip.TaskMemberName("kv", n)); !ok {
					return false
				}
			}
			return true
		}
	}
	testwait.For(t, "every task to serve keys under the guard", servedBy("t0", "t1", "t2"))
	gen := c.Record("kv").Generation()

	// A task leaves: its keys move, and the guard follows.
	tasks[1].Stop()
	c.WaitGeneration("kv", gen+1)
	served.Delete(gossip.TaskMemberName("kv", "t0"))
	served.Delete(gossip.TaskMemberName("kv", "t2"))
	testwait.For(t, "the survivors to serve under the next guard", servedBy("t0", "t2"))
	// A task joins and takes a share.
	start("t3")
	testwait.For(t, "the new task to serve keys", servedBy("t3"))
	cancel()
	wg.Wait()

	r := leasecheck.Check(rec.Ops())
	t.Logf("%v over %d generations", r, c.Record("kv").Generation())
	if !r.OK() {
		for _, v := range r.Examples {
			t.Error(v)
		}
	}
	if r.Ops == 0 {
		t.Fatal("no request was satisfied")
	}
	order.mu.Lock()
	defer order.mu.Unlock()
	for _, b := range order.bad {
		t.Error(b)
	}
}

// readOrder is the shared lease manager as the agents use it, checking
// that no task reads the guard at a generation a bridge it read leads away
// from: a task that took the bridge f→t has released guard f so that it
// can be recalled, and reading it again holds the recall up.
type readOrder struct {
	lease.Manager
	once    sync.Once
	mu      sync.Mutex
	bridged map[string]uint64 // reader → the newest bridge's to-generation it read
	bad     []string
}

func (r *readOrder) Read(ctx context.Context, job string, kind lease.Kind, reader, instance string, v lease.Value, ttl time.Duration) (lease.Read, error) {
	rd, err := r.Manager.Read(ctx, job, kind, reader, instance, v, ttl)
	if err != nil {
		return rd, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch kind {
	case lease.Bridge:
		r.bridged[reader] = max(r.bridged[reader], v.To)
	case lease.Guard:
		if to := r.bridged[reader]; v.From < to && len(r.bad) < 10 {
			r.bad = append(r.bad, fmt.Sprintf("%s read the guard at %v after the bridge to generation %d", reader, v, to))
		}
	}
	return rd, nil
}
