package proxy

import "github.com/prometheus/client_golang/prometheus"

// Label values of the proxy's metrics.
const (
	listenerClient = "client"
	listenerPeer   = "peer"

	forwardedLocal  = "local"
	forwardedLeader = "leader"

	// refusedCap: over --proxy-max-connections.
	refusedCap = "cap"
	// refusedNoLeader: no leader known within the wait.
	refusedNoLeader = "no_leader"
	// refusedUnreachable: the app, or the leader's proxy, did not accept
	// within the wait.
	refusedUnreachable = "unreachable"
	// refusedNotLeader: a follower's connection on the peer port of a pod
	// that does not lead.
	refusedNotLeader = "not_leader"

	// drainEnded: every connection of the term ended within the drain;
	// drainCut: the drain ran out (or the release was given up), and the
	// connections still open were closed with the term.
	drainEnded = "ended"
	drainCut   = "cut"

	directionToUpstream = "to_upstream"
	directionToClient   = "to_client"
)

// Metrics are the proxy's Prometheus collectors. The caller adds the lease
// and lease_namespace labels when it registers them.
type Metrics struct {
	accepted       *prometheus.CounterVec
	forwarded      *prometheus.CounterVec
	waiting        prometheus.Gauge
	refused        *prometheus.CounterVec
	closedOnChange prometheus.Counter
	drains         *prometheus.CounterVec
	bytes          *prometheus.CounterVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_proxy_connections_accepted_total",
			Help: "Connections the proxy accepted, by listener: client (--proxy-address) or peer (a follower's proxy, on --proxy-peer-address).",
		}, []string{"listener"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_proxy_connections_forwarded_total",
			Help: "Connections forwarded, by destination: local (this pod leads: its app) or leader (the leader's proxy).",
		}, []string{"to"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leader_elector_proxy_connections_waiting",
			Help: "Client connections waiting for a leader that can be reached.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_proxy_connections_refused_total",
			Help: "Connections closed without being forwarded, by reason: cap, no_leader, unreachable, not_leader.",
		}, []string{"reason"}),
		closedOnChange: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_proxy_connections_closed_on_leader_change_total",
			Help: "Forwarded connections closed because the term they were forwarded in ended.",
		}),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_proxy_drains_total",
			Help: "Graceful ends of this pod's terms that waited for its app's connections (--proxy-drain), by result: ended (all of them ended) or cut (the drain ran out; the rest were closed).",
		}, []string{"result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_proxy_bytes_total",
			Help: "Bytes forwarded, by direction (to_upstream, to_client), counted when each direction of a connection ends.",
		}, []string{"direction"}),
	}
	// Every label value from 0, so that a rate over them starts at 0.
	for _, l := range []string{listenerClient, listenerPeer} {
		m.accepted.WithLabelValues(l)
	}
	for _, to := range []string{forwardedLocal, forwardedLeader} {
		m.forwarded.WithLabelValues(to)
	}
	for _, r := range []string{refusedCap, refusedNoLeader, refusedUnreachable, refusedNotLeader} {
		m.refused.WithLabelValues(r)
	}
	for _, r := range []string{drainEnded, drainCut} {
		m.drains.WithLabelValues(r)
	}
	for _, d := range []string{directionToUpstream, directionToClient} {
		m.bytes.WithLabelValues(d)
	}
	return m
}

// Collectors returns the proxy's collectors, for registration.
func (p *Proxy) Collectors() []prometheus.Collector {
	m := p.metrics
	return []prometheus.Collector{m.accepted, m.forwarded, m.waiting, m.refused, m.closedOnChange, m.drains, m.bytes}
}
