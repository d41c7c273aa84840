package assigner

import (
	"context"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// GetJob's load figures come from a view computed at most once per
// viewMaxAge however many ask, and at once for a new generation: a
// report within the age is shown when the view is next computed, and
// callers that ask together while it is computed share one computation.
func TestJobLoadViewIsSharedForItsAge(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	views := &f.as.views
	clock := time.Unix(5000, 0)
	var clockMu sync.Mutex
	views.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	total := func() float64 {
		t.Helper()
		resp, err := f.as.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetJob().GetTotalLoad()
	}
	even := func(per float64) assign.Load {
		return assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 3 * per}}
	}

	f.report(t, even(100), "t0", "t1", "t2")
	if got := total(); got != 300 {
		t.Fatalf("total load %g after every task reported 100, want 300", got)
	}
	n := views.computed.Load()
	f.report(t, even(200), "t0", "t1", "t2")
	advance(viewMaxAge / 2)
	if got := total(); got != 300 || views.computed.Load() != n {
		t.Fatalf("within the view's age: total %g, %d views computed; want the held view (300) and none computed",
			got, views.computed.Load()-n)
	}
	advance(viewMaxAge / 2)
	if got := total(); got != 600 {
		t.Fatalf("once the view is %v old: total %g, want the new reports' 600", viewMaxAge, got)
	}

	// Callers asking at once, once the view has aged, compute one.
	advance(viewMaxAge)
	n = views.computed.Load()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := f.as.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"})); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := views.computed.Load() - n; got != 1 {
		t.Errorf("8 callers at once computed %d views, want 1", got)
	}

	// A new generation is described at once, whatever the view's age.
	f.report(t, even(50), "t0", "t1", "t2")
	if err := f.as.reconcile(ctx, "kv", triggerTakeover); err != nil {
		t.Fatal(err)
	}
	resp, err := f.as.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: "kv"}))
	if err != nil {
		t.Fatal(err)
	}
	if info := resp.Msg.GetJob(); info.GetGeneration() != f.j.pub.Current().Generation || info.GetTotalLoad() != 150 {
		t.Errorf("after generation %d: GetJob shows generation %d, total %g; want the new generation and its load 150",
			f.j.pub.Current().Generation, info.GetGeneration(), info.GetTotalLoad())
	}
}
