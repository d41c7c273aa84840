package assigner

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/storage"
)

// The Assigner's per-job metrics. The state of a job (generation,
// imbalance, load and slices per task, misrouted load) is read when
// scraped, for the jobs whose lease this Assigner holds: those are the
// jobs whose load reports it receives, so another Assigner's view would
// be empty. What happens at decisions (how many, why, how long, how much
// moved) is counted as it happens, by job, and a deleted job's series
// are dropped with it. Labels are job and task: at most --max-jobs jobs,
// each with its tasks; never a key.

// Histogram buckets.
var (
	// decisionBuckets span a membership decision on a small job (50 µs) to
	// a load decision on a million-slice job (about 3 s).
	decisionBuckets = prometheus.ExponentialBuckets(0.00005, 3, 12)
	// churnBuckets span one slice of a large job to the whole key space.
	churnBuckets = []float64{0.0001, 0.001, 0.005, 0.01, 0.02, 0.05, 0.09, 0.2, 0.5, 1}
)

// jobMetrics counts an Assigner's decisions.
type jobMetrics struct {
	decisions *prometheus.CounterVec   // job, cause
	churn     *prometheus.HistogramVec // job
	duration  *prometheus.HistogramVec // job
	skips     *prometheus.CounterVec   // job
}

func newJobMetrics() *jobMetrics {
	return &jobMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicerd_assigner_decisions_total",
			Help: "Assignments this Assigner committed, by job and cause (initial, task-failed, task-left, task-joined, task-moved, operator, load, takeover, make-before-break).",
		}, []string{"job", "cause"}),
		churn: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slicerd_assigner_decision_churn_ratio",
			Help:    "Fraction of the key space that gained a task, per committed decision.",
			Buckets: churnBuckets,
		}, []string{"job"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slicerd_assigner_decision_duration_seconds",
			Help:    "Time the algorithm took to compute a decision, committed or not.",
			Buckets: decisionBuckets,
		}, []string{"job"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slicerd_assigner_load_decisions_skipped_total",
			Help: "Load-driven decisions not computed because even a perfect balance would not lower the imbalance by more than the load measurement's noise.",
		}, []string{"job"}),
	}
}

// decided records the time one decision took to compute.
func (m *jobMetrics) decided(job string, took time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(job).Observe(took.Seconds())
	}
}

// skipped records a load-driven decision not computed (futile).
func (m *jobMetrics) skipped(job string) {
	if m != nil {
		m.skips.WithLabelValues(job).Inc()
	}
}

// committed records a committed decision.
func (m *jobMetrics) committed(job string, e storage.HistoryEntry) {
	if m != nil {
		m.decisions.WithLabelValues(job, e.Cause).Inc()
		m.churn.WithLabelValues(job).Observe(e.Churn)
	}
}

// forget drops a deleted job's series.
func (m *jobMetrics) forget(job string) {
	if m != nil {
		l := prometheus.Labels{"job": job}
		m.decisions.DeletePartialMatch(l)
		m.churn.DeletePartialMatch(l)
		m.duration.DeletePartialMatch(l)
		m.skips.DeletePartialMatch(l)
	}
}

// Descriptions of the job state read at each scrape.
var (
	jobGenerationDesc = prometheus.NewDesc("slicerd_job_generation",
		"Generation of the job's current assignment, for the jobs this Assigner leads.", []string{"job"}, nil)
	jobImbalanceDesc = prometheus.NewDesc("slicerd_job_imbalance_ratio",
		"Max/mean task utilisation (load divided by capacity) of the job's current assignment under the measured load; 1 is perfectly even.", []string{"job"}, nil)
	jobLoadDesc = prometheus.NewDesc("slicerd_job_load",
		"The job's total measured load per second, in the job's own unit, as the tasks report it.", []string{"job"}, nil)
	jobMisroutedDesc = prometheus.NewDesc("slicerd_job_misrouted_load",
		"Load per second the job's tasks received for keys they do not own (misrouted requests), as they report it.", []string{"job"}, nil)
	jobTasksDesc = prometheus.NewDesc("slicerd_job_live_tasks",
		"Tasks of the job alive in gossip.", []string{"job"}, nil)
	taskLoadDesc = prometheus.NewDesc("slicerd_job_task_load",
		"Measured load per second on the keys each task serves (a replicated slice's load shared among its tasks).", []string{"job", "task"}, nil)
	taskSlicesDesc = prometheus.NewDesc("slicerd_job_task_slices",
		"Slices of the current assignment each task serves.", []string{"job", "task"}, nil)
	taskBytesDesc = prometheus.NewDesc("slicerd_job_task_state_bytes",
		"State each task reports holding for its keys, in bytes (0 when tasks do not report state size).", []string{"job", "task"}, nil)
)

// jobCollector reads the state of the jobs an Assigner leads at each
// scrape: one pass over each job's slices and load reports, as 'job get'
// costs.
type jobCollector struct{ a *Assigner }

func (c jobCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{jobGenerationDesc, jobImbalanceDesc, jobLoadDesc, jobMisroutedDesc, jobTasksDesc,
		taskLoadDesc, taskSlicesDesc, taskBytesDesc} {
		ch <- d
	}
}

func (c jobCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	for _, name := range a.jobNames() {
		if _, held := a.leader.Held(name); !held {
			continue
		}
		j, ok := a.known(name)
		if !ok {
			continue
		}
		// The figures 'job get' shows, computed once by jobInfo.
		info := a.jobInfo(j)
		cur := j.pub.Current()
		if cur == nil || info.GetGeneration() == 0 {
			continue
		}
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(jobGenerationDesc, float64(info.GetGeneration()), name)
		gauge(jobImbalanceDesc, finite(info.GetImbalance()), name)
		gauge(jobLoadDesc, info.GetTotalLoad(), name)
		gauge(jobMisroutedDesc, a.loads.unownedRate(name, a.liveNamesNow(name)), name)
		gauge(jobTasksDesc, float64(len(info.GetLiveTasks())), name)
		slicesOf := make(map[string]int, len(cur.Tasks))
		for _, s := range cur.Slices {
			for _, t := range s.Tasks {
				slicesOf[t]++
			}
		}
		for _, tl := range info.GetTaskLoads() {
			gauge(taskLoadDesc, tl.GetLoad(), name, tl.GetTask())
			gauge(taskSlicesDesc, float64(slicesOf[tl.GetTask()]), name, tl.GetTask())
			gauge(taskBytesDesc, tl.GetBytes(), name, tl.GetTask())
		}
	}
}

// unownedRate is the misrouted load per second the job's live tasks
// (sorted names) last reported, summed, weighted by age as jobLoad
// weighs their load.
func (l *loads) unownedRate(job string, live []string) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	sum := 0.0
	for task, r := range l.jobs[job] {
		if _, ok := slices.BinarySearch(live, task); ok {
			sum += r.unowned * l.weight(r, now)
		}
	}
	return sum
}

// metricCollectors creates the Assigner's metrics and returns them for
// registering. It is called before Run; without it, decisions are not
// counted.
func (a *Assigner) metricCollectors() []prometheus.Collector {
	m := newJobMetrics()
	a.metrics = m
	foreign := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "slicerd_assigner_foreign_load_reports_total",
		Help: "Load reports cut to the reporting task's own keys: they carried load on keys the job's assignment gives other tasks. Anything but 0 is a misbehaving task, or one trying to move another's keys.",
	}, func() float64 { return float64(a.ForeignLoadReports()) })
	watch := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slicerd_assigner_job_lease_watch",
		Help: "1 while the Assigner watches the store's job leases end (etcd), so that it takes a job another Assigner let go at once and asks the store nothing about it meanwhile; 0 without (the embedded store, or while etcd's watch is down: it then asks about each such job every preference recheck).",
	}, func() float64 {
		if a.leader.WatchingReleases() {
			return 1
		}
		return 0
	})
	return []prometheus.Collector{m.decisions, m.churn, m.duration, m.skips, foreign, watch, jobCollector{a}}
}
