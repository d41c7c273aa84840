package slicelet

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/internal/metrics"
)

// sliceletMetrics is a Slicelet's Prometheus collector. The held
// assignment's generation and age are read when scraped; lookups,
// requests and misrouted requests are counted in sharded counters, keyed
// by the key's slice key, so that concurrent requests for different keys
// do not contend on one cache line (the load cells they also add to are
// padded for the same reason). The job and task are constant labels of
// every descriptor: the Slicelets of different tasks share a registry,
// and a Slicelet of a task already registered replaces the earlier one.
type sliceletMetrics struct {
	s                            *Slicelet
	lookups, requests, misrouted metrics.ShardedCounter

	generation, age, lookupsDesc, requestsDesc, misroutedDesc, reclaimsDesc *prometheus.Desc
}

func newSliceletMetrics(s *Slicelet) *sliceletMetrics {
	labels := prometheus.Labels{"job": s.cfg.Job, "task": s.cfg.Task}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(metrics.Name("slicelet", name), help, nil, labels)
	}
	return &sliceletMetrics{
		s:          s,
		generation: desc("assignment_generation", "Generation of the assignment the Slicelet answers from; absent before the first."),
		age: desc("assignment_age_seconds", "Seconds since the Slicelet installed the assignment it answers from (received from slicerd, or read from its cache file at start); "+
			"absent before the first. It grows while the job's assignment does not change, and also while no slicerd server answers."),
		lookupsDesc: desc("lookups_total", "IsAffinitizedKey and IsAffinitizedKeyString calls."),
		requestsDesc: desc("requests_total", "Requests this task counted load for (ReportLoad and ReportLoadString calls with a valid cost, "+
			"which HTTPMiddleware and Interceptor make once per request or stream message)."),
		misroutedDesc: desc("misrouted_requests_total", "Requests of requests_total for keys the task's current assignment does not give it "+
			"(the client routed on another assignment than this task's, or before this task had one); their load is reported as unowned."),
		reclaimsDesc: desc("gossip_reclaims_total", "Times the task moved its gossip member to a new address because the Assigners' gossip kept it dead although it was alive "+
			"(with TLS). Anything but 0 means a death message at an incarnation the member could not outbid, possibly forged by a holder of the gossip key."),
	}
}

func (m *sliceletMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.generation
	ch <- m.age
	ch <- m.lookupsDesc
	ch <- m.requestsDesc
	ch <- m.misroutedDesc
	ch <- m.reclaimsDesc
}

func (m *sliceletMetrics) Collect(ch chan<- prometheus.Metric) {
	if v := m.s.view.Load(); v != nil {
		ch <- prometheus.MustNewConstMetric(m.generation, prometheus.GaugeValue, float64(v.table.Assignment().Generation))
		ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, time.Since(v.installed).Seconds())
	}
	// Misrouted first: read after requests, it could count a request
	// requests missed, and the fraction would exceed 1.
	misrouted := m.misrouted.Load()
	requests := m.requests.Load()
	ch <- prometheus.MustNewConstMetric(m.lookupsDesc, prometheus.CounterValue, float64(m.lookups.Load()))
	ch <- prometheus.MustNewConstMetric(m.requestsDesc, prometheus.CounterValue, float64(requests))
	ch <- prometheus.MustNewConstMetric(m.misroutedDesc, prometheus.CounterValue, float64(misrouted))
	ch <- prometheus.MustNewConstMetric(m.reclaimsDesc, prometheus.CounterValue, float64(m.s.reclaims.Load()))
}
