package assigner

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/internal/metrics/metricstest"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// The buckets of tasks that stopped reporting are dropped once full, so
// the limiter's memory follows the tasks that report.
func TestReportLimiterForgetsIdleTasks(t *testing.T) {
	r := newReportLimiter(10, 20)
	t0 := time.Unix(1_000_000, 0)
	for i := range 1024 {
		if ok, _ := r.allow("kv", fmt.Sprintf("t%d", i), t0); !ok {
			t.Fatalf("first report of task %d refused", i)
		}
	}
	// t1 is still reporting when the sweep runs; the others have refilled.
	for range 20 {
		r.allow("kv", "t1", t0.Add(2*time.Second))
	}
	if ok, _ := r.allow("kv", "new", t0.Add(2*time.Second)); !ok {
		t.Fatal("a new task's first report refused")
	}
	if got := len(r.tasks); got != 2 {
		t.Errorf("%d buckets after the sweep; want 2 (the busy task and the new one)", got)
	}
	if ok, wait := r.allow("kv", "t1", t0.Add(2*time.Second)); ok || wait <= 0 {
		t.Errorf("the busy task's 21st report in a row: allowed %v, wait %v; want refused with a wait", ok, wait)
	}
}

// A refresh that read the stored record before the job was deleted must not
// bring it back when it goes on after the deletion.
func TestDeletedJobNotRecreatedByStaleRefresh(t *testing.T) {
	ctx := context.Background()
	bolt := testStore(t)
	store := &orderedStore{Store: bolt}
	if err := bolt.Commit(ctx, "kv", 0, storagetest.Assignment("kv", 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	a := soloAssigner(t, store)
	j, err := a.job(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	streamed := make(chan error, 1)
	go func() {
		streamed <- j.pub.Stream(ctx, nil, watch.Subscription{Known: j.pub.Current().Version()}, func(*watch.Message) error { return nil })
	}()
	store.afterLoad = func() {
		if _, err := a.DeleteJob(ctx, connect.NewRequest(&slicerv1.DeleteJobRequest{Job: "kv"})); err != nil {
			t.Errorf("DeleteJob: %v", err)
		}
	}
	if err := a.refresh(ctx, "kv"); err != nil {
		t.Fatal(err)
	}
	if err := <-streamed; connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a stream of the deleted job ended with %v, want NOT_FOUND", err)
	}
	if _, ok := a.known("kv"); ok {
		t.Fatal("a refresh that read the job before its deletion brought it back")
	}
	if _, err := a.job(ctx, "kv"); !errors.Is(err, rpc.ErrUnknownJob) {
		t.Errorf("the deleted job: %v, want rpc.ErrUnknownJob", err)
	}
	if _, err := bolt.Load(ctx, "kv"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the store still holds the deleted job: %v", err)
	}
}

func TestStoreCommitMetrics(t *testing.T) {
	m := newStoreMetrics()
	m.commitDone(time.Millisecond, nil)
	m.commitDone(time.Millisecond, fmt.Errorf("commit: %w", storage.ErrConflict))
	m.commitDone(time.Millisecond, fmt.Errorf("commit: %w", storage.ErrFenced))
	m.commitDone(time.Millisecond, fmt.Errorf("commit: %w", storage.ErrFenced))
	m.commitDone(time.Millisecond, errors.New("etcd: no leader"))
	m.commitDone(time.Millisecond, context.Canceled)
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"conflicts by generation", m.generation, 1},
		{"conflicts by lease", m.lease, 2},
		{"errors", m.errors, 1},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 1 {
		t.Fatalf("duration histogram has %d series, want 1", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.duration)
	if v, _ := metricstest.Value(t, reg, "slicerd_store_commit_duration_seconds"); v != 6 {
		t.Errorf("commit durations observed = %v, want 6", v)
	}
}
