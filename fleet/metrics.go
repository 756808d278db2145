package fleet

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the fleet's Prometheus metrics (docs/fleet.md).
type metrics struct {
	published    prometheus.Gauge
	snapshots    prometheus.Counter
	installed    *prometheus.GaugeVec
	installedTot *prometheus.CounterVec
	withdrawn    *prometheus.CounterVec
	refused      *prometheus.CounterVec
	buffered     *prometheus.GaugeVec
	rejected     *prometheus.CounterVec
	lag          *prometheus.GaugeVec
	connected    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		published:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "lbc_fleet_exceptions_published", Help: "Exceptions in the last snapshot this node computed from its conntrack and sent to its peers (R-FLEET)."}),
		snapshots:    prometheus.NewCounter(prometheus.CounterOpts{Name: "lbc_fleet_snapshots_published_total", Help: "Snapshots of this node's exceptions computed (after pushes that change a ring or a backend, and every refresh)."}),
		installed:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_fleet_exceptions_installed", Help: "The peer's exceptions this node holds installed in its datapath's conntrack."}, []string{"peer"}),
		installedTot: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_fleet_exceptions_installed_total", Help: "Exceptions of the peer written into this node's conntrack."}, []string{"peer"}),
		withdrawn:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_fleet_exceptions_withdrawn_total", Help: "Installed exceptions removed because the peer no longer holds them (aged out or ended there)."}, []string{"peer"}),
		refused:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_fleet_exceptions_refused_total", Help: "The peer's exceptions refused, by reason: unknown-service, unknown-vip, unknown-backend, backend-address, tracking, expired, malformed; over-bound and rate count the exceptions of a snapshot refused whole."}, []string{"peer", "reason"}),
		buffered:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_fleet_exceptions_buffered", Help: "Exceptions of the peer's snapshot in transit, held until its last batch arrives: at most maxExceptions (one Sync stream per peer)."}, []string{"peer"}),
		rejected:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_fleet_peers_rejected_total", Help: "Connections and Sync streams to the fleet port rejected before any exception was read: tls (no certificate of the fleet CA, not TLS), timeout (no TLS handshake within the handshake timeout), busy (too many handshakes at once), unknown-peer (a certificate of the CA for a name fleet.yaml does not list), second-stream (the peer has a stream open already)."}, []string{"reason"}),
		lag:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_fleet_sync_lag_seconds", Help: "For the last snapshot the peer acknowledged: time from the push or refresh that computed it to the peer's ack that it is installed."}, []string{"peer"}),
		connected:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_fleet_peer_connected", Help: "1 while this node's stream to the peer is up."}, []string{"peer"}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.snapshots, m.installed, m.installedTot, m.withdrawn, m.refused, m.buffered, m.rejected, m.lag, m.connected)
	}
	return m
}

// RegisterMetrics registers the fleet's metric families in reg, as New
// does, without a node: for what lists every family lbc run can export
// (the test of packaging/grafana and packaging/prometheus).
func RegisterMetrics(reg prometheus.Registerer) { newMetrics(reg) }

// zero creates every series whose labels are known at 0, so that a
// counter's first event is an increase (Prometheus' increase() and
// rate() see nothing of a series' first sample).
func (m *metrics) zero(peers []Peer) {
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(r)
	}
	for _, p := range peers {
		for _, r := range refuseReasons {
			m.refused.WithLabelValues(p.Name, r)
		}
		m.installed.WithLabelValues(p.Name)
		m.installedTot.WithLabelValues(p.Name)
		m.withdrawn.WithLabelValues(p.Name)
		m.buffered.WithLabelValues(p.Name)
		m.lag.WithLabelValues(p.Name)
		m.connected.WithLabelValues(p.Name)
	}
}

func (m *metrics) setLag(peer string, d time.Duration) { m.lag.WithLabelValues(peer).Set(d.Seconds()) }

func (m *metrics) setConnected(peer string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.connected.WithLabelValues(peer).Set(v)
}
