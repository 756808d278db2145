package proximity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// Site is one site's RTT endpoint.
type Site struct {
	Name string
	URL  string
}

// SitesConfig tunes Sites.
type SitesConfig struct {
	// Budget is how long a query may wait for RTTs; what is not in by then
	// is missing (G-3 is skipped) but still cached when it arrives.
	Budget time.Duration
	// ProbeTimeout bounds one site's probe (at least Budget).
	ProbeTimeout time.Duration
	// CacheTTL is how long a resolver prefix's RTTs are reused.
	CacheTTL time.Duration
	// PrefixV4 and PrefixV6 group resolvers for the cache.
	PrefixV4, PrefixV6 int
	Method             Method
	TCPPort            int
	Client             *http.Client
	Now                func() time.Time
}

// maxEntries bounds the cache, and so the probes a flood of resolvers causes.
const maxEntries = 65536

// Sites asks every site for its RTT to a resolver, with a cache.
type Sites struct {
	cfg   SitesConfig
	sites []Site
	mu    sync.Mutex
	cache map[netip.Prefix]*entry
}

type entry struct {
	at     time.Time
	rtt    map[string]time.Duration
	failed map[string]string
	done   chan struct{} // closed when every site has answered or failed
}

// NewSites returns a measurer over sites.
func NewSites(cfg SitesConfig, sites []Site) *Sites {
	if cfg.ProbeTimeout < cfg.Budget {
		cfg.ProbeTimeout = cfg.Budget
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PrefixV4 <= 0 || cfg.PrefixV4 > 32 {
		cfg.PrefixV4 = 24
	}
	if cfg.PrefixV6 <= 0 || cfg.PrefixV6 > 128 {
		cfg.PrefixV6 = 56
	}
	return &Sites{cfg: cfg, sites: sites, cache: map[netip.Prefix]*entry{}}
}

// Key is the cache key of a resolver: its prefix.
func (s *Sites) Key(resolver netip.Addr) netip.Prefix {
	resolver = resolver.Unmap()
	bits := s.cfg.PrefixV6
	if resolver.Is4() {
		bits = s.cfg.PrefixV4
	}
	p, _ := resolver.Prefix(bits)
	return p
}

// Measure returns each site's RTT to resolver, waiting at most the budget
// (or ctx). note says why sites are missing.
func (s *Sites) Measure(ctx context.Context, resolver netip.Addr) (rtt map[string]time.Duration, note string) {
	key := s.Key(resolver)
	now := s.cfg.Now()
	s.mu.Lock()
	e := s.cache[key]
	if e == nil || now.Sub(e.at) >= s.cfg.CacheTTL {
		s.evict(now)
		if len(s.cache) >= maxEntries {
			s.mu.Unlock()
			return nil, "RTT cache full (too many resolver prefixes within one TTL)"
		}
		e = &entry{at: now, rtt: map[string]time.Duration{}, failed: map[string]string{}, done: make(chan struct{})}
		s.cache[key] = e
		s.start(e, resolver)
	}
	s.mu.Unlock()

	t := time.NewTimer(s.cfg.Budget)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rtt = make(map[string]time.Duration, len(e.rtt))
	for k, v := range e.rtt {
		rtt[k] = v
	}
	var why []string
	for _, site := range s.sites {
		if _, ok := rtt[site.Name]; ok {
			continue
		}
		if f, ok := e.failed[site.Name]; ok {
			why = append(why, f)
		} else {
			why = append(why, fmt.Sprintf("site %s: no answer within the %s budget", site.Name, s.cfg.Budget))
		}
	}
	sort.Strings(why)
	return rtt, strings.Join(why, "; ")
}

// start probes from every site in the background; s.mu is held.
func (s *Sites) start(e *entry, resolver netip.Addr) {
	var wg sync.WaitGroup
	for _, site := range s.sites {
		wg.Add(1)
		go func(site Site) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ProbeTimeout+time.Second)
			defer cancel()
			d, err := Ask(ctx, s.cfg.Client, site.URL, resolver, s.cfg.Method, s.cfg.TCPPort, s.cfg.ProbeTimeout)
			s.mu.Lock()
			defer s.mu.Unlock()
			if err != nil {
				e.failed[site.Name] = failure(site.Name, err)
			} else {
				e.rtt[site.Name] = d
			}
		}(site)
	}
	go func() { wg.Wait(); close(e.done) }()
}

// evict drops expired entries so the cache stays bounded by the number of
// resolver prefixes seen within one TTL; s.mu is held.
func (s *Sites) evict(now time.Time) {
	if len(s.cache) < maxEntries/2 {
		return
	}
	for k, e := range s.cache {
		if now.Sub(e.at) >= s.cfg.CacheTTL {
			delete(s.cache, k)
		}
	}
}

// failure says why a site gave no RTT, for G-3's note.
func failure(site string, err error) string {
	var ns *NotServedError
	var ae *AnswerError
	switch {
	case errors.As(err, &ns):
		return "site " + site + " " + ns.Error()
	case errors.As(err, &ae):
		return fmt.Sprintf("site %s answered %s: %s", site, ae.Status, ae.Msg)
	}
	return "site " + site + ": " + err.Error()
}
