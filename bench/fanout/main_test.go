//go:build linux

package main

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
)

// TestMain runs the harness itself when the test binary is started as its
// tasks process.
func TestMain(m *testing.M) {
	if os.Getenv(tasksEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParseRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-streams", "0"},
		{"-streams", "10", "-conns", "11"},
		{"-generations", "0"},
		{"-slices", "-1"},
		{"-slices", "100001"},
		{"-timeout", "0s"},
		{"extra"},
		{"-mode", "hold"},
		{"-mode", "tasks"},
		{"-change", "config"},
		{"-client", "grpc"},
		{"-hot-percent", "0"},
		{"-hot-percent", "101"},
		{"-gogc", "0"},
		{"-gogc", "-2"},
	} {
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("parse(%s) accepted", strings.Join(args, " "))
		}
	}
	o, err := parse([]string{"-streams", "100", "-conns", "10", "-gzip=false"}, io.Discard)
	if err != nil || o.streams != 100 || o.conns != 10 || o.gzip {
		t.Fatalf("parse of good flags: %+v, %v", o, err)
	}
}

func TestPercentiles(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := pct(xs, 0.5); p != 5 {
		t.Errorf("p50 of 1..10 = %v, want 5", p)
	}
	if p := pct(xs, 0.99); p != 9 {
		t.Errorf("p99 of 1..10 = %v, want 9 (the nearest rank below)", p)
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
}

// The harness against the real slicerd binary, small: every stream gets
// every generation, and the report says so, with either client; the h2
// run also kills a task and sees its detection.
func TestFanoutReachesEveryStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts slicerd")
	}
	t.Run("connect", func(t *testing.T) { testFanout(t) })
	t.Run("h2", func(t *testing.T) {
		rep := testFanout(t, "-client", "h2", "-kill")
		if k := rep.Kill; k == nil || k.Received != 200 || k.CommitMs <= 0 {
			t.Errorf("kill report %+v: want the generation without the task at all 200 streams, after the kill", k)
		}
	})
}

func testFanout(t *testing.T, extra ...string) *report {
	var out, errs strings.Builder
	if code := run(append([]string{"-streams", "200", "-conns", "10", "-generations", "2", "-json"}, extra...), &out, &errs); code != 0 {
		t.Fatalf("harness exited %d:\n%s\n%s", code, out.String(), errs.String())
	}
	var rep report
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	if rep.Lost != 0 || len(rep.Generations) != 2 {
		t.Fatalf("lost %d, %d generations timed:\n%s", rep.Lost, len(rep.Generations), out.String())
	}
	for _, g := range rep.Generations {
		if g.Received != 200 || g.Bytes == 0 || g.AllMs < g.P50Ms {
			t.Errorf("generation %+v: want 200 receipts, a size, and the last receipt no earlier than the median", g)
		}
	}
	return &rep
}

// The generation codec reads what the full decoder reads of a response.
func TestGenerationCodec(t *testing.T) {
	full := &slicerv1.WatchAssignmentResponse{Assignment: &slicerv1.Assignment{Job: "kv", Generation: 1234567, Incarnation: "inc-1",
		Tasks:  []*slicerv1.Task{{Name: "t0", Address: "127.0.0.1:1"}},
		Slices: []*slicerv1.Slice{{Start: 0, End: 1 << 62, Tasks: []string{"t0"}}}}}
	b, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var got slicerv1.WatchAssignmentResponse
	if err := (generationCodec{}).Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetAssignment().GetGeneration() != 1234567 || got.GetAssignment().GetIncarnation() != "inc-1" {
		t.Fatalf("decoded %v", got.GetAssignment())
	}
	if err := (generationCodec{}).Unmarshal(b[:len(b)-3], &got); err == nil {
		t.Fatal("a truncated message decoded")
	}
}

func TestDistributionCDF(t *testing.T) {
	receipts := []float64{5, 50, 100, 150, 900, 1000, 1500, 2500, 4000, 70000} // ms, sorted
	h := &benchproc.Histogram{Bounds: []float64{0.1, 1, 2, math.Inf(1)}, Counts: []float64{3, 6, 7, 10}, Count: 10, Sum: 80}
	d := newDistribution(receipts, "message", h)
	if d.Receipts.N != 10 || d.Receipts.Within100ms != 0.3 || d.Receipts.Within1s != 0.6 || d.Receipts.Within2s != 0.7 {
		t.Errorf("receipts %+v; want 3, 6 and 7 of 10 within 100 ms, 1 s and 2 s", d.Receipts)
	}
	if d.Slicerd == nil || d.Slicerd.Within2s != 0.7 || d.Slicerd.N != 10 {
		t.Fatalf("slicerd %+v", d.Slicerd)
	}
	for _, r := range d.CDF {
		if r.LeSeconds == 1 && (r.Receipts != 0.6 || r.Slicerd == nil || !math.IsNaN(*r.Slicerd) && *r.Slicerd != 0.6) {
			t.Errorf("CDF at 1 s: %+v", r)
		}
		if r.LeSeconds == 60 && r.Receipts != 0.9 {
			t.Errorf("CDF at 60 s: receipts %v, want 0.9", r.Receipts)
		}
	}
	if d := newDistribution(receipts, "log", nil); d.Slicerd != nil || d.CDF[0].Slicerd != nil {
		t.Error("slicerd figures without its histogram")
	}
}
