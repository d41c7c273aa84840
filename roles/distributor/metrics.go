package distributor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/roles/watch"
)

// Kinds of assignment message a watch stream sends.
const (
	kindFull  = 0
	kindDelta = 1
)

var messageKinds = [...]string{kindFull: "full", kindDelta: "delta"}

// sendDelayBuckets span a loopback send (100 µs) to a send that waits
// most of the default --stream-write-timeout (30 s), in seconds.
var sendDelayBuckets = prometheus.ExponentialBuckets(0.0001, 4, 10)

// distMetrics count what a Distributor sends on its watch streams.
type distMetrics struct {
	updates *prometheus.CounterVec
	bytes   *prometheus.CounterVec
	delay   prometheus.Histogram
	// commitToSend is the delay from the Assigner's commit, which
	// includes the skew between the Assigner's clock and this node's.
	commitToSend prometheus.Histogram
	// The counters of each message kind, resolved once.
	kindUpdates, kindBytes [len(messageKinds)]prometheus.Counter
}

func newDistMetrics() *distMetrics {
	m := &distMetrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.Name("distributor", "updates_sent_total"),
			Help: "Assignment messages the Distributor sent on watch streams, by kind: full assignments or deltas.",
		}, []string{"kind"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.Name("distributor", "sent_bytes_total"),
			Help: "Bytes of assignment messages (protobuf encoding) the Distributor sent on watch streams, by kind: full assignments or deltas.",
		}, []string{"kind"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metrics.Name("distributor", "send_delay_seconds"),
			Help: "Seconds from the Distributor receiving a generation from its Assigner to having sent it on a watch stream, " +
				"for streams open when it arrived: the Distributor's own part of commit_to_send_seconds.",
			Buckets: sendDelayBuckets,
		}),
		commitToSend: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metrics.Name("distributor", "commit_to_send_seconds"),
			Help: "Seconds from the Assigner committing a generation to the Distributor having sent it on a watch stream, " +
				"for streams open when it arrived and generations whose commit time the Assigner knew. " +
				"The commit time is the Assigner's clock: skew between its host and this one adds to the figure (negative values count as 0).",
			Buckets: metrics.DistributionBuckets,
		}),
	}
	for k, name := range messageKinds {
		m.kindUpdates[k] = m.updates.WithLabelValues(name)
		m.kindBytes[k] = m.bytes.WithLabelValues(name)
	}
	return m
}

// recorder returns the function that counts a message a stream opened at
// opened sent; nil for a nil m.
func (m *distMetrics) recorder(opened time.Time) func(*watch.Message) {
	if m == nil {
		return nil
	}
	return func(s *watch.Message) {
		m.record(opened, sentMessage{delta: s.Delta() != nil, size: s.Size(), // encoded for the send already
			published: s.Published(), committed: s.Committed(), update: s.Update()})
	}
}

// sentMessage is what the metrics record of one message a stream sent.
type sentMessage struct {
	delta                bool
	size                 int
	published, committed time.Time // see watch.Message
	update               bool
}

// record counts msg, sent by a stream opened at opened.
func (m *distMetrics) record(opened time.Time, msg sentMessage) {
	k := kindFull
	if msg.delta {
		k = kindDelta
	}
	m.kindUpdates[k].Inc()
	m.kindBytes[k].Add(float64(msg.size))
	if msg.published.After(opened) {
		now := time.Now()
		m.delay.Observe(now.Sub(msg.published).Seconds())
		if msg.update && !msg.committed.IsZero() {
			m.commitToSend.Observe(metrics.SinceCommit(now, msg.committed).Seconds())
		}
	}
}

// subscribersCollector reports each job's subscribers on a Distributor
// when scraped.
type subscribersCollector struct{ d *Distributor }

var subscribersDesc = prometheus.NewDesc(metrics.Name("distributor", "subscribers"),
	"Watch streams the Distributor serves per job (with GetAssignment calls waiting for a job's first assignment).",
	[]string{"job"}, nil)

var relaysDesc = prometheus.NewDesc(metrics.Name("distributor", "relay_subscribers"),
	"Of the watch streams per job, those of relay Distributors, which are sent each generation before the others.",
	[]string{"job"}, nil)

func (subscribersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- subscribersDesc
	ch <- relaysDesc
}

func (c subscribersCollector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.Lock()
	jobs := make(map[string]*watch.Latest, len(c.d.jobs))
	for name, j := range c.d.jobs {
		jobs[name] = j.l
	}
	c.d.mu.Unlock()
	for name, l := range jobs {
		ch <- prometheus.MustNewConstMetric(subscribersDesc, prometheus.GaugeValue, float64(l.Subscribers()), name)
		ch <- prometheus.MustNewConstMetric(relaysDesc, prometheus.GaugeValue, float64(l.Relays()), name)
	}
}
