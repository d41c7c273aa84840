package clerk

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/internal/metrics"
)

// clerkMetrics is a Clerk's Prometheus collector: the held assignment's
// generation and age are read when scraped, and lookups are counted in a
// sharded counter, so that concurrent lookups of different keys do not
// contend on one cache line. The job is a constant label of every
// descriptor, so the Clerks of different jobs share a registry, and a
// Clerk of a job already registered replaces the earlier one
// (metrics.Register).
type clerkMetrics struct {
	c                     *Clerk
	lookups               metrics.ShardedCounter
	generation, age, look *prometheus.Desc
	delay                 prometheus.Histogram
}

func newClerkMetrics(c *Clerk) *clerkMetrics {
	job := prometheus.Labels{"job": c.cfg.Job}
	return &clerkMetrics{
		c: c,
		generation: prometheus.NewDesc(metrics.Name("clerk", "assignment_generation"),
			"Generation of the assignment the Clerk routes with; absent before the first.", nil, job),
		age: prometheus.NewDesc(metrics.Name("clerk", "assignment_age_seconds"),
			"Seconds since the Clerk installed the assignment it routes with (received from slicerd, or read from its cache file at start); "+
				"absent before the first. It grows while the job's assignment does not change, and also while no slicerd server answers.",
			nil, job),
		look: prometheus.NewDesc(metrics.Name("clerk", "lookups_total"),
			"Keys the Clerk looked up (AssignedTasks, PickTask, AssignedTaskNames and their String forms), before the first assignment too.",
			nil, job),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metrics.Name("clerk", "assignment_delay_seconds"),
			Help: "Seconds from the Assigner committing a generation to the Clerk installing it, for each generation that replaced an earlier one " +
				"and whose commit time the server sent. The commit time is the Assigner's clock: skew between its host and this one adds to the figure " +
				"(negative values count as 0).",
			Buckets:     metrics.DistributionBuckets,
			ConstLabels: job,
		}),
	}
}

// installed records a generation committed at committed (the zero time
// when unknown) and installed at now. A nil m does nothing.
func (m *clerkMetrics) installed(now, committed time.Time) {
	if m == nil || committed.IsZero() {
		return
	}
	m.delay.Observe(metrics.SinceCommit(now, committed).Seconds())
}

func (m *clerkMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.generation
	ch <- m.age
	ch <- m.look
	m.delay.Describe(ch)
}

func (m *clerkMetrics) Collect(ch chan<- prometheus.Metric) {
	if t := m.c.table.Load(); t != nil {
		ch <- prometheus.MustNewConstMetric(m.generation, prometheus.GaugeValue, float64(t.a.Generation))
		ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, time.Since(t.installed).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(m.look, prometheus.CounterValue, float64(m.lookups.Load()))
	m.delay.Collect(ch)
}
