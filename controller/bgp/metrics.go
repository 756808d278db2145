package bgp

import (
	"github.com/prometheus/client_golang/prometheus"

	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// Metrics are the speaker's Prometheus metrics (names start lbc_bgp_). All
// methods accept a nil *Metrics, which records nothing.
type Metrics struct {
	up          *prometheus.GaugeVec
	state       *prometheus.GaugeVec
	flaps       *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	announced   *prometheus.GaugeVec
	withdrawals *prometheus.CounterVec
	errors      *prometheus.CounterVec
}

var fsmStates = []bgppkt.FSMState{bgppkt.BGP_FSM_IDLE, bgppkt.BGP_FSM_CONNECT, bgppkt.BGP_FSM_ACTIVE, bgppkt.BGP_FSM_OPENSENT, bgppkt.BGP_FSM_OPENCONFIRM, bgppkt.BGP_FSM_ESTABLISHED}

// NewMetrics registers the speaker's metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		up:          prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_bgp_session_up", Help: "1 if the BGP session to the peer is established."}, []string{"peer"}),
		state:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_bgp_session_state", Help: "1 for the BGP FSM state the session to the peer is in (idle, connect, active, opensent, openconfirm, established)."}, []string{"peer", "state"}),
		flaps:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_bgp_session_flaps_total", Help: "Established BGP sessions that went down, by reason (hold-timer-expired, notification-received, read-failed, ...)."}, []string{"peer", "reason"}),
		refusals:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_bgp_session_refusals_total", Help: "BGP session attempts ended by a NOTIFICATION before establishment, by its error (bad-peer-as, ...) and whether this node sent or received it."}, []string{"peer", "reason", "direction"}),
		announced:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lbc_bgp_vip_announced", Help: "1 if the VIP's prefix is announced, 0 if withdrawn."}, []string{"prefix"}),
		withdrawals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_bgp_withdrawals_total", Help: "VIP withdrawals by reason (no-eligible-backend, datapath, shutdown, removed)."}, []string{"prefix", "reason"}),
		errors:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lbc_bgp_errors_total", Help: "Failed announce or withdraw calls."}, []string{"op"}),
	}
	reg.MustRegister(m.up, m.state, m.flaps, m.refusals, m.announced, m.withdrawals, m.errors)
	return m
}

func (m *Metrics) setState(peer string, st bgppkt.FSMState) {
	if m == nil {
		return
	}
	for _, s := range fsmStates {
		v := 0.0
		if s == st {
			v = 1
		}
		m.state.WithLabelValues(peer, stateName(s)).Set(v)
	}
	up := 0.0
	if st == bgppkt.BGP_FSM_ESTABLISHED {
		up = 1
	}
	m.up.WithLabelValues(peer).Set(up)
}

func (m *Metrics) flap(peer, reason string) {
	if m != nil {
		m.flaps.WithLabelValues(peer, reason).Inc()
	}
}

func (m *Metrics) refused(peer, reason, direction string) {
	if m != nil {
		m.refusals.WithLabelValues(peer, reason, direction).Inc()
	}
}

func (m *Metrics) setVIP(prefix string, on bool) {
	if m == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.announced.WithLabelValues(prefix).Set(v)
}

func (m *Metrics) forgetVIP(prefix string) {
	if m != nil {
		m.announced.DeleteLabelValues(prefix)
	}
}

func (m *Metrics) withdrawal(prefix, reason string) {
	if m != nil {
		m.withdrawals.WithLabelValues(prefix, reason).Inc()
	}
}

func (m *Metrics) error(op string) {
	if m != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}
