package assigner

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// A task's load report counts only on keys its assignment gives it: task
// t1 reporting the skewed load on t0's keys (as a task holding its own
// valid certificate can) adds nothing to the job's load, moves no key,
// and is counted.
func TestLoadOnAnotherTasksKeysIsIgnored(t *testing.T) {
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	cur := f.j.pub.Current()
	gen := cur.Generation
	// Every task reports an even load on its own keys.
	f.report(t, nil, "t0", "t1", "t2")
	even := f.as.jobLoad("kv").Total()

	forged := assignertest.ReportFor(cur, "t0", assignertest.Skewed(), 1)
	forged.Task = "t1"
	if _, err := f.as.ReportLoad(context.Background(), connect.NewRequest(forged)); err != nil {
		t.Fatal(err)
	}
	if got := f.as.ForeignLoadReports(); got != 1 {
		t.Errorf("ForeignLoadReports() = %d, want 1", got)
	}
	if got := f.as.jobLoad("kv").Total(); got != even {
		t.Errorf("job load after t1 reported on t0's keys = %g, want %g (t1's own keys carry none of it)", got, even)
	}
	f.now = f.now.Add(2e9)
	f.as.balanceAll(context.Background())
	if got := f.j.pub.Current().Generation; got != gen {
		t.Errorf("a load decision committed generation %d on the forged report", got)
	}

	// Its own keys' load still counts.
	own := assignertest.ReportFor(cur, "t1", assignertest.Skewed(), 1)
	if _, err := f.as.ReportLoad(context.Background(), connect.NewRequest(own)); err != nil {
		t.Fatal(err)
	}
	if got := f.as.ForeignLoadReports(); got != 1 {
		t.Errorf("a report on the task's own keys was counted as foreign (%d)", got)
	}
}

// Reports are cut to the keys the task serves in the current assignment
// or the one before it, never one older, however the indexes of past
// generations are kept: t1 reporting on the whole key space keeps the
// half it serves under generation g, both halves under g+1 (it took the
// other half), and under g+2 (the same keys as g+1) again only its half.
func TestLoadReportsCutToTheLastTwoGenerations(t *testing.T) {
	members := &fakeMembers{}
	members.set("kv", "t0", "t1")
	f := newBalanceFixture(t, members, nil)
	gen := f.j.pub.Current().Generation
	half := assign.KeySpaceEnd / 2
	assignment := func(gen uint64, low, high string) *assign.Assignment {
		return &assign.Assignment{Job: "kv", Generation: gen, Incarnation: f.j.pub.Current().Incarnation,
			Tasks:  []assign.Task{{Name: "t0"}, {Name: "t1"}},
			Slices: []assign.Slice{{Start: 0, End: half, Tasks: []string{low}}, {Start: half, End: assign.KeySpaceEnd, Tasks: []string{high}}}}
	}
	whole := assign.Load{{Start: 0, End: half, Load: 10}, {Start: half, End: assign.KeySpaceEnd, Load: 20}}
	for i, tc := range []struct {
		a       *assign.Assignment
		kept    float64
		foreign uint64
	}{
		{assignment(gen+1, "t0", "t1"), 20, 1},
		{assignment(gen+2, "t1", "t0"), 30, 1},
		{assignment(gen+3, "t1", "t0"), 10, 2},
	} {
		if !f.j.pub.Publish(tc.a, time.Time{}) {
			t.Fatalf("step %d: generation %d not published", i, tc.a.Generation)
		}
		f.now = f.now.Add(time.Second)
		req := &slicerv1.ReportLoadRequest{Job: "kv", Task: "t1", Generation: tc.a.Generation, WindowSeconds: 1}
		for _, e := range whole {
			req.Slices = append(req.Slices, &slicerv1.SliceLoad{Start: e.Start, End: e.End, Load: e.Load})
		}
		if _, err := f.as.ReportLoad(context.Background(), connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
		if got := f.as.jobLoad("kv").Total(); got != tc.kept {
			t.Errorf("generation %d: t1's report keeps load %g, want %g", tc.a.Generation, got, tc.kept)
		}
		if got := f.as.ForeignLoadReports(); got != tc.foreign {
			t.Errorf("generation %d: %d reports cut, want %d", tc.a.Generation, got, tc.foreign)
		}
	}
}

// The job's task loads, for its imbalance, its hottest task and GetJob,
// are read through the index its load reports were cut with once one is
// held for the current assignment, and by name before. (To tell the two
// ways apart, the test rewrites a slice of the indexed assignment, which
// nothing else may do: the index still says who served it.)
func TestTaskLoadsReadThroughTheReportsIndex(t *testing.T) {
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	cur := f.j.pub.Current()
	load := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: 300}}
	if f.j.owners.lookup(cur) != nil {
		t.Fatal("an index is held before any report")
	}
	if got, _ := f.as.taskLoadsOf("kv", cur, load, false); !slices.Equal(got, assign.TaskLoads(cur, load)) {
		t.Fatalf("task loads without an index %v, want %v", got, assign.TaskLoads(cur, load))
	}
	f.report(t, nil, "t0", "t1", "t2")
	idx := f.j.owners.lookup(cur)
	if idx == nil || idx.Assignment() != cur {
		t.Fatal("no index held for the current assignment after its tasks reported")
	}
	want := assign.TaskLoads(cur, load)
	first := cur.Slices[0].Tasks
	other := "t0"
	if first[0] == "t0" {
		other = "t1"
	}
	cur.Slices[0].Tasks = []string{other}
	defer func() { cur.Slices[0].Tasks = first }()
	if got, _ := f.as.taskLoadsOf("kv", cur, load, false); !slices.Equal(got, want) {
		t.Fatalf("task loads with an index held %v, want the index's %v (by name: %v)", got, want, assign.TaskLoads(cur, load))
	}
	if i, _ := f.as.hottestOf("kv", cur, load, nil); i != slices.Index(want, slices.Max(want)) {
		t.Fatalf("hottest task %d, want %d from the index's loads %v", i, slices.Index(want, slices.Max(want)), want)
	}
}

// bigJob is an Assigner leading job kv of n tasks, each serving about
// 100 slices of the published assignment, and each task's load report of
// its own keys (as ReportFor would make it, but found through an index:
// a million slices at 10,000 tasks). Nothing is reported yet.
func bigJob(b *testing.B, n int) (*balanceFixture, []*slicerv1.ReportLoadRequest) {
	b.Helper()
	big := storagetest.Assignment("kv", 100, n, 100)
	names := make([]string, n)
	for i, t := range big.Tasks {
		names[i] = t.Name
	}
	members := &versionedMembers{} // as gossip counts its changes
	members.set("kv", names...)
	f := newBalanceFixture(b, members, nil)
	big.Generation = f.j.pub.Current().Generation + 1
	big.Incarnation = f.j.pub.Current().Incarnation
	if !f.j.pub.Publish(big, time.Time{}) {
		b.Fatal("not published")
	}
	truth := assign.Load{{Start: 0, End: assign.KeySpaceEnd, Load: float64(100 * n)}}
	idx := assign.NewOwnerIndex(big)
	reqs := make([]*slicerv1.ReportLoadRequest, n)
	for i, name := range names {
		reqs[i] = &slicerv1.ReportLoadRequest{Job: "kv", Task: name, Generation: big.Generation, WindowSeconds: 1}
		for _, e := range truth.OwnedIn(name, idx) {
			reqs[i].Slices = append(reqs[i].Slices, &slicerv1.SliceLoad{Start: e.Start, End: e.End, Load: e.Load})
		}
	}
	return f, reqs
}

// BenchmarkReportLoad is one task's load report (its 100 slices) arriving
// at the Assigner of a job of n tasks, each serving about 100 slices of
// the current assignment: validated, cut to the task's keys and kept.
// The tasks report in turn. The first report after a generation indexes
// it (untimed here).
//
//	go test -run '^$' -bench ReportLoad -benchmem ./roles/assigner/
func BenchmarkReportLoad(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			ctx := context.Background()
			f, reqs := bigJob(b, n)
			if _, err := f.as.ReportLoad(ctx, connect.NewRequest(reqs[0])); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i = (i + 1) % n
				if _, err := f.as.ReportLoad(ctx, connect.NewRequest(reqs[i])); err != nil {
					b.Fatal(err)
				}
			}
			if got := f.as.ForeignLoadReports(); got != 0 {
				b.Fatalf("%d reports cut", got)
			}
		})
	}
}
