package roles

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/metrics"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/tlsconfig"
)

// The agent's Prometheus metrics, registered with Config.Registerer by New
// (none when it is nil). Most are read when scraped from state the agent
// keeps anyway (streams open, subscribers per job, gossip members), so
// they cost nothing between scrapes. Those counted as they happen are
// counters and histograms without per-stream labels: a Distributor's send
// adds to two counters and two histograms, all shared by every stream.
// docs/operations.md lists them all.

// Histogram buckets, in seconds.
var ()

// registerMetrics registers the agent's metrics with reg and has the roles
// count theirs. It is called by New once the roles exist; nil reg does
// nothing.
func (a *Agent) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metrics.Name("rpc", "streams_open"),
			Help: "Streams (WatchAssignment on every role, and server reflection) this node serves now; at most --max-streams.",
		}, func() float64 { return float64(a.streams.Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("rpc", "streams_refused_total"),
			Help: "Streams refused because the node already served --max-streams.",
		}, func() float64 { return float64(a.streams.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("rpc", "stream_send_timeouts_total"),
			Help: "Watch streams reset because one send waited longer than --stream-write-timeout for a client that did not read.",
		}, func() float64 { return float64(a.sendWatch.Timeouts()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("rpc", "parked_handlers_total"),
			Help: "RPCs that held one of the node's places for starting RPCs 100 ms without answering or waiting for an event, and stopped counting (slow handlers; see docs/operations.md).",
		}, func() float64 { return float64(a.gate.Parked()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("rpc", "connections_refused_total"),
			Help: "RPC connections closed on arrival because the node held --max-connections, or --max-connections-per-ip from that address.",
		}, func() float64 { return float64(a.conns.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("rpc", "connections_evicted_total"),
			Help: "With TLS: connections without a certificate of the cluster's CA closed to admit a newer one, their share (a quarter of --max-connections) or the whole cap being full.",
		}, func() float64 { return float64(a.conns.Evicted()) }),
		newMembersCollector(a.rawPeers),
	}
	if src := a.cfg.TLS; src != nil {
		for _, c := range []struct {
			label string
			at    func(tlsconfig.Expiry) time.Time
		}{{"node", func(e tlsconfig.Expiry) time.Time { return e.Cert }}, {"ca", func(e tlsconfig.Expiry) time.Time { return e.CA }}} {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        metrics.Name("tls", "certificate_expiry_timestamp_seconds"),
				Help:        "When the node's TLS certificate (certificate=node) and the earliest certificate of its CA file (certificate=ca) expire, in seconds since the Unix epoch; alert well before (slicerd warns in its log from 14 days before).",
				ConstLabels: prometheus.Labels{"certificate": c.label},
			}, func() float64 {
				if at := c.at(src.Expiry()); !at.IsZero() {
					return float64(at.Unix())
				}
				return 0
			}))
		}
	}
	if a.refusals != nil {
		for _, r := range []auth.Reason{auth.Handshake, auth.Unauthenticated, auth.Denied} {
			cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        metrics.Name("rpc", "refused_total"),
				Help:        "With TLS: TLS handshakes that failed (reason handshake), calls without valid credentials (unauthenticated) and calls denied to their caller (denied). Each is also logged, at most once per 10 s per reason.",
				ConstLabels: prometheus.Labels{"reason": r.String()},
			}, func() float64 { return float64(a.refusals.Count(r)) }))
		}
	}
	if a.verify != nil {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("gossip", "forged_claims_total"),
			Help: "Membership reads that found a registered task member's gossip state (roles, job, task or serving address) disagreeing with its certificate-backed registration; the registration was used. Anything but 0 means someone holding the gossip key forged that state (with TLS only).",
		}, func() float64 { return float64(a.verify.ForgedClaims()) }))
	}
	refusals := func(keyringQueries bool) func() float64 {
		return func() float64 {
			n := a.gossipNode()
			if n == nil {
				return 0
			}
			unsealed, queries := n.Refusals()
			if keyringQueries {
				return float64(queries)
			}
			return float64(unsealed)
		}
	}
	cs = append(cs,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("gossip", "unsealed_messages_total"),
			Help: "Gossip packets and streams that no installed gossip key opened (dropped): a member without the current key, one shut out by a rotation, or not a slicerd member. Logged at most once per 10 s.",
		}, refusals(false)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: metrics.Name("gossip", "keyring_queries_refused_total"),
			Help: "serf keyring queries (list, install, use, remove) that arrived through gossip and were not obeyed: gossip keys change only through 'slicerd keyring'. Anything but 0 means a holder of the gossip key tried. Logged at most once per 10 s.",
		}, refusals(true)),
	)
	if a.distributor != nil {
		cs = append(cs, a.distributor.Collectors()...)
	}
	if a.assigner != nil {
		cs = append(cs, a.assigner.Collectors()...)
	}
	return registerAll(reg, cs...)
}

// registerAll registers every collector with reg, or none: on an error it
// unregisters those it registered.
func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("%w: register metrics: %w; give each agent in a process its own registerer (prometheus.WrapRegistererWith)", ErrConfig, err)
		}
	}
	return nil
}

// membersCollector reports the gossip members by state when scraped.
type membersCollector struct{ peers func() []gossip.Peer }

var membersDesc = prometheus.NewDesc(metrics.Name("gossip", "members"),
	"slicerd gossip members (agents and tasks, this node included) this node knows, by state: alive, leaving, left, or failed (stopped answering probes without leaving).",
	[]string{"state"}, nil)

// memberStates are the states reported, always all of them.
var memberStates = []gossip.Status{gossip.StatusAlive, gossip.StatusLeaving, gossip.StatusLeft, gossip.StatusFailed}

func newMembersCollector(peers func() []gossip.Peer) membersCollector {
	return membersCollector{peers: peers}
}

func (membersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- membersDesc }

func (c membersCollector) Collect(ch chan<- prometheus.Metric) {
	counts := make(map[gossip.Status]int, len(memberStates))
	for _, p := range c.peers() {
		counts[p.Status]++
	}
	for _, s := range memberStates {
		ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(counts[s]), s.String())
	}
}
