package distributor

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// TestCommitToSendMetric: each send of a generation that arrived while the
// stream was open, and replaced an earlier one, observes its delay from
// the commit, clamped at 0 when the Assigner's clock is ahead; a
// generation without a commit time, or the node's first, is not timed.
func TestCommitToSendMetric(t *testing.T) {
	m := newDistMetrics()
	opened := time.Now()
	msg := func(committed time.Time, update bool, published time.Time) sentMessage {
		return sentMessage{size: 100, published: published, committed: committed, update: update}
	}
	histogram := func() (count uint64, sum float64) {
		var out dto.Metric
		if err := m.commitToSend.Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetHistogram().GetSampleCount(), out.GetHistogram().GetSampleSum()
	}
	after := opened.Add(time.Millisecond)
	for _, tc := range []struct {
		name      string
		msg       sentMessage
		wantCount uint64
		wantSum   func(float64) bool
	}{
		{"committed 3 s ago", msg(time.Now().Add(-3*time.Second), true, after), 1, func(s float64) bool { return s >= 3 }},
		{"the assigner's clock an hour ahead", msg(time.Now().Add(time.Hour), true, after), 2, nil},
		{"no commit time (old assigner, or read from the store)", msg(time.Time{}, true, after), 2, nil},
		{"the node's first generation", msg(time.Now().Add(-time.Minute), false, after), 2, nil},
		{"published before the stream opened", msg(time.Now().Add(-time.Minute), true, opened.Add(-time.Millisecond)), 2, nil},
	} {
		_, sumBefore := histogram()
		m.record(opened, tc.msg)
		count, sum := histogram()
		if count != tc.wantCount {
			t.Errorf("%s: %d delays observed, want %d", tc.name, count, tc.wantCount)
		}
		if tc.wantSum != nil && !tc.wantSum(sum) {
			t.Errorf("%s: delays add up to %v s", tc.name, sum)
		}
		if tc.wantSum == nil && sum != sumBefore {
			t.Errorf("%s: the sum of delays went from %v to %v, want it unchanged (nothing, or 0, observed)", tc.name, sumBefore, sum)
		}
	}
}

// BenchmarkCountingSend is what metrics add to each send of a
// Distributor's watch streams (two counters and two histograms, shared by
// every stream), from parallel senders as in a fan-out.
//
//	go test -run '^$' -bench CountingSend -cpu 1,2 ./roles/
func BenchmarkCountingSend(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			var m *distMetrics
			if on {
				m = newDistMetrics()
			}
			now := time.Now()
			// An update, timed from its commit too.
			msg := sentMessage{size: 100, published: now, committed: now, update: true}
			opened := now.Add(-time.Second)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if m != nil {
						m.record(opened, msg)
					}
				}
			})
		})
	}
}
