package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/gslb/policy"
)

// Target is one site to poll.
type Target struct {
	Site string
	URL  string
}

// PollerConfig tunes the poller.
type PollerConfig struct {
	// Interval between polls of one site.
	Interval time.Duration
	// Timeout of one poll; a slow site counts as a missed poll, and never
	// delays an answer (answers read the last report).
	Timeout time.Duration
	// UnknownAfter consecutive missed polls make a site unknown.
	UnknownAfter int
	// History is how long new-connection samples are kept (at least the
	// G-5 period).
	History time.Duration
	// Client does the requests; nil means a default client.
	Client *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Poller keeps the latest report of every site.
type Poller struct {
	cfg     PollerConfig
	targets []Target
	mu      sync.RWMutex
	sites   map[string]*siteState
	// polled is closed once Run's first poll of every site has ended.
	polled chan struct{}
}

type siteState struct {
	report  *SiteReport
	okAt    time.Time // last successful poll
	misses  int       // consecutive missed polls
	lastErr error
	polls   uint64
	conn    map[string][]policy.ConnSample
	total   map[string]uint64 // last NewConnectionsTotal per service
}

// NewPoller returns a poller of targets; call Run to start it.
func NewPoller(cfg PollerConfig, targets []Target) *Poller {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 || cfg.Timeout > cfg.Interval {
		cfg.Timeout = cfg.Interval
	}
	if cfg.UnknownAfter <= 0 {
		cfg.UnknownAfter = 3
	}
	if cfg.History < 10*cfg.Interval {
		cfg.History = 10 * cfg.Interval
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Poller{cfg: cfg, targets: targets, sites: map[string]*siteState{}, polled: make(chan struct{})}
	for _, t := range targets {
		p.sites[t.Site] = &siteState{conn: map[string][]policy.ConnSample{}, total: map[string]uint64{}}
	}
	return p
}

// Run polls every site on the interval, each in its own goroutine, until
// ctx ends. The first poll of every site starts at once; Polled is closed
// when they have all ended.
func (p *Poller) Run(ctx context.Context) {
	var wg, first sync.WaitGroup
	first.Add(len(p.targets))
	go func() { first.Wait(); close(p.polled) }()
	for _, t := range p.targets {
		wg.Add(1)
		go func(t Target) {
			defer wg.Done()
			tick := time.NewTicker(p.cfg.Interval)
			defer tick.Stop()
			p.poll(ctx, t)
			first.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				p.poll(ctx, t)
			}
		}(t)
	}
	wg.Wait()
}

// Polled is closed once Run's first poll of every site has ended, with a
// report or a miss (it takes at most the poll timeout): from then on what
// Metrics returns follows the sites' reports. A server that answered
// before it would answer as if no site had reported, then change its
// answer as each first report lands.
func (p *Poller) Polled() <-chan struct{} { return p.polled }

// PollOnce polls every site once, in parallel, and returns when all are done
// (for `lbc gslb explain --poll`).
func (p *Poller) PollOnce(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range p.targets {
		wg.Add(1)
		go func(t Target) { defer wg.Done(); p.poll(ctx, t) }(t)
	}
	wg.Wait()
}

func (p *Poller) poll(ctx context.Context, t Target) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	rep, err := p.fetch(ctx, t.URL)
	now := p.cfg.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.sites[t.Site]
	st.polls++
	if err != nil {
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return // shutting down: not the site's fault
		}
		st.misses++
		st.lastErr = err
		if st.misses == p.cfg.UnknownAfter {
			p.cfg.Log.Warn("site metrics unknown", "site", t.Site, "missed", st.misses, "err", err)
		}
		return
	}
	if st.misses >= p.cfg.UnknownAfter {
		p.cfg.Log.Info("site metrics back", "site", t.Site)
	}
	span := p.cfg.Interval
	if !st.okAt.IsZero() {
		span = now.Sub(st.okAt)
	}
	for _, s := range rep.Services {
		n := s.NewConnectionsPerSec * span.Seconds()
		if s.NewConnectionsTotal != nil {
			prev, had := st.total[s.Name]
			st.total[s.Name] = *s.NewConnectionsTotal
			if had && *s.NewConnectionsTotal >= prev {
				n = float64(*s.NewConnectionsTotal - prev)
			}
		}
		samples := append(st.conn[s.Name], policy.ConnSample{At: now, Span: span, New: n})
		cut := 0
		for cut < len(samples) && !samples[cut].At.After(now.Add(-p.cfg.History)) {
			cut++
		}
		st.conn[s.Name] = append([]policy.ConnSample(nil), samples[cut:]...)
	}
	st.report, st.okAt, st.misses, st.lastErr = &rep, now, 0, nil
}

func (p *Poller) fetch(ctx context.Context, url string) (SiteReport, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return SiteReport{}, err
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return SiteReport{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return SiteReport{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return SiteReport{}, err
	}
	return Decode(body)
}

// Metrics returns what the policy needs about one service at one site. It
// never blocks on the network.
func (p *Poller) Metrics(site, service string) policy.Metrics {
	p.mu.RLock()
	defer p.mu.RUnlock()
	st := p.sites[site]
	if st == nil || st.report == nil || st.misses >= p.cfg.UnknownAfter {
		return policy.Metrics{}
	}
	s, ok := st.report.Service(service)
	if !ok { // the site answers but does not serve it: known, no backend
		return policy.Metrics{Known: true}
	}
	return policy.Metrics{
		Known:           true,
		HealthyBackends: s.HealthyBackends,
		Backends:        s.Backends,
		Sessions:        s.Sessions,
		BitsPerSec:      s.BitsPerSec,
		Conn:            append([]policy.ConnSample(nil), st.conn[service]...),
	}
}

// SiteStatus is one site's polling state, for logs and explain.
type SiteStatus struct {
	Site    string
	Known   bool
	Misses  int
	LastOK  time.Time
	LastErr error
	Polls   uint64
}

// Status returns every site's polling state, by site name.
func (p *Poller) Status() []SiteStatus {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []SiteStatus
	for name, st := range p.sites {
		out = append(out, SiteStatus{Site: name, Known: st.report != nil && st.misses < p.cfg.UnknownAfter, Misses: st.misses, LastOK: st.okAt, LastErr: st.lastErr, Polls: st.polls})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site < out[j].Site })
	return out
}

// FromReport turns a single report (a file given to explain, with no
// history) into policy metrics: its rate stands for the whole G-5 period.
func FromReport(r SiteReport, service string, now time.Time, period time.Duration) policy.Metrics {
	s, ok := r.Service(service)
	if !ok {
		return policy.Metrics{Known: true}
	}
	return policy.Metrics{
		Known: true, HealthyBackends: s.HealthyBackends, Backends: s.Backends,
		Sessions: s.Sessions, BitsPerSec: s.BitsPerSec,
		Conn: []policy.ConnSample{{At: now, Span: period, New: s.NewConnectionsPerSec * period.Seconds()}},
	}
}
