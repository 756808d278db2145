package controller

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller/health"
)

// Metrics are the controller's Prometheus metrics (names start lbc_). All
// methods accept a nil *Metrics, which records nothing.
type Metrics struct {
	reg *prometheus.Registry
	// own is every collector NewMetrics registered, for DescribeAll.
	own []prometheus.Collector

	backendHealthy *prometheus.GaugeVec
	backendWeight  *prometheus.GaugeVec
	eligible       *prometheus.GaugeVec
	decision       *prometheus.GaugeVec
	epoch          *prometheus.GaugeVec
	failovers      *prometheus.CounterVec
	failbacks      *prometheus.CounterVec
	events         *prometheus.CounterVec
	pushes         *prometheus.CounterVec
	entities       *prometheus.CounterVec
	pushSeconds    *prometheus.HistogramVec
	errors         *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	probes         *prometheus.CounterVec
	probeSeconds   *prometheus.HistogramVec
	primary        *prometheus.GaugeVec
	services       prometheus.Gauge

	mu         sync.Mutex
	ir         *compiler.IR
	statusFn   func() []TargetStatus
	countersFn func() []targetCounters
	// Label sets of the last publish, to delete what is gone.
	prevSvcs      map[string]bool
	prevWeights   map[[2]string]bool
	prevBackends  map[[2]string]bool
	prevDecisions map[[3]string]bool
}

// NewMetrics registers the controller's metrics (and the Go runtime's) in
// a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		m.register(v)
		return v
	}
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.register(v)
		return v
	}
	m.backendHealthy = g("lbc_backend_healthy", "1 if the backend passes its health check (after thresholds).", "service", "backend")
	m.backendWeight = g("lbc_backend_weight", "Weight of the backend of a WEIGHTED_MAGLEV service (from X-Load-Balancing-Endpoint-Weight); absent for backends of unweighted services.", "service", "backend")
	m.eligible = g("lbc_service_eligible_backends", "Backends that may take new connections (R-ELIG).", "service")
	m.decision = g("lbc_service_decision", "1 for the service's current eligible-set decision (primary, failover, last-resort, drop) and the rule that chose it.", "service", "decision", "rule")
	m.epoch = g("lbc_service_epoch", "Conntrack epoch of the service; it moves on failover/failback with disableConnectionDrainOnFailover (R-EPOCH).", "service")
	m.failovers = c("lbc_failovers_total", "Switches of the eligible set to failover backends (R-ELIG-5).", "service")
	m.failbacks = c("lbc_failbacks_total", "Switches of the eligible set back to primaries (R-ELIG-5).", "service")
	m.events = c("lbc_events_total", "Controller events by kind (failover, failback, epoch, draining-start, ...).", "kind")
	m.pushes = c("lbc_pushes_total", "Pushes of a non-empty diff to a target.", "target", "target_instance", "result")
	m.entities = c("lbc_push_entities_total", "Table entries written, by table and operation.", "target", "target_instance", "table", "op")
	m.pushSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lbc_push_duration_seconds",
		Help:    "Time to apply one diff to a target.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"target", "target_instance"})
	m.register(m.pushSeconds)
	m.errors = c("lbc_errors_total", "Errors by kind: "+strings.Join(errorKinds, ", ")+".", "kind")
	m.reloads = c("lbc_config_reloads_total", "Configuration reloads by result (applied, rejected).", "result")
	m.probes = c("lbc_health_probes_total", "Health probes by service and result (ok, failed).", "service", "result")
	m.probeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lbc_health_probe_duration_seconds",
		Help:    "Duration of health probes by check type.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}, []string{"type"})
	m.register(m.probeSeconds)
	m.primary = g("lbc_target_primary", "1 if this controller may write the target: always for a target it alone writes (sim, xdp), the P4Runtime arbitration's answer for a shared switch.", "target", "target_instance")
	m.services = prometheus.NewGauge(prometheus.GaugeOpts{Name: "lbc_config_services", Help: "Services in the running configuration."})
	m.register(m.services)
	m.register(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.register(datapathCollector{m})
	// Counters exist from the start, at zero, so that rate() and alerts
	// see the first increment.
	for _, k := range errorKinds {
		m.errors.WithLabelValues(k)
	}
	for _, r := range []string{"applied", "rejected"} {
		m.reloads.WithLabelValues(r)
	}
	for _, k := range EventKinds {
		m.events.WithLabelValues(k)
	}
	return m
}

func (m *Metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.own = append(m.own, cs...)
}

// DescribeAll sends the description of every metric NewMetrics
// registered (the Go runtime's and the process's too), including vectors
// that have no series yet, which a scrape leaves out: the test of
// packaging/grafana and packaging/prometheus checks the families they
// query against it. Not those that other packages register in Registry
// (bgp.NewMetrics, fleet.RegisterMetrics).
func (m *Metrics) DescribeAll(ch chan<- *prometheus.Desc) {
	for _, c := range m.own {
		c.Describe(ch)
	}
	for _, d := range datapathDescs {
		ch <- d
	}
}

// errorKinds are the values of lbc_errors_total's kind label.
var errorKinds = []string{
	"compile",     // the configuration and health did not compile
	"push",        // a target refused a diff
	"read",        // a target could not be read back
	"commit",      // a target could not store names
	"drift",       // a target's tables differed from what was pushed
	"config-read", // the watched configuration file could not be read
	"counters",    // a read of a target's counters failed (or was cut short)
	"connection",  // a switch's session was lost (it died, hung or was cut off)
	"program",     // a switch without lbc's pipeline could not be given it again
	"capacity",    // a push refused before writing: the tables cannot hold the change while it is made
}

// targetLabels splits a target's name ("xdp eth1", "bmv2 127.0.0.1:9559",
// "sim") into the target label, its kind, and target_instance, where it is
// ("" for a lone sim): a label value with a space is awkward in queries.
func targetLabels(name string) (kind, instance string) {
	kind, instance, _ = strings.Cut(name, " ")
	return kind, instance
}

// addTarget creates a target's series: push counters at zero and whether
// this controller may write it.
func (m *Metrics) addTarget(name string, primary bool) {
	if m == nil {
		return
	}
	k, i := targetLabels(name)
	for _, r := range []string{"ok", "error"} {
		m.pushes.WithLabelValues(k, i, r)
	}
	m.setPrimary(name, primary)
}

// Registry is where the metrics are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// watch makes scrapes serve the targets' status and counter snapshots
// (neither waits on a target).
func (m *Metrics) watch(status func() []TargetStatus, counters func() []targetCounters) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.statusFn, m.countersFn = status, counters
	m.mu.Unlock()
}

func (m *Metrics) setConfig(cfg *compiler.Config) {
	if m == nil {
		return
	}
	m.services.Set(float64(len(cfg.Services)))
}

func (m *Metrics) observeProbe(t health.Target, r health.Result, took time.Duration) {
	if m == nil {
		return
	}
	res := "ok"
	if !r.OK {
		res = "failed"
	}
	m.probes.WithLabelValues(t.Service, res).Inc()
	m.probeSeconds.WithLabelValues(t.Spec.Type).Observe(took.Seconds())
}

func (m *Metrics) error(kind string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(kind).Inc()
}

func (m *Metrics) reload(result string) {
	if m == nil {
		return
	}
	m.reloads.WithLabelValues(result).Inc()
}

func (m *Metrics) setPrimary(target string, p bool) {
	if m == nil {
		return
	}
	v := 0.0
	if p {
		v = 1
	}
	k, i := targetLabels(target)
	m.primary.WithLabelValues(k, i).Set(v)
}

func (m *Metrics) event(e Event) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(e.Kind).Inc()
	switch e.Kind {
	case EventFailover:
		m.failovers.WithLabelValues(e.Service).Inc()
	case EventFailback:
		m.failbacks.WithLabelValues(e.Service).Inc()
	}
}

// push records one push; a push cut short (the session with the switch
// ended, or the controller stopped) failed, but the target refused
// nothing: it is not an error of kind push (a lost session counts as
// kind connection where it is found).
func (m *Metrics) push(target string, d compiler.Diff, took time.Duration, err error, cutShort bool) {
	if m == nil {
		return
	}
	res := "ok"
	if err != nil {
		res = "error"
		if !cutShort {
			m.errors.WithLabelValues("push").Inc()
		}
	}
	tk, ti := targetLabels(target)
	m.pushes.WithLabelValues(tk, ti, res).Inc()
	m.pushSeconds.WithLabelValues(tk, ti).Observe(took.Seconds())
	for table, n := range d.Counts() {
		for op, k := range n {
			if k > 0 {
				m.entities.WithLabelValues(tk, ti, table, compiler.Op(op).String()).Add(float64(k))
			}
		}
	}
}

// publish sets the gauges from the IR; weighted names the WEIGHTED_MAGLEV
// services (only their backends have a weight). Series of services and
// backends that are gone are deleted after the new values are set, so that
// a concurrent scrape never sees a gap.
func (m *Metrics) publish(ir *compiler.IR, weighted map[string]bool) {
	if m == nil || ir == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ir = ir
	svcs := map[string]bool{}
	bes := map[[2]string]bool{}
	weights := map[[2]string]bool{}
	decisions := map[[3]string]bool{}
	for i := range ir.Services {
		s := &ir.Services[i]
		svcs[s.Name] = true
		decisions[[3]string{s.Name, s.Decision, s.Rule}] = true
		m.eligible.WithLabelValues(s.Name).Set(float64(len(s.Eligible)))
		m.decision.WithLabelValues(s.Name, s.Decision, s.Rule).Set(1)
		m.epoch.WithLabelValues(s.Name).Set(float64(s.Epoch))
		m.failovers.WithLabelValues(s.Name) // at zero until the first
		m.failbacks.WithLabelValues(s.Name)
	}
	for j := range ir.Backends {
		b := &ir.Backends[j]
		s := ir.Service(b.ServiceID)
		if s == nil {
			continue
		}
		bes[[2]string{s.Name, b.Name}] = true
		h := 0.0
		if b.Healthy {
			h = 1
		}
		m.backendHealthy.WithLabelValues(s.Name, b.Name).Set(h)
		if weighted[s.Name] {
			weights[[2]string{s.Name, b.Name}] = true
			m.backendWeight.WithLabelValues(s.Name, b.Name).Set(float64(b.Weight))
		}
	}
	for k := range m.prevSvcs {
		if !svcs[k] {
			m.eligible.DeleteLabelValues(k)
			m.epoch.DeleteLabelValues(k)
			m.failovers.DeleteLabelValues(k)
			m.failbacks.DeleteLabelValues(k)
		}
	}
	for k := range m.prevWeights {
		if !weights[k] {
			m.backendWeight.DeleteLabelValues(k[0], k[1])
		}
	}
	for k := range m.prevDecisions {
		if !decisions[k] {
			m.decision.DeleteLabelValues(k[0], k[1], k[2])
		}
	}
	for k := range m.prevBackends {
		if !bes[k] {
			m.backendHealthy.DeleteLabelValues(k[0], k[1])
		}
	}
	m.prevSvcs, m.prevBackends, m.prevDecisions, m.prevWeights = svcs, bes, decisions, weights
}

// datapathCollector serves the targets' counters from the controller's
// snapshot (read every --counter-interval), never from the datapath.
type datapathCollector struct{ m *Metrics }

// The datapath series carry the target's kind and instance (targetLabels).
var (
	dpPackets   = prometheus.NewDesc("lbc_datapath_packets_total", "Packets the datapath matched to the service.", []string{"target", "target_instance", "service"}, nil)
	dpBytes     = prometheus.NewDesc("lbc_datapath_bytes_total", "Bytes the datapath matched to the service.", []string{"target", "target_instance", "service"}, nil)
	dpNewConns  = prometheus.NewDesc("lbc_datapath_new_connections_total", "New connections (selections from the ring) per service.", []string{"target", "target_instance", "service"}, nil)
	dpICMPMiss  = prometheus.NewDesc("lbc_datapath_icmp_error_misses_total", "ICMP errors for the service that quoted a flow with no conntrack entry, so went to the backend the ring chose for it, counted apart from new connections (R-CT-3; the P4 programs' service_icmp_error_misses; 0 where the datapath does not count them).", []string{"target", "target_instance", "service"}, nil)
	dpSessions  = prometheus.NewDesc("lbc_datapath_sessions", "Live conntrack entries per service, where the datapath counts them (XDP: a walk of its conntrack at each read of the counters, every --counter-interval; absent where the datapath cannot count them).", []string{"target", "target_instance", "service"}, nil)
	dpBePkts    = prometheus.NewDesc("lbc_datapath_backend_packets_total", "Packets sent to the backend.", []string{"target", "target_instance", "service", "backend"}, nil)
	dpBeConns   = prometheus.NewDesc("lbc_datapath_backend_new_connections_total", "New connections sent to the backend.", []string{"target", "target_instance", "service", "backend"}, nil)
	dpDrops     = prometheus.NewDesc("lbc_datapath_drops_total", "Packets dropped, by reason.", []string{"target", "target_instance", "reason"}, nil)
	dpPunts     = prometheus.NewDesc("lbc_datapath_fallback_punts_total", "Packets sent out the fallback port (fragments, unparsed protocols).", []string{"target", "target_instance"}, nil)
	dpTooBig    = prometheus.NewDesc("lbc_datapath_too_big_total", "Packets answered with ICMP fragmentation needed / packet too big instead of forwarded (R-MTU).", []string{"target", "target_instance"}, nil)
	dpCTRefused = prometheus.NewDesc("lbc_datapath_ct_refused_total", "Packets of flows refused a conntrack entry because every slot they may take held a live entry, forwarded by the ring without one (R-CT-CAP; the TNA program's ct_refused; absent where the datapath has no such counter).", []string{"target", "target_instance"}, nil)
	tgtDiverged = prometheus.NewDesc("lbc_target_diverged", "1 if the target's tables differ from the other targets' or from what was last read back.", []string{"target", "target_instance"}, nil)
	tgtDigest   = prometheus.NewDesc("lbc_target_digest_info", "The digest of the tables the target holds, as a label (equal digests: same backend for every new flow).", []string{"target", "target_instance", "digest"}, nil)
	dpUp        = prometheus.NewDesc("lbc_datapath_counters_up", "1 if the last read of the target's counters (every --counter-interval) worked, 0 if it failed (each failure also counts in lbc_errors_total{kind=\"counters\"}); the datapath series keep the last values read.", []string{"target", "target_instance"}, nil)
	dpAge       = prometheus.NewDesc("lbc_datapath_counters_age_seconds", "How old the target's datapath series are: seconds since the last read of its counters that worked (absent until one has).", []string{"target", "target_instance"}, nil)
)

// datapathDescs is every description above, for DescribeAll: the
// collector itself is unchecked and describes nothing.
var datapathDescs = []*prometheus.Desc{dpPackets, dpBytes, dpNewConns, dpICMPMiss, dpSessions, dpBePkts, dpBeConns, dpDrops, dpPunts, dpTooBig, dpCTRefused, tgtDiverged, tgtDigest, dpUp, dpAge}

func (datapathCollector) Describe(chan<- *prometheus.Desc) {} // unchecked: series depend on the IR

func (d datapathCollector) Collect(ch chan<- prometheus.Metric) {
	d.m.mu.Lock()
	ir, countersFn, statusFn := d.m.ir, d.m.countersFn, d.m.statusFn
	d.m.mu.Unlock()
	if ir == nil {
		return
	}
	if statusFn != nil {
		for _, t := range statusFn() {
			v := 0.0
			if t.Diverged {
				v = 1
			}
			k, i := targetLabels(t.Name)
			ch <- prometheus.MustNewConstMetric(tgtDiverged, prometheus.GaugeValue, v, k, i)
			ch <- prometheus.MustNewConstMetric(tgtDigest, prometheus.GaugeValue, 1, k, i, t.Digest)
		}
	}
	svcName := map[uint32]string{}
	for _, s := range ir.Services {
		svcName[s.ID] = s.Name
	}
	type be struct{ svc, name string }
	beName := map[uint32]be{}
	for _, b := range ir.Backends {
		beName[b.ID] = be{svcName[b.ServiceID], b.Name}
	}
	if countersFn == nil {
		return
	}
	for _, tc := range countersFn() {
		if tc.At.IsZero() && tc.Err == nil {
			continue // not read yet (or never: --counter-interval 0)
		}
		k, i := targetLabels(tc.Name)
		c := tc.Counters
		up := 0.0
		if tc.Err == nil && !tc.At.IsZero() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(dpUp, prometheus.GaugeValue, up, k, i)
		if tc.At.IsZero() {
			continue // never read: no series rather than false zeros
		}
		ch <- prometheus.MustNewConstMetric(dpAge, prometheus.GaugeValue, tc.Age.Seconds(), k, i)
		for id, s := range c.Services {
			n, ok := svcName[id]
			if !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(dpPackets, prometheus.CounterValue, float64(s.Packets), k, i, n)
			ch <- prometheus.MustNewConstMetric(dpBytes, prometheus.CounterValue, float64(s.Bytes), k, i, n)
			ch <- prometheus.MustNewConstMetric(dpNewConns, prometheus.CounterValue, float64(s.NewConnections), k, i, n)
			ch <- prometheus.MustNewConstMetric(dpICMPMiss, prometheus.CounterValue, float64(s.ICMPErrorMisses), k, i, n)
			if s.HasSessions { // a datapath that cannot count them exports none, not a false 0
				ch <- prometheus.MustNewConstMetric(dpSessions, prometheus.GaugeValue, float64(s.Sessions), k, i, n)
			}
		}
		for id, b := range c.Backends {
			n, ok := beName[id]
			if !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(dpBePkts, prometheus.CounterValue, float64(b.Packets), k, i, n.svc, n.name)
			ch <- prometheus.MustNewConstMetric(dpBeConns, prometheus.CounterValue, float64(b.NewConnections), k, i, n.svc, n.name)
		}
		for reason, v := range c.Drops {
			ch <- prometheus.MustNewConstMetric(dpDrops, prometheus.CounterValue, float64(v), k, i, reason)
		}
		ch <- prometheus.MustNewConstMetric(dpPunts, prometheus.CounterValue, float64(c.FallbackPunts), k, i)
		ch <- prometheus.MustNewConstMetric(dpTooBig, prometheus.CounterValue, float64(c.TooBig), k, i)
		if c.HasCTRefused { // a datapath without the counter exports none, not a false 0
			ch <- prometheus.MustNewConstMetric(dpCTRefused, prometheus.CounterValue, float64(c.CTRefused), k, i)
		}
	}
}
