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
	}
}

func (m *clerkMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.generation
	ch <- m.age
	ch <- m.look
}

func (m *clerkMetrics) Collect(ch chan<- prometheus.Metric) {
	if t := m.c.table.Load(); t != nil {
		ch <- prometheus.MustNewConstMetric(m.generation, prometheus.GaugeValue, float64(t.a.Generation))
		ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, time.Since(t.installed).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(m.look, prometheus.CounterValue, float64(m.lookups.Load()))
}
