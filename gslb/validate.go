package gslb

import (
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strings"

	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/lbc-dev/lbc/internal/strictyaml"
	"github.com/miekg/dns"
)

// issue is a problem before its line is known.
type issue struct {
	keys []any
	path string
	msg  string
}

type at struct {
	keys  []any
	label string
}

func (a at) field(name string) at {
	l := strictyaml.Clip(name)
	if a.label != "" {
		l = a.label + "." + l
	}
	return at{keys: append(append([]any{}, a.keys...), name), label: l}
}

func (a at) item(list string, i int, name string) at {
	l := fmt.Sprintf("%s[%d]", list, i)
	if name != "" {
		l = fmt.Sprintf("%s %q", strings.TrimSuffix(list, "s"), strictyaml.Clip(name))
	}
	if a.label != "" {
		l = a.label + ": " + l
	}
	return at{keys: append(append([]any{}, a.keys...), list, i), label: l}
}

// index is the i-th item of a list of plain values.
func (a at) index(i int) at {
	return at{keys: append(append([]any{}, a.keys...), i), label: fmt.Sprintf("%s[%d]", a.label, i)}
}

type validator struct{ is []issue }

func (v *validator) errf(a at, format string, args ...any) {
	for i, x := range args {
		if s, ok := x.(string); ok {
			args[i] = strictyaml.Clip(s) // a 50 MB value is not echoed whole
		}
	}
	v.is = append(v.is, issue{keys: a.keys, path: a.label, msg: fmt.Sprintf(format, args...)})
}

// Fqdn returns name in canonical form: lower case with a final dot.
func Fqdn(name string) string { return strings.ToLower(dns.Fqdn(name)) }

func validDomain(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\\") {
		return false
	}
	_, ok := dns.IsDomainName(s)
	return ok && len(dns.Fqdn(s)) <= 255
}

func validate(c *Config) []issue {
	v := &validator{}
	top := at{}
	v.zones(top, c)
	sites := v.sites(top, c)
	v.names(top, c, sites)
	v.policy(top, c)
	m := c.Metrics
	ma := top.field("metrics")
	if m.Interval.D() < 1e8 || m.Interval.D() > 3600e9 {
		v.errf(ma.field("interval"), "%s out of range 100ms..1h", m.Interval.D())
	}
	if m.Timeout.D() <= 0 || m.Timeout > m.Interval {
		v.errf(ma.field("timeout"), "%s: must be > 0 and at most the interval (%s), so one slow site never overlaps its next poll", m.Timeout.D(), m.Interval.D())
	}
	if m.UnknownAfter < 1 || m.UnknownAfter > 100 {
		v.errf(ma.field("unknownAfter"), "%d out of range 1..100 missed polls", m.UnknownAfter)
	}
	s := c.Server
	sa := top.field("server")
	if s.UDPSize < 512 || s.UDPSize > 65535 {
		v.errf(sa.field("udpSize"), "%d out of range 512..65535 (1232 avoids IP fragmentation)", s.UDPSize)
	}
	rl := s.RateLimit
	ra := sa.field("rateLimit")
	if rl.PerSecond < 0 || math.IsNaN(rl.PerSecond) {
		v.errf(ra.field("perSecond"), "%g: must be >= 0 (0 turns the limit off)", rl.PerSecond)
	}
	if rl.PerSecond > 0 && rl.Burst < 1 {
		v.errf(ra.field("burst"), "%d: must be >= 1", rl.Burst)
	}
	if *rl.Slip < 0 || *rl.Slip > 10 {
		v.errf(ra.field("slip"), "%d out of range 0..10 (0 drops every limited query, 1 truncates every one)", *rl.Slip)
	}
	if rl.IPv4Bits < 1 || rl.IPv4Bits > 32 {
		v.errf(ra.field("ipv4PrefixLength"), "%d out of range 1..32", rl.IPv4Bits)
	}
	if rl.IPv6Bits < 1 || rl.IPv6Bits > 128 {
		v.errf(ra.field("ipv6PrefixLength"), "%d out of range 1..128", rl.IPv6Bits)
	}
	return v.is
}

func (v *validator) zones(top at, c *Config) {
	if len(c.Zones) == 0 {
		v.errf(top.field("zones"), "no zones; list the zones this server is authoritative for, e.g. zones: [{name: example.com}]")
	}
	seen := map[string]int{}
	for i, z := range c.Zones {
		a := top.item("zones", i, z.Name)
		if !validDomain(z.Name) {
			v.errf(a.field("name"), "%q is not a domain name", z.Name)
			continue
		}
		n := Fqdn(z.Name)
		if prev, dup := seen[n]; dup {
			v.errf(a.field("name"), "duplicate zone (also zones[%d])", prev)
		}
		seen[n] = i
		for j, ns := range z.Nameservers {
			if !validDomain(ns) {
				v.errf(a.field("nameservers").index(j), "%q is not a host name", ns)
			}
		}
		if z.Hostmaster != "" && !validDomain(z.Hostmaster) {
			v.errf(a.field("hostmaster"), "%q: write the mailbox as a domain name, e.g. hostmaster.example.com", z.Hostmaster)
		}
		if *z.NegativeTTL > 86400 {
			v.errf(a.field("negativeTTL"), "%d out of range 0..86400 seconds", *z.NegativeTTL)
		}
	}
}

func (v *validator) sites(top at, c *Config) map[string]*SiteConfig {
	if len(c.Sites) == 0 {
		v.errf(top.field("sites"), "no sites; add at least one site (a load balancer run by lbc run)")
	}
	steps := c.Steps()
	has := func(s policy.Step) bool {
		for _, x := range steps {
			if x == s {
				return true
			}
		}
		return false
	}
	byName := map[string]*SiteConfig{}
	for i := range c.Sites {
		s := &c.Sites[i]
		a := top.item("sites", i, s.Name)
		if s.Name == "" {
			v.errf(a.field("name"), "missing; every site needs a name")
		} else if _, dup := byName[s.Name]; dup {
			v.errf(a.field("name"), "duplicate site name; names must be unique")
		}
		byName[s.Name] = s
		needMetrics := c.Policy.Mode == ModeGSLBSLB && (has(policy.Health) || has(policy.Capacity) || has(policy.ConnectionLoad))
		if s.Metrics == "" && needMetrics {
			v.errf(a.field("metrics"), "missing; mode gslb+slb polls every site: give the URL of its lbc run metrics endpoint (http://HOST:PORT/v1/gslb/metrics), or set policy.mode: gslb-only")
		}
		if s.Metrics != "" && !httpURL(s.Metrics) {
			v.errf(a.field("metrics"), "%q is not an http:// or https:// URL", s.Metrics)
		}
		if s.RTT != "" && !httpURL(s.RTT) {
			v.errf(a.field("rtt"), "%q is not an http:// or https:// URL", s.RTT)
		}
		if has(policy.NetworkProximity) && s.RTT == "" && s.Metrics == "" {
			v.errf(a.field("rtt"), "missing; network-proximity asks each site for its RTT to the resolver: give rtt (or metrics, whose host serves it), or remove network-proximity from policy.steps")
		}
		if l := s.Location; l != nil {
			if !(l.Lat >= -90 && l.Lat <= 90) {
				v.errf(a.field("location").field("lat"), "%g out of range -90..90 degrees", l.Lat)
			}
			if !(l.Lon >= -180 && l.Lon <= 180) {
				v.errf(a.field("location").field("lon"), "%g out of range -180..180 degrees", l.Lon)
			}
		} else if has(policy.GeoProximity) {
			v.errf(a.field("location"), "missing; geo-proximity needs every site's location: add location: {lat: 37.57, lon: 126.98}, or remove geo-proximity from policy.steps")
		}
	}
	return byName
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func (v *validator) names(top at, c *Config, sites map[string]*SiteConfig) {
	if len(c.Names) == 0 {
		v.errf(top.field("names"), "no names; add the DNS names to answer, e.g. names: [{name: www.example.com, service: web, sites: [...]}]")
	}
	seen := map[string]int{}
	for i := range c.Names {
		n := &c.Names[i]
		a := top.item("names", i, n.Name)
		if !validDomain(n.Name) {
			v.errf(a.field("name"), "%q is not a domain name", n.Name)
		} else {
			fq := Fqdn(n.Name)
			if prev, dup := seen[fq]; dup {
				v.errf(a.field("name"), "duplicate name (also names[%d])", prev)
			}
			seen[fq] = i
			if c.zoneOf(fq) == nil {
				var zs []string
				for _, z := range c.Zones {
					zs = append(zs, z.Name)
				}
				v.errf(a.field("name"), "%s is in none of the zones (%s); add its zone to zones", n.Name, strings.Join(zs, ", "))
			}
		}
		if n.Service == "" && c.Policy.Mode == ModeGSLBSLB {
			v.errf(a.field("service"), "missing; name the service (as in the sites' lb.yaml) whose metrics decide this name")
		}
		if *n.TTL > 86400 {
			v.errf(a.field("ttl"), "%d out of range 0..86400 seconds", *n.TTL)
		}
		if n.Answers < 1 || n.Answers > 64 {
			v.errf(a.field("answers"), "%d out of range 1..64 addresses per answer", n.Answers)
		}
		if len(n.Sites) == 0 {
			v.errf(a.field("sites"), "no sites; list the sites that serve this name with their addresses (VIPs)")
		}
		used := map[string]bool{}
		for j := range n.Sites {
			r := &n.Sites[j]
			ra := a.item("sites", j, r.Site)
			if _, ok := sites[r.Site]; !ok {
				var known []string
				for _, s := range c.Sites {
					known = append(known, s.Name)
				}
				v.errf(ra.field("site"), "%q is not a site; sites are: %s", r.Site, strings.Join(known, ", "))
			}
			if used[r.Site] {
				v.errf(ra.field("site"), "listed twice for this name")
			}
			used[r.Site] = true
			if len(r.Addresses) == 0 {
				v.errf(ra.field("addresses"), "no addresses; give the site's VIP(s) for this name, IPv4 and/or IPv6")
			}
			for k, s := range r.Addresses {
				ip, err := netip.ParseAddr(s)
				if err != nil || ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() {
					v.errf(ra.field("addresses").index(k), "%q is not a unicast IP address", s)
				}
			}
			if w := *r.Weight; w < 0 || w > 1000 {
				v.errf(ra.field("weight"), "%d out of range 0..1000", w)
			}
			if r.MaxBitsPerSec < 0 || math.IsNaN(r.MaxBitsPerSec) {
				v.errf(ra.field("maxBitsPerSec"), "%g: must be >= 0 (0 = no limit)", r.MaxBitsPerSec)
			}
			if r.MaxConnectionLoad < 0 || math.IsNaN(r.MaxConnectionLoad) {
				v.errf(ra.field("maxConnectionLoad"), "%g: must be >= 0 new connections/s (0 = no limit)", r.MaxConnectionLoad)
			}
		}
	}
}

func (v *validator) policy(top at, c *Config) {
	p := c.Policy
	a := top.field("policy")
	if _, ok := modeSteps[p.Mode]; !ok {
		v.errf(a.field("mode"), "%q is not a mode; use gslb+slb (every step), gslb-only (no site metrics: health, geo-proximity, preference) or dns (round robin only)", p.Mode)
		return
	}
	if p.Final != "" && !p.Final.Final() {
		v.errf(a.field("final"), "%q is not a final step; use least-selected (G-7) or static (G-8)", p.Final)
	}
	if len(p.Steps) > 0 && p.Final != "" {
		v.errf(a.field("final"), "give either steps (ending with the final step) or final, not both")
	}
	if p.Mode == ModeDNS && p.Final == policy.LeastSelected {
		v.errf(a.field("final"), "plain DNS mode is static round robin only; use final: static or mode gslb-only")
	}
	steps := c.Steps()
	if err := (policy.Config{Steps: steps}).Check(); err != nil {
		v.errf(a.field("steps"), "%v", err)
	} else if len(p.Steps) > 0 {
		allowed := map[policy.Step]bool{policy.LeastSelected: p.Mode != ModeDNS, policy.Static: true}
		for _, s := range modeSteps[p.Mode] {
			allowed[s] = true
		}
		for _, s := range p.Steps {
			if !allowed[s] {
				v.errf(a.field("steps"), "%s (%s) needs data that mode %s does not have; remove it or use mode gslb+slb", s, s.ID(), p.Mode)
			}
		}
	}
	has := policy.Config{Steps: steps}.Has
	switch p.AllDown {
	case policy.AllDownAnswerAll, policy.AllDownNone:
	default:
		v.errf(a.field("allDown"), "%q: use answer-all (answer with every site when all are down) or none (SERVFAIL)", p.AllDown)
	}
	np := p.NetworkProximity
	na := a.field("networkProximity")
	switch np.Method {
	case "auto", "icmp", "tcp":
	default:
		v.errf(na.field("method"), "%q: use auto (ICMP where permitted, else TCP), icmp or tcp", np.Method)
	}
	if np.TCPPort < 1 || np.TCPPort > 65535 {
		v.errf(na.field("tcpPort"), "%d out of range 1..65535", np.TCPPort)
	}
	if np.Budget.D() <= 0 || np.Budget.D() > 2e9 {
		v.errf(na.field("budget"), "%s out of range 1ns..2s: it is how long an answer may wait for RTTs", np.Budget.D())
	}
	if np.Timeout < np.Budget || np.Timeout.D() > 5e9 {
		v.errf(na.field("timeout"), "%s: must be between the budget (%s) and 5s", np.Timeout.D(), np.Budget.D())
	}
	if np.Tolerance < 0 {
		v.errf(na.field("tolerance"), "must be >= 0")
	}
	if np.IPv4Bits < 1 || np.IPv4Bits > 32 {
		v.errf(na.field("ipv4PrefixLength"), "%d out of range 1..32", np.IPv4Bits)
	}
	if np.IPv6Bits < 1 || np.IPv6Bits > 128 {
		v.errf(na.field("ipv6PrefixLength"), "%d out of range 1..128", np.IPv6Bits)
	}
	ga := a.field("geoProximity")
	if has(policy.GeoProximity) && p.GeoProximity.Database == "" {
		v.errf(ga.field("database"), "missing; geo-proximity needs a MaxMind-format database (.mmdb, City layout): name it here or give lbc gslb --geo-db FILE, or remove geo-proximity from policy.steps")
	}
	if p.GeoProximity.ToleranceKm < 0 || math.IsNaN(p.GeoProximity.ToleranceKm) {
		v.errf(ga.field("toleranceKm"), "%g: must be >= 0", p.GeoProximity.ToleranceKm)
	}
	if per := p.ConnectionLoad.Period.D(); per < 1e9 || per > 3600e9 {
		v.errf(a.field("connectionLoad").field("period"), "%s out of range 1s..1h", per)
	}
}

// zoneOf returns the longest zone that holds fqdn, or nil.
func (c *Config) zoneOf(fqdn string) *Zone {
	var best *Zone
	for i := range c.Zones {
		z := Fqdn(c.Zones[i].Name)
		if dns.IsSubDomain(z, fqdn) && (best == nil || len(z) > len(Fqdn(best.Name))) {
			best = &c.Zones[i]
		}
	}
	return best
}
