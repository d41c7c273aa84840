// Package metricstest reads and lints the metrics of a Prometheus
// registry in tests.
package metricstest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// Value returns the value of the series of metric name whose labels
// include labels (name, value pairs): a counter's or gauge's value, or a
// histogram's sample count. ok is false when g has no such series.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			case m.Untyped != nil:
				return m.Untyped.GetValue(), true
			}
		}
	}
	return 0, false
}

// Histogram returns the sample count and sum of the histogram series of
// metric name whose labels include labels. ok is false when g has no such
// series.
func Histogram(t testing.TB, g prometheus.Gatherer, name string, labels ...string) (count uint64, sum float64, ok bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil && hasLabels(m, labels) {
				return h.GetSampleCount(), h.GetSampleSum(), true
			}
		}
	}
	return 0, 0, false
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Names returns the names of g's metric families that start with prefix.
func Names(t testing.TB, g prometheus.Gatherer, prefix string) []string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var names []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), prefix) {
			names = append(names, f.GetName())
		}
	}
	return names
}

// Lint fails t for every problem promlint finds in g's metrics.
func Lint(t testing.TB, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatalf("lint metrics: %v", err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}
