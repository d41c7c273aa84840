package assigner

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/roles/assigner/assignertest"
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
