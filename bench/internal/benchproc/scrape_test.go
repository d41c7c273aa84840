package benchproc

import (
	"math"
	"strings"
	"testing"
)

const exposition = `# HELP slicerd_x_seconds A histogram.
# TYPE slicerd_x_seconds histogram
slicerd_x_seconds_bucket{le="0.1"} 50
slicerd_x_seconds_bucket{le="1"} 90
slicerd_x_seconds_bucket{le="2"} 100
slicerd_x_seconds_bucket{le="+Inf"} 100
slicerd_x_seconds_sum 30.5
slicerd_x_seconds_count 100
slicerd_slicelet_requests_total{job="kv",task="kv-0"} 7
slicerd_slicelet_requests_total{job="kv",task="kv-1"} 5 1700000000000
slicerd_odd{note="a \"quoted\", value"} 1e3
`

func TestParseMetricsAndHistograms(t *testing.T) {
	ss, err := ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if got := ss.Sum("slicerd_slicelet_requests_total", "job", "kv"); got != 12 {
		t.Errorf("requests over both tasks = %v, want 12", got)
	}
	if got := ss.Sum("slicerd_slicelet_requests_total", "task", "kv-1"); got != 5 {
		t.Errorf("requests of kv-1 = %v, want 5", got)
	}
	if got := ss.Sum("slicerd_odd", "note", `a "quoted", value`); got != 1000 {
		t.Errorf("series with an escaped label = %v, want 1000", got)
	}
	h := ss.Histogram("slicerd_x_seconds")
	if h.Count != 100 || h.Sum != 30.5 || len(h.Bounds) != 4 || !math.IsInf(h.Bounds[3], 1) {
		t.Fatalf("histogram %+v", h)
	}
	if w := h.Within(1); w != 0.9 {
		t.Errorf("within 1 s = %v, want 0.9", w)
	}
	// histogram_quantile's interpolation: the median is the top of the
	// first bucket, the 70th percentile halfway through the second.
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.1}, {0.7, 0.55}, {0.25, 0.05}, {0.95, 1.5}} {
		if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("quantile %v = %v, want %v", tc.q, got, tc.want)
		}
	}
	before := Histogram{Bounds: h.Bounds, Counts: []float64{40, 40, 40, 40}, Count: 40, Sum: 2}
	d := h.Sub(before)
	if d.Count != 60 || d.Counts[0] != 10 || d.Counts[2] != 60 || d.Sum != 28.5 {
		t.Errorf("difference %+v", d)
	}
	if _, err := ParseMetrics(strings.NewReader("slicerd_broken{le=\"1\" 3\n")); err == nil {
		t.Error("a line with unterminated labels parsed")
	}
}
