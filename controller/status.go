package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/targets"
)

// StatusPath is where the controller serves its Status as JSON; `lbc
// status --controller ADDR` reads it.
const StatusPath = "/v1/status"

// Status is the live view of a running controller.
type Status struct {
	Config       string          `json:"config"`
	Ready        bool            `json:"ready"`
	ReloadError  string          `json:"reloadError,omitempty"`
	CompileError string          `json:"compileError,omitempty"`
	Services     []ServiceStatus `json:"services"`
	Targets      []TargetStatus  `json:"targets"`
	// DigestsAgree: every target holds the same tables (scale-out behind
	// ECMP needs it); a target that differs is marked Diverged.
	DigestsAgree bool         `json:"digestsAgree"`
	Events       []TimedEvent `json:"events"`
	// Announce is the routing announcer's view (lbc run --bgp).
	Announce *AnnounceStatus `json:"announce,omitempty"`
	// Fleet is the exception sharing's view (lbc run --fleet).
	Fleet *FleetStatus `json:"fleet,omitempty"`
	// CountersAt is when the services' and backends' counters were read
	// (every --counter-interval); zero: none read yet.
	CountersAt time.Time `json:"countersAt,omitzero"`
}

// ServiceStatus is one service's decision and backends.
type ServiceStatus struct {
	Name         string                   `json:"name"`
	ID           uint32                   `json:"id"`
	Decision     string                   `json:"decision"`
	Rule         string                   `json:"rule"`
	Epoch        uint32                   `json:"epoch"`
	FailoverSide bool                     `json:"failoverSide"`
	NoBackends   bool                     `json:"noBackends"`
	Eligible     []string                 `json:"eligible"`
	Backends     []BackendStatus          `json:"backends"`
	Counters     *targets.ServiceCounters `json:"counters,omitempty"`
}

// EligibleList is the eligible set as lbc status and the log write it,
// "r1, r2", or "none".
func (s ServiceStatus) EligibleList() string { return list(s.Eligible) }

// BackendStatus is one backend: health, weight, its share of the ring.
type BackendStatus struct {
	Name    string `json:"name"`
	ID      uint32 `json:"id"`
	IP      string `json:"ip"`
	Healthy bool   `json:"healthy"`
	// Weight is the backend's weight in a WEIGHTED_MAGLEV service; nil
	// (absent in JSON) in an unweighted one.
	Weight        *int      `json:"weight,omitempty"`
	Failover      bool      `json:"failover"`
	Draining      bool      `json:"draining"`
	DrainDeadline time.Time `json:"drainDeadline,omitzero"`
	// Deadline is when the entries on the backend stop being valid
	// (DeadlineRule: R-DRAIN, or R-PERSIST-CAP outside the eligible set
	// under loadBalancingScheme INTERNAL); the datapath enforces it.
	Deadline     time.Time                `json:"deadline,omitzero"`
	DeadlineRule string                   `json:"deadlineRule,omitempty"`
	RingShare    float64                  `json:"ringShare"`
	LastProbe    time.Time                `json:"lastProbe,omitzero"`
	LastError    string                   `json:"lastError,omitempty"`
	Note         string                   `json:"note,omitempty"`
	Counters     *targets.BackendCounters `json:"counters,omitempty"`
}

// TargetStatus is one datapath as the controller sees it.
type TargetStatus struct {
	Name            string    `json:"name"`
	Primary         bool      `json:"primary"`
	Digest          string    `json:"digest"`
	Diverged        bool      `json:"diverged"`
	VerifiedDigest  string    `json:"verifiedDigest,omitempty"`
	VerifiedAt      time.Time `json:"verifiedAt,omitzero"`
	Pushes          uint64    `json:"pushes"`
	TotalWrites     uint64    `json:"totalWrites"`
	LastPush        time.Time `json:"lastPush,omitzero"`
	LastPushWrites  int       `json:"lastPushWrites"`
	LastPushSeconds float64   `json:"lastPushSeconds"`
	LastError       string    `json:"lastError,omitempty"`
}

// TimedEvent is an Event with the time it happened.
type TimedEvent struct {
	At time.Time `json:"at"`
	Event
	// Until is a draining backend's deadline (draining-start).
	Until time.Time `json:"until,omitzero"`
}

const maxEvents = 200

// snapshot is what the Run goroutine publishes for readers.
type snapshot struct {
	ready      bool
	ir         *compiler.IR
	tgts       []TargetStatus
	held       []*compiler.IR // per target; digests are computed when read
	events     []TimedEvent
	reloadErr  string
	compileErr string
	weighted   map[string]bool // WEIGHTED_MAGLEV services by name
}

// wallTime is a deadline of the controller's compile clock (time since
// the Unix epoch, targets.WallClock) as a date.
func wallTime(d time.Duration) time.Time { return time.Unix(0, int64(d)).UTC() }

// weightedServices names the WEIGHTED_MAGLEV services of cfg: only their
// backends have a weight (in an unweighted service, weight 0 would read
// as "no new connections").
func weightedServices(cfg *compiler.Config) map[string]bool {
	out := map[string]bool{}
	if cfg == nil {
		return out
	}
	for i := range cfg.Services {
		if cfg.Services[i].Weighted() {
			out[cfg.Services[i].Name] = true
		}
	}
	return out
}

func (c *Controller) recordEvent(e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	te := TimedEvent{At: c.clock.Now(), Event: e}
	if e.Deadline != 0 {
		te.Until = wallTime(e.Deadline)
	}
	c.snap.events = append(c.snap.events, te)
	if n := len(c.snap.events); n > maxEvents {
		c.snap.events = append([]TimedEvent(nil), c.snap.events[n-maxEvents:]...)
	}
}

func (c *Controller) setReloadError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap.reloadErr = ""
	if err != nil {
		c.snap.reloadErr = err.Error()
	}
}

// publish makes the Run goroutine's state visible to Status and metrics.
func (c *Controller) publish(_ []Event, compileErr error) {
	ts := make([]TargetStatus, len(c.tgts))
	held := make([]*compiler.IR, len(c.tgts))
	for i, t := range c.tgts {
		ts[i] = t.st
		held[i] = t.held
	}
	weighted := weightedServices(c.cfg)
	c.m.publish(c.ir, weighted) // before the snapshot: a reader that sees it sees the gauges
	c.mu.Lock()
	c.snap.ready = true
	c.snap.ir = c.ir
	c.snap.tgts = ts
	c.snap.held = held
	c.snap.weighted = weighted
	c.snap.compileErr = ""
	if compileErr != nil {
		c.snap.compileErr = compileErr.Error()
	}
	c.mu.Unlock()
}

// digest returns Digest(ir), computed once per IR: the IRs the controller
// holds are never modified, and several targets share one.
func (c *Controller) digest(ir *compiler.IR) string {
	if ir == nil {
		return ""
	}
	c.dmu.Lock()
	d, ok := c.digests[ir]
	c.dmu.Unlock()
	if ok {
		return d
	}
	d = Digest(ir)
	c.dmu.Lock()
	if c.digests == nil || len(c.digests) > 16 {
		c.digests = map[*compiler.IR]string{}
	}
	c.digests[ir] = d
	c.dmu.Unlock()
	return d
}

// targetStatuses returns the targets' status with digests and divergence.
func (c *Controller) targetStatuses() ([]TargetStatus, bool) {
	c.mu.Lock()
	ts := append([]TargetStatus(nil), c.snap.tgts...)
	held := append([]*compiler.IR(nil), c.snap.held...)
	c.mu.Unlock()
	for i := range ts {
		if i < len(held) {
			ts[i].Digest = c.digest(held[i])
		}
	}
	agree := markDivergence(ts)
	return ts, agree
}

// markDivergence flags targets whose digest differs from the majority's.
func markDivergence(ts []TargetStatus) bool {
	count := map[string]int{}
	for _, t := range ts {
		if t.Digest != "" {
			count[t.Digest]++
		}
	}
	best, n := "", 0
	for d, k := range count {
		if k > n || (k == n && d < best) {
			best, n = d, k
		}
	}
	agree := len(count) <= 1
	for i := range ts {
		ts[i].Diverged = ts[i].Digest != best || (ts[i].VerifiedDigest != "" && ts[i].VerifiedDigest != ts[i].Digest)
		if ts[i].Diverged {
			agree = false
		}
	}
	return agree
}

// Status returns the live view. Counters come from the snapshot of the
// first target whose last counter read worked (else the first that has
// any); Status never waits on a target.
func (c *Controller) Status(ctx context.Context) Status {
	ts, agree := c.targetStatuses()
	c.mu.Lock()
	sn := c.snap
	sn.events = append([]TimedEvent(nil), c.snap.events...)
	c.mu.Unlock()
	out := Status{Config: c.opts.ConfigPath, Ready: sn.ready, ReloadError: sn.reloadErr, CompileError: sn.compileErr, Targets: ts, DigestsAgree: agree, Events: sn.events}
	if out.Events == nil {
		out.Events = []TimedEvent{}
	}
	if a := c.opts.Announcer; a != nil {
		as := a.AnnounceStatus()
		out.Announce = &as
	}
	if f := c.opts.Fleet; f != nil {
		fs := f.FleetStatus()
		out.Fleet = &fs
	}
	var ctrs *targets.Counters
	for _, tc := range bestCounters(c.counterSnapshot()) {
		ctrs, out.CountersAt = &tc.Counters, tc.At
	}
	probes := map[string]health.Status{}
	for _, p := range c.mon.Statuses() {
		probes[p.Key()] = p
	}
	ir := sn.ir
	if ir == nil {
		return out
	}
	for i := range ir.Services {
		s := &ir.Services[i]
		ss := ServiceStatus{Name: s.Name, ID: s.ID, Decision: s.Decision, Rule: s.Rule, Epoch: s.Epoch, FailoverSide: s.FailoverSide, NoBackends: s.NoBackends, Eligible: s.Eligible}
		if ss.Eligible == nil {
			ss.Eligible = []string{}
		}
		share := map[uint32]int{}
		slots := ir.ActiveRing(s)
		for _, b := range slots {
			share[b]++
		}
		for j := range ir.Backends {
			b := &ir.Backends[j]
			if b.ServiceID != s.ID {
				continue
			}
			bs := BackendStatus{Name: b.Name, ID: b.ID, IP: b.IP.String(), Healthy: b.Healthy, Failover: b.Failover, Draining: b.Draining}
			if sn.weighted[s.Name] {
				w := b.Weight
				bs.Weight = &w
			}
			if b.Draining {
				bs.DrainDeadline = wallTime(b.Deadline)
			}
			if b.Deadline != 0 {
				bs.Deadline, bs.DeadlineRule = wallTime(b.Deadline), b.DeadlineRule
			}
			if len(slots) > 0 && !s.NoBackends {
				bs.RingShare = float64(share[b.ID]) / float64(len(slots))
			}
			if p, ok := probes[s.Name+"/"+b.Name]; ok {
				bs.LastProbe, bs.LastError, bs.Note = p.LastProbe, p.LastErr, p.Note
			}
			if ctrs != nil {
				if bc, ok := ctrs.Backends[b.ID]; ok {
					bs.Counters = &bc
				}
			}
			ss.Backends = append(ss.Backends, bs)
		}
		if ctrs != nil {
			if sc, ok := ctrs.Services[s.ID]; ok {
				ss.Counters = &sc
			}
		}
		out.Services = append(out.Services, ss)
	}
	sort.SliceStable(out.Services, func(i, j int) bool { return out.Services[i].ID < out.Services[j].ID })
	return out
}

// bestCounters picks the snapshot Status shows: the first whose last
// read worked, else the first read at all; none when nothing was read.
func bestCounters(snaps []targetCounters) []targetCounters {
	for _, s := range snaps {
		if s.Err == nil && !s.At.IsZero() {
			return []targetCounters{s}
		}
	}
	for _, s := range snaps {
		if !s.At.IsZero() {
			return []targetCounters{s}
		}
	}
	return nil
}

// StatusHandler serves Status as JSON.
func (c *Controller) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := c.Status(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	})
}

// HealthzHandler answers 200 once the first push is done, the last compile
// worked and no target's last push failed, else 503 with the reason. With
// an announcer, it also needs one established routing session (a node
// without one attracts no traffic), and the body lists the sessions and
// announced VIPs.
func (c *Controller) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		ready, compileErr := c.snap.ready, c.snap.compileErr
		var failing []string
		for _, t := range c.snap.tgts {
			if t.LastError != "" {
				failing = append(failing, t.Name+": "+t.LastError)
			}
		}
		c.mu.Unlock()
		var as *AnnounceStatus
		if a := c.opts.Announcer; a != nil {
			x := a.AnnounceStatus()
			as = &x
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case !ready:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("starting: first push not done\n"))
		case compileErr != "":
			// The tables are those of the last good compile: stale.
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("compile failing; the datapaths keep their last tables: " + compileErr + "\n"))
		case len(failing) > 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, f := range failing {
				w.Write([]byte("not programmed: " + f + "\n"))
			}
		case as != nil && !as.Healthy:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(as.Protocol + ": " + as.Problem + "\n"))
		default:
			w.Write([]byte("ok\n"))
		}
		if as != nil {
			writeAnnounce(w, as)
		}
	})
}
