package assigner

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/storage"
)

// commitBuckets span a bbolt commit on a fast disk (0.5 ms) to an etcd
// commit across a struggling cluster (8 s), in seconds.
var commitBuckets = prometheus.ExponentialBuckets(0.0005, 2, 15)

// storeMetrics time the Assigner's commits to the store.
type storeMetrics struct {
	duration  prometheus.Histogram
	conflicts *prometheus.CounterVec
	errors    prometheus.Counter
	// conflicts by reason, resolved once
	generation, lease prometheus.Counter
}

func newStoreMetrics() *storeMetrics {
	m := &storeMetrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metrics.Name("store", "commit_duration_seconds"),
			Help:    "Seconds the Assigner's conditional commits of assignments to the store took, successful or not.",
			Buckets: commitBuckets,
		}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.Name("store", "commit_conflicts_total"),
			Help: "Assigner commits the store refused, by reason: generation (another commit came first; the Assigner rebases and retries) " +
				"or lease (the job's lease moved to another Assigner).",
		}, []string{"reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.Name("store", "commit_errors_total"),
			Help: "Assigner commits that failed for another reason than a conflict (store unreachable, invalid or unreadable data).",
		}),
	}
	m.generation = m.conflicts.WithLabelValues("generation")
	m.lease = m.conflicts.WithLabelValues("lease")
	return m
}

// commitDone records one commit that took d and returned err: the
// Assigner's commit calls it for every commit, recorded or not.
func (m *storeMetrics) commitDone(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.duration.Observe(d.Seconds())
	switch {
	case err == nil:
	case errors.Is(err, storage.ErrConflict):
		m.generation.Inc()
	case errors.Is(err, storage.ErrFenced):
		m.lease.Inc()
	case errors.Is(err, context.Canceled):
		// The agent is stopping: not the store's doing.
	default:
		m.errors.Inc()
	}
}
