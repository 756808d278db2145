package gslb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/gslb/geo"
	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/lbc-dev/lbc/gslb/proximity"
)

// RTTSource measures each site's RTT to a resolver (G-3).
type RTTSource interface {
	Measure(ctx context.Context, resolver netip.Addr) (map[string]time.Duration, string)
}

// Locator places an address on the map (G-4).
type Locator interface {
	Locate(addr netip.Addr) (policy.Point, netip.Prefix, bool, error)
}

// Options are the engine's edges; zero values mean "live from the config".
type Options struct {
	// StaticMetrics replaces polling with fixed reports by site name
	// (explain --metrics); a site missing from it is unknown.
	StaticMetrics map[string]metrics.SiteReport
	// NoPoll leaves the poller out (explain without --poll).
	NoPoll bool
	// RTT replaces the sites' RTT endpoints; NoProbe turns G-3's probes
	// off (G-3 is then skipped with a note).
	RTT     RTTSource
	NoProbe bool
	// Geo replaces opening policy.geoProximity.database.
	Geo    Locator
	Client *http.Client
	Now    func() time.Time
	Log    *slog.Logger
}

// Engine answers which site and which addresses serve a name.
type Engine struct {
	cfg    *Config
	pol    policy.Config
	names  map[string]*NameConfig
	sites  map[string]*SiteConfig
	poller *metrics.Poller
	rtt    RTTSource
	geo    Locator
	noGeo  string // why G-4 has no database, when it has none
	static map[string]metrics.SiteReport
	now    func() time.Time
	log    *slog.Logger
	closer io.Closer

	mu    sync.Mutex
	state map[string]policy.State
}

// New builds an engine; Run starts its poller.
func New(cfg *Config, o Options) (*Engine, error) {
	e := &Engine{cfg: cfg, pol: cfg.PolicyConfig(), names: map[string]*NameConfig{}, sites: map[string]*SiteConfig{},
		static: o.StaticMetrics, now: o.Now, log: o.Log, state: map[string]policy.State{}}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := e.pol.Check(); err != nil {
		return nil, err
	}
	for i := range cfg.Names {
		e.names[Fqdn(cfg.Names[i].Name)] = &cfg.Names[i]
	}
	for i := range cfg.Sites {
		e.sites[cfg.Sites[i].Name] = &cfg.Sites[i]
	}
	client := o.Client
	if client == nil {
		client = &http.Client{}
	}
	if e.static == nil && !o.NoPoll {
		var targets []metrics.Target
		for _, s := range cfg.Sites {
			if s.Metrics != "" {
				targets = append(targets, metrics.Target{Site: s.Name, URL: s.Metrics})
			}
		}
		if len(targets) > 0 {
			period := cfg.Policy.ConnectionLoad.Period.D()
			e.poller = metrics.NewPoller(metrics.PollerConfig{Interval: cfg.Metrics.Interval.D(), Timeout: cfg.Metrics.Timeout.D(),
				UnknownAfter: cfg.Metrics.UnknownAfter, History: 2 * period, Client: client, Now: o.Now, Log: e.log}, targets)
		}
	}
	if e.pol.Has(policy.NetworkProximity) && !o.NoProbe {
		e.rtt = o.RTT
		if e.rtt == nil {
			np := cfg.Policy.NetworkProximity
			var ss []proximity.Site
			for _, s := range cfg.Sites {
				ss = append(ss, proximity.Site{Name: s.Name, URL: RTTURL(s)})
			}
			e.rtt = proximity.NewSites(proximity.SitesConfig{Budget: np.Budget.D(), ProbeTimeout: np.Timeout.D(), CacheTTL: np.CacheTTL.D(),
				PrefixV4: np.IPv4Bits, PrefixV6: np.IPv6Bits, Method: proximity.Method(np.Method), TCPPort: np.TCPPort, Client: client, Now: o.Now}, ss)
		}
	}
	if e.pol.Has(policy.GeoProximity) {
		e.geo = o.Geo
		if e.geo == nil {
			path := cfg.Policy.GeoProximity.Database
			db, err := geo.Open(path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				// Like any step without its data, G-4 passes the
				// candidates on; the server still answers.
				e.noGeo = fmt.Sprintf("no geo database: %s does not exist", path)
				e.log.Warn("geo-proximity (G-4) is skipped on every query: its database does not exist; set policy.geoProximity.database or --geo-db (lbc gslb demo-geodb writes a demo one)", "database", path)
			case err != nil:
				return nil, fmt.Errorf("policy.geoProximity.database: %w", err)
			default:
				e.geo, e.closer = db, db
			}
		}
	}
	return e, nil
}

// RTTURL is where a site serves RTTs: its rtt URL, else its metrics URL's
// host with proximity.Path.
func RTTURL(s SiteConfig) string {
	if s.RTT != "" {
		return s.RTT
	}
	u, err := url.Parse(s.Metrics)
	if err != nil {
		return ""
	}
	u.Path, u.RawQuery = proximity.Path, ""
	return u.String()
}

// Run polls the sites until ctx ends.
func (e *Engine) Run(ctx context.Context) {
	if e.poller != nil {
		e.poller.Run(ctx)
	}
}

// Polled is closed once Run's first poll of every site has ended (at
// once when the engine polls nothing): a server answers from then on.
func (e *Engine) Polled() <-chan struct{} {
	if e.poller == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return e.poller.Polled()
}

// PollOnce polls every site once (explain --poll).
func (e *Engine) PollOnce(ctx context.Context) {
	if e.poller != nil {
		e.poller.PollOnce(ctx)
	}
}

// Poller returns the metrics poller, nil when there is none.
func (e *Engine) Poller() *metrics.Poller { return e.poller }

// Notes says what the engine runs without, e.g. G-4 without its
// database; nil when it has everything the policy asks for.
func (e *Engine) Notes() []string {
	if e.noGeo != "" {
		return []string{"G-4 geo-proximity is skipped on every query: " + e.noGeo}
	}
	return nil
}

// Close releases the geolocation database.
func (e *Engine) Close() error {
	if e.closer != nil {
		return e.closer.Close()
	}
	return nil
}

// Config returns the configuration the engine runs.
func (e *Engine) Config() *Config { return e.cfg }

// Zone returns the zone that holds fqdn, nil when none does.
func (e *Engine) Zone(fqdn string) *Zone { return e.cfg.zoneOf(fqdn) }

// Name returns the configured name fqdn, nil when it is not one.
func (e *Engine) Name(fqdn string) *NameConfig { return e.names[fqdn] }

// Query is one question to the engine.
type Query struct {
	Name string // canonical (Fqdn)
	// Family is 4 (A) or 6 (AAAA); 0 (ANY) considers every address and
	// answers with up to the name's answers addresses of each family.
	Family   int
	Resolver netip.Addr
	// ECS is the EDNS Client Subnet, if the query carried one.
	ECS netip.Prefix
	// DryRun leaves the selection state as it was (explain).
	DryRun bool
}

// Result is the engine's answer and how it got there.
type Result struct {
	Query    Query
	Name     *NameConfig
	Decision policy.Decision
	// Sites holds the sites whose addresses are in Addrs, in order.
	Sites []string
	Addrs []netip.Addr
	// ECSScope is the Client Subnet scope prefix length to return: the
	// source length when the answer depended on the client's location.
	ECSScope int
	Input    policy.Input

	connPeriod time.Duration
}

// Select runs the chain for q. It waits at most the RTT budget.
func (e *Engine) Select(ctx context.Context, q Query) Result {
	r := Result{Query: q, Name: e.names[q.Name], connPeriod: e.pol.ConnPeriod}
	if r.Name == nil {
		return r
	}
	nc := r.Name
	addrs := map[string][]netip.Addr{}
	var cands []policy.Site
	for _, ref := range nc.Sites {
		for _, s := range ref.Addresses {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if a = a.Unmap(); q.Family == 0 || (q.Family == 4) == a.Is4() {
				addrs[ref.Site] = append(addrs[ref.Site], a)
			}
		}
		if len(addrs[ref.Site]) == 0 {
			continue
		}
		site := e.sites[ref.Site]
		cands = append(cands, policy.Site{Name: ref.Site, Preference: ref.Preference, Weight: *ref.Weight, Location: site.Location,
			MaxSessions: ref.MaxSessions, MaxBitsPerSec: ref.MaxBitsPerSec, MaxConnectionLoad: ref.MaxConnectionLoad})
	}
	now := e.now()
	in := policy.Input{Sites: cands, Metrics: map[string]policy.Metrics{}, Query: policy.Query{Name: q.Name, Now: now}}
	for _, c := range cands {
		in.Metrics[c.Name] = e.metrics(c.Name, nc.Service, now)
	}
	if len(cands) > 1 {
		e.context(ctx, q, &in)
	}
	e.mu.Lock()
	in.State = e.state[q.Name]
	d := policy.Run(e.pol, in)
	if !q.DryRun && d.Site != "" {
		e.state[q.Name] = d.Next
	}
	e.mu.Unlock()
	r.Decision, r.Input = d, in
	if d.Site == "" {
		return r
	}
	r.add(d.Site, addrs[d.Site], nc.Answers)
	// Further answers: the next choices among the sites that passed the
	// filters (G-1, G-2), without touching the selection state.
	rest := survivors(d, cands)
	state := d.Next
	for !r.full(nc.Answers) {
		rest = without(rest, d.Site)
		if len(rest) == 0 {
			break
		}
		in2 := in
		in2.Sites, in2.State = rest, state
		d = policy.Run(e.pol, in2)
		if d.Site == "" {
			break
		}
		state = d.Next
		r.add(d.Site, addrs[d.Site], nc.Answers)
	}
	if q.ECS.IsValid() && q.ECS.Bits() > 0 {
		for _, t := range r.Decision.Trace {
			if t.Step == policy.GeoProximity && t.Outcome != policy.Skipped {
				r.ECSScope = q.ECS.Bits()
			}
		}
	}
	return r
}

// add appends site's addresses up to limit per family: a query for both
// families (ANY) gets up to limit of each.
func (r *Result) add(site string, as []netip.Addr, limit int) {
	added := false
	for _, a := range as {
		if r.count(a.Is4()) < limit {
			r.Addrs = append(r.Addrs, a)
			added = true
		}
	}
	if added {
		r.Sites = append(r.Sites, site)
	}
}

// count is the number of IPv4 (or IPv6) addresses in the answer.
func (r *Result) count(v4 bool) int {
	n := 0
	for _, a := range r.Addrs {
		if a.Is4() == v4 {
			n++
		}
	}
	return n
}

// full reports whether the answer holds limit addresses of every family
// the query asked for.
func (r *Result) full(limit int) bool {
	switch r.Query.Family {
	case 4:
		return r.count(true) >= limit
	case 6:
		return r.count(false) >= limit
	}
	return r.count(true) >= limit && r.count(false) >= limit
}

// survivors are the candidates left after the filtering steps.
func survivors(d policy.Decision, cands []policy.Site) []policy.Site {
	out := cands
	for _, t := range d.Trace {
		if (t.Step == policy.Health || t.Step == policy.Capacity) && t.Outcome != policy.Skipped {
			keep := map[string]bool{}
			for _, n := range t.Out {
				keep[n] = true
			}
			var next []policy.Site
			for _, s := range out {
				if keep[s.Name] {
					next = append(next, s)
				}
			}
			out = next
		}
	}
	return out
}

func without(ss []policy.Site, name string) []policy.Site {
	var out []policy.Site
	for _, s := range ss {
		if s.Name != name {
			out = append(out, s)
		}
	}
	return out
}

func (e *Engine) metrics(site, service string, now time.Time) policy.Metrics {
	if e.static != nil {
		rep, ok := e.static[site]
		if !ok {
			return policy.Metrics{}
		}
		return metrics.FromReport(rep, service, now, e.pol.ConnPeriod)
	}
	if e.poller == nil {
		return policy.Metrics{}
	}
	return e.poller.Metrics(site, service)
}

// context fills in the query-time measurements: RTTs (G-3) and the client's
// location (G-4).
func (e *Engine) context(ctx context.Context, q Query, in *policy.Input) {
	if e.pol.Has(policy.NetworkProximity) {
		switch {
		case e.rtt == nil:
			in.Query.RTTNote = "probing off"
		case !q.Resolver.IsValid():
			in.Query.RTTNote = "no resolver address"
		default:
			in.Query.RTT, in.Query.RTTNote = e.rtt.Measure(ctx, q.Resolver)
		}
	}
	if e.pol.Has(policy.GeoProximity) && e.geo == nil && e.noGeo != "" {
		in.Query.ClientKey = e.noGeo
	}
	if e.pol.Has(policy.GeoProximity) && e.geo != nil {
		key, label := q.Resolver, "resolver "+q.Resolver.String()
		if q.ECS.IsValid() && q.ECS.Bits() > 0 {
			key, label = q.ECS.Addr(), "ECS "+q.ECS.String()
		}
		if !key.IsValid() {
			in.Query.ClientKey = "no client address"
			return
		}
		p, network, ok, err := e.geo.Locate(key)
		switch {
		case err != nil:
			in.Query.ClientKey = label + ": " + err.Error()
		case !ok:
			in.Query.ClientKey = label + ": not in the database"
		default:
			in.Query.Client = &p
			in.Query.ClientKey = label + " in " + network.String()
		}
	}
}

// Explain writes the chain step by step.
func (r Result) Explain(w io.Writer) {
	fam := map[int]string{0: "A/AAAA", 4: "A", 6: "AAAA"}[r.Query.Family]
	fmt.Fprintf(w, "query     %s %s from resolver %s", r.Query.Name, fam, r.Query.Resolver)
	if r.Query.ECS.IsValid() {
		fmt.Fprintf(w, ", ECS %s", r.Query.ECS)
	}
	fmt.Fprintln(w)
	if r.Name == nil {
		fmt.Fprintln(w, "answer    none: not a configured name")
		return
	}
	var sites []string
	for _, s := range r.Input.Sites {
		m := r.Input.Metrics[s.Name]
		st := "metrics unknown"
		if m.Known {
			st = fmt.Sprintf("%d/%d backends healthy, %d sessions, %s", m.HealthyBackends, m.Backends, m.Sessions, bitsLabel(m.BitsPerSec))
			if load, ok := policy.ConnLoad(m.Conn, r.Input.Query.Now, r.connPeriod); ok {
				st += fmt.Sprintf(", %.4g new connections/s", load)
			}
		}
		sites = append(sites, fmt.Sprintf("%s (%s)", s.Name, st))
	}
	if len(sites) == 0 {
		fmt.Fprintln(w, "answer    none: no site has an address of this family (NODATA)")
		return
	}
	fmt.Fprintf(w, "sites     %s\n", strings.Join(sites, "\n          "))
	for _, t := range r.Decision.Trace {
		fmt.Fprintf(w, "%-4s %-17s %-8s %-28s %s\n", t.ID, t.Step, t.Outcome, "["+strings.Join(t.In, " ")+"] -> ["+strings.Join(t.Out, " ")+"]", t.Reason)
	}
	if r.Decision.Site == "" {
		fmt.Fprintf(w, "answer    none (SERVFAIL): %s\n", r.Decision.Reason)
		return
	}
	fmt.Fprintf(w, "decided   %s\n", r.Decision.Reason)
	var as []string
	for _, a := range r.Addrs {
		as = append(as, a.String())
	}
	fmt.Fprintf(w, "answer    %s (sites %s), TTL %d", strings.Join(as, ", "), strings.Join(r.Sites, ", "), *r.Name.TTL)
	if r.Query.ECS.IsValid() {
		fmt.Fprintf(w, ", ECS scope /%d", r.ECSScope)
	}
	fmt.Fprintln(w)
}

func bitsLabel(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3g Gbit/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3g Mbit/s", v/1e6)
	}
	return fmt.Sprintf("%.3g kbit/s", v/1e3)
}
