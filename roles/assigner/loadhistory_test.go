package assigner

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"connectrpc.com/connect"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/assigner/assignertest"
)

// The load history bins each sample over the key space, keeps the newest
// loadSamples oldest first, and forgets a job that is deleted or no longer
// sampled.
func TestLoadHistory(t *testing.T) {
	ctx := context.Background()
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	get := func(job string) (*slicerv1.GetLoadHistoryResponse, error) {
		resp, err := f.as.GetLoadHistory(ctx, connect.NewRequest(&slicerv1.GetLoadHistoryRequest{Job: job}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	h, err := get("kv")
	if err != nil || h.GetBucketCount() != loadBuckets || len(h.GetSamples()) != 0 {
		t.Fatalf("history before any report = %v, %v; want %d buckets and no sample", h, err, loadBuckets)
	}
	if _, err := get("nope"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("history of an unknown job: %v, want NOT_FOUND", err)
	}

	// skewed puts 900/s on the first sixth of the key space, 100/s on the rest.
	f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
	for i := range loadSamples + 10 {
		f.as.sampleLoads(f.now.Add(time.Duration(i) * time.Second))
	}
	h, err = get("kv")
	if err != nil {
		t.Fatal(err)
	}
	s := h.GetSamples()
	if len(s) != loadSamples {
		t.Fatalf("%d samples kept, want the newest %d", len(s), loadSamples)
	}
	if first, last := time.Unix(0, s[0].GetTimeUnixNano()), time.Unix(0, s[len(s)-1].GetTimeUnixNano()); !first.Equal(f.now.Add(10*time.Second)) ||
		!last.Equal(f.now.Add((loadSamples+9)*time.Second)) {
		t.Fatalf("samples span %v to %v; want the newest %d, oldest first", first, last, loadSamples)
	}
	// The reports carry load per slice of the first assignment (a third
	// of the key space each), so the merged load is even within each third.
	var sum float64
	b := s[0].GetBucketLoad()
	for _, v := range b {
		sum += v
	}
	want := f.as.jobLoad("kv")
	w := assign.KeySpaceEnd / loadBuckets
	if len(b) != loadBuckets || math.Abs(sum-1000) > 0.01 || math.Abs(b[0]-want.In(0, w)) > 0.001 ||
		math.Abs(b[loadBuckets-1]-want.In(assign.KeySpaceEnd-w, assign.KeySpaceEnd)) > 0.001 || b[0] <= 10*b[loadBuckets-1] {
		t.Errorf("buckets %v add up to %g; want 1000, the merged load of each bucket, and the hot first sixth hotter", b, sum)
	}

	// Not sampled for as long as the record spans: dropped.
	span := loadSamples * f.as.loadHistory.interval
	f.as.loadHistory.prune(f.now.Add((loadSamples+9)*time.Second + span - time.Second))
	if h, _ := get("kv"); len(h.GetSamples()) != loadSamples {
		t.Fatalf("a record sampled within its span was dropped")
	}
	f.as.loadHistory.prune(f.now.Add((loadSamples+9)*time.Second + span + time.Second))
	if h, _ := get("kv"); len(h.GetSamples()) != 0 {
		t.Errorf("a record not sampled for %v kept %d samples", span, len(h.GetSamples()))
	}
	// Deleted: dropped.
	f.as.sampleLoads(f.now)
	f.as.forgetJob("kv")
	if len(f.as.loadHistory.samples("kv")) != 0 {
		t.Error("a deleted job's load history was kept")
	}
}

// BenchmarkSampleLoads is one round of the load history's sampling (every
// LoadHistoryInterval, 5 s by default, on every Assigner): a job of
// 10,000 tasks reporting ~100 slices each, and 3,000 jobs of 3 tasks
// reporting 10 slices each (past the maxLoadHistoryJobs the history
// records).
//
//	go test -run '^$' -bench SampleLoads -benchmem ./roles/assigner/
func BenchmarkSampleLoads(b *testing.B) {
	b.Run("jobs=1/tasks=10000", func(b *testing.B) {
		ctx := context.Background()
		f, reqs := bigJob(b, 10000)
		for _, r := range reqs {
			if _, err := f.as.ReportLoad(ctx, connect.NewRequest(r)); err != nil {
				b.Fatal(err)
			}
		}
		now := f.now
		for b.Loop() {
			now = now.Add(time.Second)
			f.as.sampleLoads(now)
		}
	})
	b.Run("jobs=3000/tasks=3", func(b *testing.B) {
		const jobs, tasks, slices = 3000, 3, 10
		members := manyJobs(jobs, tasks)
		as := testAssigner(b, testConfig(b, "n"), testStore(b), members, nil)
		w := assign.KeySpaceEnd / (tasks * slices)
		for j := range jobs {
			job := fmt.Sprintf("j%d", j)
			live := as.liveTaskNames(job)
			for t := range tasks {
				r := &loadReport{window: time.Second}
				for s := range slices {
					start := assign.SliceKey(t*slices+s) * w
					r.rate = append(r.rate, assign.LoadEntry{Start: start, End: start + w, Load: float64(1 + s)})
				}
				as.loads.put(job, fmt.Sprintf("t%d", t), r, live)
			}
		}
		now := time.Now()
		for b.Loop() {
			now = now.Add(time.Second)
			as.sampleLoads(now)
		}
	})
}

// A job the full history would refuse is not sampled (takes), and room
// made meanwhile is taken at its next sample, not with no load.
func TestLoadHistoryTakesOnlyWhatItRecords(t *testing.T) {
	h := newLoadHistory(time.Second)
	now := time.Unix(100, 0)
	full := make([]float64, loadBuckets)
	for i := range maxLoadHistoryJobs {
		if !h.add(fmt.Sprint("j", i), now, full) {
			t.Fatalf("job %d refused below the limit", i)
		}
	}
	if h.takes("late") {
		t.Fatal("a full history takes another job")
	}
	if !h.takes("j0") {
		t.Fatal("a full history does not take a job it records")
	}
	if h.add("late", now, nil) || !h.add("late", now, nil) {
		t.Error("a refused job is not reported once per full spell")
	}
	h.forget("j0")
	if !h.add("late", now, nil) || h.samples("late") != nil {
		t.Fatal("a job sampled while refused, with room made since, was recorded without its load")
	}
	if !h.takes("late") || !h.add("late", now, full) || len(h.samples("late")) != 1 {
		t.Error("the room made is not taken at the next sample")
	}
}

// A sample weighs each report as decisions do (jobLoad): a report past
// its window counts for less, decaying with the half-life.
func TestLoadHistoryWeighsStaleReports(t *testing.T) {
	members := &fakeMembers{}
	members.set("kv", "t0", "t1", "t2")
	f := newBalanceFixture(t, members, nil)
	if f.as.loads.halfLife <= 0 {
		t.Fatal("the fixture's reports do not decay")
	}
	f.report(t, assignertest.Skewed(), "t0", "t1", "t2")
	f.now = f.now.Add(time.Minute + 2*f.as.loads.halfLife) // long past the reports' windows
	f.as.sampleLoads(f.now)
	var sum float64
	for _, v := range f.as.loadHistory.samples("kv")[0].GetBucketLoad() {
		sum += v
	}
	if want := f.as.jobLoad("kv").Total(); sum >= 1000/4 || math.Abs(sum-want) > 1e-6*want {
		t.Errorf("a sample of stale reports adds up to %g; want the decayed load decisions see, %g", sum, want)
	}
}
