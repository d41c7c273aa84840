package inprocess

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/roles"
	"github.com/slicerd/slicerd/storage"
)

func jobClient(a *clustertest.Agent) slicerv1connect.JobServiceClient {
	return slicerv1connect.NewJobServiceClient(api.NewH2CClient(), api.RPCURL(a.Addr()))
}

func getJob(t *testing.T, a *clustertest.Agent, job string) *slicerv1.JobInfo {
	t.Helper()
	resp, err := jobClient(a).GetJob(context.Background(), connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
	if err != nil {
		t.Fatalf("GetJob(%s) from %s: %v", job, a.Name, err)
	}
	return resp.Msg.GetJob()
}

func loadHistory(t *testing.T, a *clustertest.Agent, job string) []*slicerv1.LoadSample {
	t.Helper()
	resp, err := jobClient(a).GetLoadHistory(context.Background(), connect.NewRequest(&slicerv1.GetLoadHistoryRequest{Job: job}))
	if err != nil {
		t.Fatalf("GetLoadHistory(%s) from %s: %v", job, a.Name, err)
	}
	return resp.Msg.GetSamples()
}

// feedLoad has every task report load on the keys it owns until the test
// ends: five units per key on t0, one on the others, so t0 is the
// hottest. It returns the imbalance that load gives the assignment the
// tasks serve now: the most loaded task's load over the mean.
func feedLoad(t *testing.T, tasks []*clustertest.Task) float64 {
	const keys = 64
	cost := func(i int) float64 {
		if i == 0 {
			return 5
		}
		return 1
	}
	sums := make([]float64, len(tasks))
	var total float64
	for k := range keys {
		for i, task := range tasks {
			if task.OwnsString(fmt.Sprint("key-", k)) {
				sums[i] += cost(i)
				total += cost(i)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i, task := range tasks {
				for k := range keys {
					if key := fmt.Sprint("key-", k); task.OwnsString(key) {
						_ = task.ReportLoadString(key, cost(i))
					}
				}
			}
		}
	})
	return slices.Max(sums) / (total / float64(len(tasks)))
}

// Tasks report load to every Assigner (ReportLoadRequest.every_assigner),
// so the Assigner that does not hold the job's lease answers GetJob with
// the same load and imbalance as the one that does, records the same
// load history, and, once it takes the job over, keeps the history from
// before the move and records the takeover's imbalance under the load as
// it was.
func TestEveryAssignerHasTheJobsLoad(t *testing.T) {
	c := clustertest.New(t, clustertest.Options{Latency: 5 * time.Millisecond, Configure: func(cfg *roles.Config) {
		cfg.LoadHistoryInterval = 50 * time.Millisecond
		cfg.RebalanceInterval = time.Hour // no load-driven move while the views are compared
	}})
	east := c.StartAgent("east")
	west := c.StartAgent("west")
	tasks, _ := startTasksNear(c, "east", 3)
	c.WaitPreferred("kv", "east")
	testwait.For(t, "every task to serve the assignment of its three tasks", func() bool {
		for _, task := range tasks {
			if a := task.Assignment(); a == nil || len(a.Tasks) != 3 {
				return false
			}
		}
		return true
	})
	want := feedLoad(t, tasks)

	near := func(got float64) bool { return math.Abs(got-want) < 0.15*want }
	var seen [2]float64
	testwait.For(t, fmt.Sprintf("east and west to show all three tasks' load, at imbalance %.3f", want), func() bool {
		e, w := getJob(t, east, "kv"), getJob(t, west, "kv")
		seen = [2]float64{e.GetImbalance(), w.GetImbalance()}
		return e.GetReportingTasks() == 3 && w.GetReportingTasks() == 3 && near(e.GetImbalance()) && near(w.GetImbalance())
	})
	testwait.For(t, "east and west to record load history", func() bool {
		return len(loadHistory(t, east, "kv")) >= 12 && len(loadHistory(t, west, "kv")) >= 12
	})

	// The Assigner generating the job is killed and the other takes it
	// over. That is east, near the tasks, unless the Assigners' view of
	// which one is nearer moved since (it may, on a busy machine, where
	// round trips measure the scheduler more than the network): the
	// takeover looked for is the survivor's after the generation stored
	// before the kill.
	from := c.Record("kv").Current.Generation
	var leaders []string
	testwait.For(t, "one assigner to generate kv", func() bool {
		leaders = c.Leaders("kv")
		return len(leaders) == 1
	})
	holder, survivor := east, west
	if leaders[0] == west.Name {
		holder, survivor = west, east
	}
	killed := time.Now()
	holder.Kill()
	c.WaitPreferred("kv", survivor.Name)
	var takeover *slicerv1.Decision
	testwait.For(t, fmt.Sprintf("%s's takeover decision after generation %d", survivor.Name, from), func() bool {
		resp, err := jobClient(survivor).GetJobHistory(context.Background(), connect.NewRequest(&slicerv1.GetJobHistoryRequest{Job: "kv", Limit: 10}))
		if err != nil {
			return false
		}
		for _, d := range resp.Msg.GetDecisions() {
			if d.GetCause() == storage.CauseTakeover && d.GetAssigner() == survivor.Name && d.GetGeneration() > from {
				takeover = d
				return true
			}
		}
		return false
	})
	if b := takeover.GetImbalanceBefore(); !near(b) {
		t.Errorf("%s's takeover recorded imbalance %.3f -> %.3f (%s); the tasks' load gives %.3f",
			survivor.Name, b, takeover.GetImbalanceAfter(), takeover.GetDetail(), want)
	}
	h := loadHistory(t, survivor, "kv")
	before := 0
	for _, sample := range h {
		if time.Unix(0, sample.GetTimeUnixNano()).Before(killed) {
			before++
		}
	}
	if before < 10 {
		t.Errorf("after taking kv over %s's load history holds %d samples, %d of them from before %s was killed; want at least 10 from before",
			survivor.Name, len(h), before, holder.Name)
	}
	t.Logf("imbalance of the load fed %.3f; east and west showed %.3f and %.3f before %s was killed; %s's takeover recorded %.3f -> %.3f; its history holds %d samples, %d from before the kill",
		want, seen[0], seen[1], holder.Name, survivor.Name, takeover.GetImbalanceBefore(), takeover.GetImbalanceAfter(), len(h), before)
}
