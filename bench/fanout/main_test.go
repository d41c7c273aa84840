//go:build linux

package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestParseRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-streams", "0"},
		{"-streams", "10", "-conns", "11"},
		{"-generations", "0"},
		{"-slices", "-1"},
		{"-slices", "100001"},
		{"-timeout", "0s"},
		{"extra"},
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
// every generation, and the report says so.
func TestFanoutReachesEveryStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts slicerd")
	}
	var out, errs strings.Builder
	if code := run([]string{"-streams", "200", "-conns", "10", "-generations", "2", "-json"}, &out, &errs); code != 0 {
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
}
