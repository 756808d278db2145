package health

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Target is one backend of one service to probe. The same endpoint in two
// services is two targets (their checks may differ); its health in the
// compiler's State is healthy only when every check passes.
type Target struct {
	Service string
	Backend string
	IP      netip.Addr
	Spec    Spec
}

// Key identifies a target across configuration reloads.
func (t Target) Key() string { return t.Service + "/" + t.Backend }

// Status is what a Monitor knows of one target.
type Status struct {
	Target
	Tracker
	LastProbe time.Time
	// Since is when Healthy last changed: the start of the probe that
	// decided it (R-PERSIST-CAP dates its cap from it).
	Since    time.Time
	LastErr  string // last failed probe's reason ("" after a success)
	Note     string // how the check is done when not as configured
	Probes   uint64
	Failures uint64
}

// Options tune a Monitor. Zero values take the defaults.
type Options struct {
	Clock  Clock  // RealClock
	Prober Prober // &NetProber{}
	// MaxInFlight bounds probes running at once (default 64), so that a
	// thousand backends timing out together cannot exhaust sockets.
	MaxInFlight int
	// Jitter spreads probes: each wait is the interval ± Jitter×interval
	// (default 0.1), and a target's first wait is uniform in (0, interval],
	// so that probes of many backends do not synchronise.
	Jitter float64
	// Rand returns numbers in [0, 1); tests fix it.
	Rand   func() float64
	Logger *slog.Logger
	// OnProbe, when set, sees every probe (for metrics); it must not block.
	OnProbe func(t Target, r Result, took time.Duration)
}

// Monitor probes targets and keeps their health.
type Monitor struct {
	opts    Options
	sem     chan struct{}
	changes chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
	runCtx  context.Context // set while Run runs
	wg      sync.WaitGroup
}

type entry struct {
	t       Target
	st      Status
	cancel  context.CancelFunc
	removed bool
}

// New returns a Monitor with no targets.
func New(opts Options) *Monitor {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.Prober == nil {
		opts.Prober = &NetProber{}
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 64
	}
	if opts.Jitter < 0 || opts.Jitter >= 1 {
		opts.Jitter = 0.1
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Monitor{
		opts:    opts,
		sem:     make(chan struct{}, opts.MaxInFlight),
		changes: make(chan struct{}, 1),
		entries: map[string]*entry{},
	}
}

// Changes is signalled (coalesced: one pending signal at most) whenever a
// target's health or weight changes; read State then.
func (m *Monitor) Changes() <-chan struct{} { return m.changes }

func (m *Monitor) notify() {
	select {
	case m.changes <- struct{}{}:
	default:
	}
}

// SetTargets replaces the probed targets. A target whose key, address and
// check are unchanged keeps its state; new targets are probed once before
// SetTargets returns, so that the first compile sees real health and
// weights. It does not signal Changes for those first results.
func (m *Monitor) SetTargets(ctx context.Context, ts []Target) {
	m.mu.Lock()
	next := make(map[string]*entry, len(ts))
	var fresh []*entry
	for _, t := range ts {
		if e, ok := m.entries[t.Key()]; ok && e.t == t {
			next[t.Key()] = e
			continue
		}
		e := &entry{t: t, st: Status{Target: t}}
		next[t.Key()] = e
		fresh = append(fresh, e)
	}
	for k, e := range m.entries {
		if next[k] != e {
			e.removed = true
			if e.cancel != nil {
				e.cancel()
			}
		}
	}
	m.entries = next
	m.mu.Unlock()

	m.probeEntries(ctx, fresh)

	m.mu.Lock()
	if m.runCtx != nil {
		for _, e := range fresh {
			if !e.removed {
				m.startLocked(e)
			}
		}
	}
	m.mu.Unlock()
}

// ProbeAll probes every target once, now, and returns when all are done.
// Tests and `lbc run --once` use it; Run probes on the schedule.
func (m *Monitor) ProbeAll(ctx context.Context) {
	m.mu.Lock()
	all := make([]*entry, 0, len(m.entries))
	for _, e := range m.entries {
		all = append(all, e)
	}
	m.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].t.Key() < all[j].t.Key() })
	m.probeEntries(ctx, all)
}

func (m *Monitor) probeEntries(ctx context.Context, es []*entry) {
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.probe(ctx, e)
		}()
	}
	wg.Wait()
}

// Run probes every target on its schedule until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	m.mu.Lock()
	m.runCtx = ctx
	for _, e := range m.entries {
		m.startLocked(e)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.runCtx = nil
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *Monitor) startLocked(e *entry) {
	ctx, cancel := context.WithCancel(m.runCtx)
	e.cancel = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.loop(ctx, e)
	}()
}

func (m *Monitor) loop(ctx context.Context, e *entry) {
	iv := e.t.Spec.Interval
	wait := time.Duration(float64(iv) * (1 - m.opts.Rand())) // (0, interval]
	for {
		t := m.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		m.probe(ctx, e)
		wait = time.Duration(float64(iv) * (1 + m.opts.Jitter*(2*m.opts.Rand()-1)))
	}
}

func (m *Monitor) probe(ctx context.Context, e *entry) {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	start := m.opts.Clock.Now()
	r := m.opts.Prober.Probe(ctx, e.t.IP, e.t.Spec)
	<-m.sem
	if ctx.Err() != nil {
		return // cancelled mid-probe: not the backend's fault
	}
	took := m.opts.Clock.Now().Sub(start)
	if m.opts.OnProbe != nil {
		m.opts.OnProbe(e.t, r, took)
	}
	m.record(e, r, start)
}

func (m *Monitor) record(e *entry, r Result, at time.Time) {
	m.mu.Lock()
	if e.removed {
		m.mu.Unlock()
		return
	}
	first := !e.st.Known
	wasHealthy, oldWeight, hadWeight := e.st.Healthy, e.st.Weight, e.st.HasWeight
	changed := e.st.Tracker.Observe(r, e.t.Spec.Healthy, e.t.Spec.Unhealthy)
	if first || e.st.Healthy != wasHealthy {
		e.st.Since = at
	}
	e.st.LastProbe = at
	e.st.Probes++
	prevErr, prevNote := e.st.LastErr, e.st.Note
	e.st.LastErr = ""
	if r.Err != nil {
		e.st.Failures++
		e.st.LastErr = r.Err.Error()
	}
	e.st.Note = r.Note
	st := e.st
	m.mu.Unlock()

	log := m.opts.Logger.With("service", e.t.Service, "backend", e.t.Backend, "ip", e.t.IP.String(), "check", e.t.Spec.Type)
	if st.Note != "" && st.Note != prevNote {
		log.Warn("health check cannot run as configured", "reason", st.Note)
	}
	if st.LastErr != "" && st.LastErr != prevErr {
		// Logged when the reason changes, not on every probe (R-HC-1 wants
		// the backend named; a log line per probe would drown it).
		log.Warn("health probe failed", "err", st.LastErr, "failures_in_a_row", st.Failing, "unhealthy_threshold", e.t.Spec.Unhealthy, "healthy", st.Healthy)
	}
	switch {
	case first:
		log.Info("backend initial health", "healthy", st.Healthy, "weight", weightAttr(st.Tracker))
	case st.Healthy != wasHealthy && st.Healthy:
		log.Info("backend became healthy", "weight", weightAttr(st.Tracker))
	case st.Healthy != wasHealthy:
		log.Warn("backend became unhealthy", "reason", st.LastErr)
	case st.HasWeight && (!hadWeight || st.Weight != oldWeight):
		log.Info("backend weight changed", "from", oldWeight, "to", st.Weight)
	}
	if changed && !first {
		m.notify()
	}
}

func weightAttr(t Tracker) any {
	if !t.HasWeight {
		return "none"
	}
	return t.Weight
}

// Statuses returns every target's status, by key order.
func (m *Monitor) Statuses() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.entries))
	for _, e := range m.entries {
		out = append(out, e.st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// State is the health and weights for the compiler. An endpoint probed by
// several services' checks is healthy only if all pass. A weighted
// endpoint that never answered a good probe gets weight 0, never a guessed
// one (R-HC-1); one that turned unhealthy keeps its last weight, which
// R-ELIG-2/4 read for the unhealthy tiers.
func (m *Monitor) State() compiler.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := compiler.State{}
	// When the endpoint's health last changed: the earliest change of a
	// failing check (it has been unhealthy since the first one failed),
	// or, when every check passes, the latest (it became healthy when the
	// last one recovered).
	type span struct{ fail, pass time.Time }
	since := map[string]*span{}
	for _, e := range m.entries {
		name := e.t.Backend
		healthy := e.st.Healthy || !e.st.Known
		if !healthy || !st.IsHealthy(name) {
			st.SetHealthy(name, false)
		} else {
			st.SetHealthy(name, true)
		}
		if e.t.Spec.Weighted {
			w := 0
			if e.st.HasWeight {
				w = e.st.Weight
			}
			st.SetWeight(name, w)
		}
		if e.st.Since.IsZero() {
			continue
		}
		sp := since[name]
		if sp == nil {
			sp = &span{}
			since[name] = sp
		}
		switch {
		case !healthy && (sp.fail.IsZero() || e.st.Since.Before(sp.fail)):
			sp.fail = e.st.Since
		case healthy && e.st.Since.After(sp.pass):
			sp.pass = e.st.Since
		}
	}
	for name, sp := range since {
		t := sp.pass
		if !st.IsHealthy(name) {
			t = sp.fail
		}
		if !t.IsZero() {
			st.SetSince(name, time.Duration(t.UnixNano()))
		}
	}
	return st
}
