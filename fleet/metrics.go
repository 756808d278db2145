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
		rejected:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_fleet_peers_rejected_total", Help: "Connections to the fleet port rejected before any exception was read: tls (no certificate of the fleet CA, not TLS), unknown-peer (a certificate of the CA for a name fleet.yaml does not list)."}, []string{"reason"}),
		lag:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_fleet_sync_lag_seconds", Help: "For the last snapshot the peer acknowledged: time from the push or refresh that computed it to the peer's ack that it is installed."}, []string{"peer"}),
		connected:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_fleet_peer_connected", Help: "1 while this node's stream to the peer is up."}, []string{"peer"}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.snapshots, m.installed, m.installedTot, m.withdrawn, m.refused, m.rejected, m.lag, m.connected)
	}
	return m
}

func (m *metrics) setLag(peer string, d time.Duration) { m.lag.WithLabelValues(peer).Set(d.Seconds()) }

func (m *metrics) setConnected(peer string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.connected.WithLabelValues(peer).Set(v)
}
