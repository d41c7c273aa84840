package inprocess

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/clustertest"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease"
)

// placeNear puts the named members 0.5 ms apart (one way); every other
// link keeps the cluster's default latency.
func placeNear(c *clustertest.Cluster, members ...string) {
	for i, a := range members {
		for _, b := range members[i+1:] {
			c.SetLatency(a, b, 500*time.Microsecond)
		}
	}
}

// startTasksNear starts n tasks of job kv placed near the member named
// near, and returns them with their gossip names.
func startTasksNear(c *clustertest.Cluster, near string, n int) ([]*clustertest.Task, []string) {
	names := taskNames("kv", n)
	placeNear(c, append([]string{near}, names...)...)
	var tasks []*clustertest.Task
	for i := range names {
		tasks = append(tasks, c.StartTask("kv", fmt.Sprintf("t%d", i)))
	}
	return tasks, names
}

// eastPreferred starts Assigners east and west and n tasks of kv near
// east, waits until east is preferred, and starts a Clerk of kv.
func eastPreferred(c *clustertest.Cluster, n int) (east *clustertest.Agent, cl *clerk.Clerk) {
	east = c.StartAgent("east")
	c.StartAgent("west")
	startTasksNear(c, "east", n)
	c.WaitPreferred("kv", "east")
	return east, c.StartClerk("kv")
}

func taskNames(job string, n int) []string {
	var names []string
	for i := range n {
		names = append(names, gossip.TaskMemberName(job, fmt.Sprintf("t%d", i)))
	}
	return names
}

// pull makes an agent's Distributor pull job, as a subscriber would.
func pull(t *testing.T, a *clustertest.Agent, job string) {
	t.Helper()
	client := slicerv1connect.NewDistributorServiceClient(api.NewH2CClient(), api.RPCURL(a.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	defer cancel()
	if _, err := client.GetAssignment(ctx, connect.NewRequest(&slicerv1.GetAssignmentRequest{Job: job})); err != nil {
		t.Fatalf("GetAssignment(%s) from %s: %v", job, a.Name, err)
	}
}

func reporting(t *testing.T, a *clustertest.Agent, job string) uint32 {
	t.Helper()
	return getJob(t, a, job).GetReportingTasks()
}

// The Assigner near a job's tasks becomes its preferred Assigner and is
// the one generating it; both Distributors pull from it and the Slicelets
// report load to it. When the latencies swap, so does the preference, and
// the pulls follow.
func TestNearAssignerIsPreferred(t *testing.T) {
	c := clustertest.New(t, clustertest.Options{Latency: 10 * time.Millisecond})
	east := c.StartAgent("east")
	west := c.StartAgent("west")
	slicelets, tasks := startTasksNear(c, "east", 3)

	c.WaitPreferred("kv", "east")
	pull(t, east, "kv")
	pull(t, west, "kv")
	testwait.For(t, "both distributors to pull kv from east", func() bool {
		return east.PullsFrom("kv") == "east" && west.PullsFrom("kv") == "east"
	})
	for _, cm := range c.Commits("kv") {
		if cm.Agent != "east" && cm.Generation > 1 {
			t.Logf("west committed generation %d before the coordinates settled", cm.Generation)
		}
	}

	// The Slicelets come to report to east directly (each learns the
	// coordinates on its own): eventually west forwards nothing while every
	// task sends two reports.
	testwait.For(t, "east to hold load reports from all three tasks", func() bool { return reporting(t, east, "kv") == 3 })
	forwarded := west.ForwardedWrites()
	sent := make([]uint64, len(slicelets))
	testwait.For(t, "two load reports from every task with none of them through west", func() bool {
		for i, s := range slicelets {
			if s.LoadReportsSent() < sent[i]+2 {
				return false
			}
		}
		clean := west.ForwardedWrites() == forwarded
		forwarded = west.ForwardedWrites()
		for i, s := range slicelets {
			sent[i] = s.LoadReportsSent()
		}
		return clean
	})

	// Move the tasks next to west.
	for _, task := range tasks {
		c.SetLatency("east", task, 10*time.Millisecond)
	}
	placeNear(c, append([]string{"west"}, tasks...)...)
	c.WaitPreferred("kv", "west")
	testwait.For(t, "both distributors to pull kv from west", func() bool {
		return east.PullsFrom("kv") == "west" && west.PullsFrom("kv") == "west"
	})
	c.CheckHistory("kv")
}

// Killing the preferred Assigner hands its job to the other, which
// publishes a takeover generation that a Clerk receives. The time from the
// kill to the new generation is logged, with the test's fast gossip timers
// and with slicerd's default ones.
func TestKillPreferredFailsOver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defaults bool
	}{{"test timers", false}, {"default timers", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := clustertest.New(t, clustertest.Options{Latency: 5 * time.Millisecond, DefaultTimers: tc.defaults})
			east, cl := eastPreferred(c, 3)
			before := c.Record("kv").Generation()
			testwait.For(t, "the clerk to see the current generation", func() bool { return cl.Generation() >= before })

			killed := time.Now()
			east.Kill()
			took := time.Since(killed)
			// The first commit after the kill, not generation before+1:
			// on a loaded machine east may still commit between the
			// read of before and the kill.
			var first clustertest.Commit
			testwait.For(t, "a generation committed after the kill", func() bool {
				for _, cm := range c.Commits("kv") {
					if cm.At.After(killed) {
						first = cm
						return true
					}
				}
				return false
			})
			stored := time.Since(killed)
			testwait.For(t, "the clerk to see the takeover generation", func() bool { return cl.Generation() >= first.Generation })
			seen := time.Since(killed)
			if first.Agent != "west" {
				t.Errorf("generation %d after the kill was committed by %q, want west", first.Generation, first.Agent)
			}
			c.WaitPreferred("kv", "west")
			t.Logf("kill -> first new generation (%d, by %s) committed after %v, stored-read after %v, at the clerk after %v (stopping the killed agent took %v)",
				first.Generation, first.Agent, first.At.Sub(killed), stored, seen, took)
			c.CheckHistory("kv")
		})
	}
}

// Two Assigners cut off from each other in gossip both believe they are
// preferred, but only the one holding the job's lease commits: the store's
// history shows every commit of the partition under one epoch of one
// holder. After healing they agree on one preferred Assigner again and the
// job converges on all four tasks.
func TestPartitionedAssignersConverge(t *testing.T) {
	opts := storeOptions(t)
	opts.Latency = 10 * time.Millisecond
	c := clustertest.New(t, opts)
	c.StartAgent("a1")
	c.StartAgent("a2")
	// a1 is clearly the nearest, so that every node's estimates agree
	// once the partition heals.
	startTasksNear(c, "a1", 4)
	first := c.WaitConverged("kv")
	t.Logf("before the partition %s generates kv", first)
	start := len(c.Commits("kv"))

	// Each Assigner keeps two tasks on its side.
	c.Partition([]string{"a1", gossip.TaskMemberName("kv", "t0"), gossip.TaskMemberName("kv", "t1")}, []string{"a2", gossip.TaskMemberName("kv", "t2"), gossip.TaskMemberName("kv", "t3")})
	// Settled: each Assigner has declared the other failed, so neither can
	// prefer the other again, and both prefer themselves. Preferring
	// itself alone is not enough: on a loaded machine an Assigner still
	// holds the other alive (suspected) for a while, and its preference
	// can flip back and hand the lease over.
	testwait.For(t, "both assigners to have failed each other, to prefer themselves, and the job to be committed during the partition", func() bool {
		return failed(c.Agent("a1"), "a2") && failed(c.Agent("a2"), "a1") &&
			c.Agent("a1").PreferredAssigner("kv") == "a1" && c.Agent("a2").PreferredAssigner("kv") == "a2" &&
			len(c.Commits("kv")) > start
	})
	// While gossip is still finding out about the partition, each
	// Assigner may for a moment see the other as preferred and hand it
	// the lease; such hand-overs are fenced by the epoch (CheckEpochs).
	// Once each has failed the other, neither releases the lease, so one
	// holder under one epoch makes every later commit.
	settled := time.Now()
	// An observation window, not a wait for a condition: the Assigner
	// without the lease keeps trying to take it, and must never commit.
	time.Sleep(10 * c.Agent("a1").Config().JobLeaseTTL)
	var holder *clustertest.Commit
	for _, cm := range c.Commits("kv")[start:] {
		t.Logf("during the partition: generation %d by %s under epoch %d on %d, tasks %v", cm.Generation, cm.Agent, cm.Epoch, cm.PrevGen, cm.Tasks)
		switch {
		case holder == nil && cm.At.After(settled):
			holder = &cm
		case holder != nil && (cm.Agent != holder.Agent || cm.Epoch != holder.Epoch):
			t.Errorf("generation %d was committed by %s under epoch %d, but %s committed under epoch %d after both assigners preferred themselves",
				cm.Generation, cm.Agent, cm.Epoch, holder.Agent, holder.Epoch)
		}
	}
	c.CheckEpochs("kv")
	if leaders := c.Leaders("kv"); len(leaders) != 1 {
		t.Errorf("assigners generating kv during the partition: %v, want one", leaders)
	}

	c.Heal()
	c.WaitPreferred("kv", "a1")
	winner := c.WaitConverged("kv")
	want := []string{"t0", "t1", "t2", "t3"}
	testwait.For(t, "the converged assignment to name all four tasks", func() bool {
		cur := c.Record("kv").Current
		var names []string
		for _, task := range cur.Tasks {
			names = append(names, task.Name)
		}
		return slices.Equal(names, want)
	})
	t.Logf("after healing %s generates kv, at generation %d", winner, c.Record("kv").Generation())
	c.CheckHistory("kv")
	c.CheckEpochs("kv")
}

// With one Assigner nearer the job's tasks (5 ms one way against 30 ms, a gap that CPU starvation on a busy machine does not close)
// and every packet's delay jittering by ±30%, the preference settles and
// then never moves and nothing is committed, over 20 probe intervals in
// which every node refreshes its coordinates many times. (The hysteresis
// between Assigners within the margin of each other is tested on the
// preference function itself, TestChooseNoFlapping in lease: on a
// five-member loopback cluster under the race detector, Vivaldi estimates
// of two almost equally near Assigners wander by more than the margin.)
func TestNoFlappingUnderJitter(t *testing.T) {
	c := clustertest.New(t, clustertest.Options{Latency: 30 * time.Millisecond})
	c.StartAgent("a1")
	c.StartAgent("a2")
	// The nearer one is the one the rendezvous hash picks while distances
	// are unknown, so the test starts where it should settle.
	nearer := lease.DefaultPreference().Choose("kv", []string{"a1", "a2"}, nil, nil, "")
	tasks := taskNames("kv", 3)
	placeNear(c, tasks...)
	for _, task := range tasks {
		c.SetLatency(nearer, task, 5*time.Millisecond)
	}
	for i := range tasks {
		c.StartTask("kv", fmt.Sprintf("t%d", i))
	}
	c.WaitCoordinates()
	c.SetJitter(0.3)
	chosen := c.WaitStable("kv", time.Second)
	if chosen != nearer {
		t.Errorf("settled on %s; %s is nearer", chosen, nearer)
	}
	commits := len(c.Commits("kv"))

	// 200 observations 20 ms apart: 4 s, 20 probe intervals of the
	// harness's timers, each refreshing coordinates.
	changes := 0
	for range 200 {
		time.Sleep(20 * time.Millisecond)
		for _, n := range c.Running() {
			if got := c.Agent(n).PreferredAssigner("kv"); got != chosen {
				changes++
				t.Logf("%s now prefers %s, not %s", n, got, chosen)
			}
		}
		if leaders := c.Leaders("kv"); !slices.Equal(leaders, []string{chosen}) {
			changes++
			t.Logf("assigners generating kv: %v", leaders)
		}
	}
	if changes != 0 {
		t.Errorf("the preference moved %d times under jitter within the margin", changes)
	}
	if extra := c.Commits("kv")[commits:]; len(extra) > 0 {
		t.Errorf("%d generations committed while only the jitter changed, the first by %s", len(extra), extra[0].Agent)
	}
	c.CheckHistory("kv")
}

// A preferred Assigner that stops gracefully hands its job over as soon as
// its leave spreads; restarted under its name, it becomes preferred again
// once its startup grace has passed and gossip has measured it near.
func TestGracefulStopAndRestart(t *testing.T) {
	c := clustertest.New(t, clustertest.Options{Latency: 10 * time.Millisecond})
	east, cl := eastPreferred(c, 2)

	before := c.Record("kv").Generation()
	stopped := time.Now()
	east.Stop()
	next := c.WaitGeneration("kv", before+1)
	for _, cm := range c.Commits("kv") {
		if cm.Generation == before+1 {
			t.Logf("graceful stop -> generation %d committed by %s %v after the stop began", cm.Generation, cm.Agent, cm.At.Sub(stopped))
		}
	}
	c.WaitPreferred("kv", "west")
	testwait.For(t, "the clerk to see west's generation", func() bool { return cl.Generation() >= next.Generation })

	east.Restart()
	c.WaitPreferred("kv", "east")
	for _, cm := range c.Commits("kv") {
		if cm.At.After(stopped) && cm.Agent == "east" {
			t.Logf("restarted east committed generation %d", cm.Generation)
		}
	}
	c.CheckHistory("kv")
}

// failed reports whether a's gossip holds the member name failed or gone.
func failed(a *clustertest.Agent, name string) bool {
	for _, p := range a.Peers() {
		if p.Name == name {
			return p.Status == gossip.StatusFailed || p.Status == gossip.StatusLeft
		}
	}
	return true
}
