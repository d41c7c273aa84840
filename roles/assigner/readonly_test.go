package assigner

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/testwait"
)

// assignerState is everything of an Assigner a decision depends on.
type assignerState struct {
	jobs      map[string]string // job → its state, printed
	choices   map[string]string // job → remembered preferred Assigner, adoption included
	held      map[string]bool   // job → whether its lease is held
	reporting map[string]int    // job → tasks with a load report
}

func stateOf(a *Assigner, names ...string) assignerState {
	s := assignerState{jobs: map[string]string{}, choices: map[string]string{}, held: map[string]bool{}, reporting: map[string]int{}}
	a.mu.Lock()
	for name, j := range a.jobs {
		var gen uint64
		if cur := j.pub.Current(); cur != nil {
			gen = cur.Generation
		}
		s.jobs[name] = fmt.Sprintf("cfg=%+v configured=%v generation=%d committed=%v cfgSet=%d",
			j.cfg, j.configured, gen, j.committed, j.cfgSet)
	}
	a.mu.Unlock()
	for _, name := range names {
		s.choices[name] = a.leader.PreferredName(name)
		_, s.held[name] = a.leader.Held(name)
		s.reporting[name] = a.loads.reporting(name)
	}
	return s
}

// GetJob, ListJobs, GetLoadHistory and GetJobHistory only read: the Assigner's jobs, its remembered
// choices, its load reports and the store are as they were.
func TestReadOnlyRPCsChangeNothing(t *testing.T) {
	ctx := context.Background()
	store := testStore(t)
	first, err := assign.Initial("kv", []assign.Task{{Name: "t0", Addr: "127.0.0.1:10"}}, assign.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	first.Generation = 5
	if err := store.Commit(ctx, "kv", 0, first); err != nil {
		t.Fatal(err)
	}
	a := soloAssigner(t, store)
	if err := a.load(ctx); err != nil {
		t.Fatal(err)
	}
	// "web" is known to gossip only; "kv" has a report from a task that
	// has since gone.
	node := a.members.(*gossip.Node)
	taskMember(t, "kv", "t0", node.GossipAddr())
	taskMember(t, "web", "w0", node.GossipAddr())
	testwait.For(t, "gossip to see both tasks", func() bool {
		return len(a.tasksOf("kv", true)) == 1 && len(a.tasksOf("web", true)) == 1
	})
	a.loads.put("kv", "gone", &loadReport{window: time.Second}, []string{"gone", "t0"})
	recBefore, err := store.Load(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	before := stateOf(a, "kv", "web")

	for _, job := range []string{"kv", "web"} {
		resp, err := a.GetJob(ctx, connect.NewRequest(&slicerv1.GetJobRequest{Job: job}))
		if err != nil {
			t.Fatalf("GetJob %s: %v", job, err)
		}
		if got := resp.Msg.GetJob().GetPreferredAssigner(); got != "assigner-1" {
			t.Errorf("GetJob %s: preferred assigner %q, want assigner-1", job, got)
		}
		// The web UI's other reads.
		if _, err := a.GetLoadHistory(ctx, connect.NewRequest(&slicerv1.GetLoadHistoryRequest{Job: job})); err != nil {
			t.Errorf("GetLoadHistory %s: %v", job, err)
		}
		if _, err := a.GetJobHistory(ctx, connect.NewRequest(&slicerv1.GetJobHistoryRequest{Job: job})); err != nil {
			t.Errorf("GetJobHistory %s: %v", job, err)
		}
	}
	list, err := a.ListJobs(ctx, connect.NewRequest(&slicerv1.ListJobsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetJobs()); n != 1 {
		t.Errorf("ListJobs lists %d jobs, want the one loaded", n)
	}

	if after := stateOf(a, "kv", "web"); !reflect.DeepEqual(after, before) {
		t.Errorf("read-only RPCs changed the Assigner:\nbefore %+v\nafter  %+v", before, after)
	}
	recAfter, err := store.Load(ctx, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if !assign.Equal(recAfter.Current, recBefore.Current) || !recAfter.Config.Equal(recBefore.Config) {
		t.Errorf("read-only RPCs changed the stored record: %+v, was %+v", recAfter, recBefore)
	}
}
