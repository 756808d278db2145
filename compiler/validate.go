package compiler

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/lbc-dev/lbc/internal/strictyaml"
)

// issue is a problem before the file name and line are known.
type issue struct {
	keys []any
	path string
	msg  string
}

type issueList []issue

func (is issueList) problems() Problems { return is.located("", locator{}) }

// located adds the file name and, where the YAML tree is known, the line.
// It leaves out problems of fields the decoder could not decode: it has
// reported them, and the zero value left in their place is no news.
func (is issueList) located(file string, loc locator) Problems {
	out := make(Problems, 0, len(is))
	for _, x := range is {
		if loc.unset.Covers(x.keys) {
			continue
		}
		p := Problem{File: file, Path: x.path, Msg: x.msg}
		if loc.root != nil {
			p.Line = loc.line(x.keys)
		}
		out = append(out, p)
	}
	return out
}

// at is a position in the configuration: the YAML keys that lead there (for
// the line number) and a label for people.
type at struct {
	keys  []any
	label string
}

func (a at) field(name string) at {
	return at{keys: append(append([]any{}, a.keys...), name), label: joinLabel(a.label, strictyaml.Clip(name))}
}

func (a at) item(list string, i int, kind, name string) at {
	l := fmt.Sprintf("%s[%d]", list, i)
	if name != "" && kind != "" {
		l = fmt.Sprintf("%s %q", kind, strictyaml.Clip(name))
	}
	return at{keys: append(append([]any{}, a.keys...), list, i), label: joinLabel(a.label, l)}
}

func joinLabel(a, b string) string {
	if a == "" {
		return b
	}
	return a + ": " + b
}

type validator struct {
	errs  issueList
	warns issueList
	// tunnelNeeds counts, per family (0: IPv4, 1: IPv6), the IP-in-IP
	// endpoints that need a tunnel source the file does not give: one
	// field to set, reported once however many endpoints need it.
	tunnelNeeds [2]struct {
		n     int
		first string
	}
}

func (v *validator) errf(a at, format string, args ...any) {
	v.errs = append(v.errs, issue{keys: a.keys, path: a.label, msg: fmt.Sprintf(format, clipArgs(args)...)})
}

func (v *validator) warnf(a at, format string, args ...any) {
	v.warns = append(v.warns, issue{keys: a.keys, path: a.label, msg: fmt.Sprintf(format, clipArgs(args)...)})
}

// clipArgs shortens the strings a message echoes from the file.
func clipArgs(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = strictyaml.Clip(s)
		}
	}
	return args
}

// Validate checks a configuration built in code (Load validates files).
func Validate(cfg *Config) (warnings Problems, err error) {
	v := validate(cfg)
	if len(v.errs) > 0 {
		return v.warns.problems(), v.errs.problems()
	}
	return v.warns.problems(), nil
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

func validate(cfg *Config) *validator {
	v := &validator{}
	top := at{}
	v.tunnel(top.field("tunnel"), cfg.Tunnel, cfg)
	lim := cfg.Limits
	for _, f := range []struct {
		name string
		val  int
	}{{"maxServices", lim.MaxServices}, {"maxEndpoints", lim.MaxEndpoints}, {"maxPrimaryGroups", lim.MaxPrimaryGroups}, {"maxFailoverGroups", lim.MaxFailoverGroups}} {
		if f.val < 0 || f.val > 100000 {
			v.errf(top.field("limits").field(f.name), "%d out of range 0..100000 (0 means the default)", f.val)
		}
	}
	if lim.MaxConnections < 0 || lim.MaxConnections > 1_000_000_000 {
		v.errf(top.field("limits").field("maxConnections"), "%d out of range 0..1000000000 (0: not checked)", lim.MaxConnections)
	}
	if len(cfg.Services) == 0 {
		v.errf(top.field("services"), "no services; add at least one (see examples/)")
	}
	n := len(cfg.Services)
	if maxS := orDefault(lim.MaxServices, DefaultMaxServices); maxS > 0 && maxS <= 100000 && n > maxS {
		v.errf(top.field("services"), "%d services, over the limit of %d (R-LIMIT); raise limits.maxServices if your datapath has room (lb.p4's service table holds %d, XDP's 16384); the services after the first %d are not checked",
			n, maxS, DefaultMaxServices, maxS)
		n = maxS
	}
	names := map[string]int{}
	for i := range cfg.Services[:n] {
		s := &cfg.Services[i]
		a := top.item("services", i, "service", s.Name)
		if prev, dup := names[s.Name]; dup && s.Name != "" {
			v.errf(a.field("name"), "duplicate service name (also services[%d]); names must be unique", prev)
		}
		names[s.Name] = i
		v.service(a, s, cfg)
	}
	v.overlaps(cfg, n)
	for fam, need := range v.tunnelNeeds {
		if need.n == 0 {
			continue
		}
		f, family := "sourceIPv4", "IPv4"
		if fam == 1 {
			f, family = "sourceIPv6", "IPv6"
		}
		which := fmt.Sprintf("%d %s endpoints use IP-in-IP (the first: %s)", need.n, family, need.first)
		if need.n == 1 {
			which = fmt.Sprintf("1 %s endpoint uses IP-in-IP (%s)", family, need.first)
		}
		a := top.field("tunnel").field(f)
		v.errs = append(v.errs, issue{keys: a.keys, path: a.label,
			msg: fmt.Sprintf("missing; %s, which needs an outer source address: set tunnel.%s at the top level", which, f)})
	}
	return v
}

func (v *validator) tunnel(a at, t Tunnel, cfg *Config) {
	if t.MTU != 0 && (t.MTU < MinMTU || t.MTU > MaxMTU) {
		v.errf(a.field("mtu"), "%d out of range %d..%d bytes (leave it out for the interface's MTU)", t.MTU, MinMTU, MaxMTU)
	} else if t.MTU != 0 && t.MTU < MinMTU+40 && hasIPIPv6Backend(cfg) {
		v.errf(a.field("mtu"), "%d leaves an IPv6 packet encapsulated to an IPv6 backend less than IPv6's minimum MTU of %d (40 bytes of outer header, R-MTU); use at least %d", t.MTU, MinMTU, MinMTU+40)
	}
	if t.SourceIPv4 != "" {
		if ip, err := netip.ParseAddr(t.SourceIPv4); err != nil || !ip.Unmap().Is4() {
			v.errf(a.field("sourceIPv4"), "%q is not an IPv4 address", t.SourceIPv4)
		} else if why := notHostAddr(ip.Unmap()); why != "" {
			v.errf(a.field("sourceIPv4"), "%s cannot be an outer source address: %s; use an address of this host that backends can reply to", ip.Unmap(), why)
		}
	}
	if t.SourceIPv6 != "" {
		if ip, err := netip.ParseAddr(t.SourceIPv6); err != nil || !ip.Is6() || ip.Is4In6() {
			v.errf(a.field("sourceIPv6"), "%q is not an IPv6 address", t.SourceIPv6)
		} else if why := notHostAddr(ip); why != "" {
			v.errf(a.field("sourceIPv6"), "%s cannot be an outer source address: %s; use an address of this host that backends can reply to", ip, why)
		}
	}
}

// hasIPIPv6Backend reports an IPv6 backend that IP-in-IP reaches.
func hasIPIPv6Backend(cfg *Config) bool {
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.Encap() != EncapIPIP {
			continue
		}
		for _, g := range s.Backends {
			for _, e := range g.Endpoints {
				if ip, err := netip.ParseAddr(e.IP); err == nil && ip.Unmap().Is6() {
					return true
				}
			}
		}
	}
	return false
}

// notUnicast says why ip cannot be the address of one machine, or "".
func notUnicast(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified():
		return "it is the unspecified address"
	case ip.IsMulticast():
		return "it is a multicast address"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "it is the broadcast address"
	}
	return ""
}

// notHostAddr is notUnicast, and also refuses loopback: a VIP or a tunnel
// source is reached over the network, which never carries loopback
// addresses. (A backend may be on loopback: lbc run's health checks and
// tests use that.)
func notHostAddr(ip netip.Addr) string {
	if why := notUnicast(ip); why != "" {
		return why
	}
	if ip.IsLoopback() {
		return "it is a loopback address, which never leaves a host"
	}
	return ""
}

func oneOf(val string, allowed ...string) bool {
	for _, x := range allowed {
		if val == x {
			return true
		}
	}
	return false
}

func (v *validator) enum(a at, val string, allowed ...string) {
	if val != "" && !oneOf(val, allowed...) {
		hint := ""
		for _, x := range allowed {
			if strings.EqualFold(x, val) {
				hint = fmt.Sprintf(" (values are upper case: %s)", x)
			}
		}
		v.errf(a, "%q is not one of %s%s", val, strings.Join(allowed, ", "), hint)
	}
}

func (v *validator) service(a at, s *Service, cfg *Config) {
	if s.Name == "" {
		v.errf(a.field("name"), "missing; every service needs a name")
	} else if !nameRe.MatchString(s.Name) {
		v.errf(a.field("name"), "%q: use 1..63 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", s.Name)
	}
	if s.VIP == "" {
		v.errf(a.field("vip"), "missing; give the service's virtual IP (IPv4 or IPv6)")
	} else if ip, err := netip.ParseAddr(s.VIP); err != nil {
		v.errf(a.field("vip"), "%q is not an IP address", s.VIP)
	} else if ip = ip.Unmap(); notHostAddr(ip) != "" {
		v.errf(a.field("vip"), "%s cannot be a VIP: %s; clients must be able to send to it", ip, notHostAddr(ip))
	} else if ip.Zone() != "" {
		v.errf(a.field("vip"), "%s: a VIP has no zone", ip)
	}
	if s.Protocol == "" {
		v.errf(a.field("protocol"), "missing; one of TCP, UDP, L3_DEFAULT")
	}
	v.enum(a.field("protocol"), s.Protocol, ProtoTCP, ProtoUDP, ProtoL3Default)
	switch {
	case s.Protocol == ProtoL3Default && !s.Ports.All && len(s.Ports.List) > 0:
		v.errf(a.field("ports"), "L3_DEFAULT takes every protocol and port; write ports: ALL or leave ports out")
	case s.Protocol != ProtoL3Default && !s.Ports.All && len(s.Ports.List) == 0:
		v.errf(a.field("ports"), "missing; list the ports (e.g. [80, 443] or [\"8000-8080\"]) or write ALL")
	}
	seen := make(map[uint16]bool, len(s.Ports.List))
	var twice []string
	for _, p := range s.Ports.List {
		if seen[p] {
			twice = append(twice, fmt.Sprint(p))
		}
		seen[p] = true
	}
	if len(twice) == 1 {
		v.errf(a.field("ports"), "port %s listed twice", twice[0])
	} else if len(twice) > 1 {
		n := len(twice)
		if n > 5 {
			twice = append(twice[:5], "…")
		}
		v.errf(a.field("ports"), "%d ports listed twice (%s); list each port once", n, strings.Join(twice, ", "))
	}
	v.enum(a.field("sessionAffinity"), s.SessionAffinity, AffinityNone, AffinityClientIP, AffinityClientIPProto, AffinityClientIPPortProto)
	if ct := s.ConnectionTrackingPolicy; ct != nil {
		ca := a.field("connectionTrackingPolicy")
		v.enum(ca.field("trackingMode"), ct.TrackingMode, TrackPerConnection, TrackPerSession)
		v.enum(ca.field("connectionPersistenceOnUnhealthyBackends"), ct.ConnectionPersistenceOnUnhealthyBackends, PersistDefault, PersistNever, PersistAlways)
		if ct.ConnectionPersistenceOnUnhealthyBackends == PersistAlways && ct.TrackingMode == TrackPerSession {
			v.errf(ca.field("connectionPersistenceOnUnhealthyBackends"), "ALWAYS_PERSIST is invalid with trackingMode PER_SESSION (R-PERSIST); use DEFAULT_FOR_PROTOCOL or NEVER_PERSIST, or trackingMode PER_CONNECTION")
		}
		if ct.IdleTimeoutSec != nil && (*ct.IdleTimeoutSec < 1 || *ct.IdleTimeoutSec > 86400) {
			v.errf(ca.field("idleTimeoutSec"), "%d out of range 1..86400 seconds (default 60)", *ct.IdleTimeoutSec)
		}
	}
	v.enum(a.field("localityLbPolicy"), s.LocalityLbPolicy, LbMaglev, LbWeightedMaglev)
	if fp := s.FailoverPolicy; fp != nil && fp.FailoverRatio != nil {
		if r := *fp.FailoverRatio; !(r >= 0 && r <= 1) {
			v.errf(a.field("failoverPolicy").field("failoverRatio"), "%g out of range 0..1", r)
		}
	}
	if cd := s.ConnectionDraining; cd != nil && (cd.DrainingTimeoutSec < 0 || cd.DrainingTimeoutSec > 3600) {
		v.errf(a.field("connectionDraining").field("drainingTimeoutSec"), "%d out of range 0..3600 seconds (0 = off)", cd.DrainingTimeoutSec)
	}
	v.healthCheck(a.field("healthCheck"), s)
	v.enum(a.field("encapsulation"), s.Encapsulation, EncapIPIP, EncapL2DSR)
	v.enum(a.field("loadBalancingScheme"), s.LoadBalancingScheme, SchemeExternal, SchemeInternal)
	v.backends(a, s, cfg)
	v.ring(a, s)
	v.enum(a.field("ringFill"), string(s.RingFill), string(FillEarliestRank), string(FillProbeStride))
	if s.Protocol == ProtoUDP || s.Protocol == ProtoL3Default {
		aff := s.Affinity()
		if !s.Ports.All && s.Protocol == ProtoUDP || !(aff == AffinityClientIP || aff == AffinityClientIPProto) || s.TrackingMode() != TrackPerSession {
			v.warnf(a, "UDP fragments of one datagram may reach different backends (R-FRAG-CFG); to keep them together use ports: ALL, sessionAffinity CLIENT_IP or CLIENT_IP_PROTO, and trackingMode PER_SESSION")
		}
	}
}

func (v *validator) healthCheck(a at, s *Service) {
	hc := s.HealthCheck
	if hc == nil {
		if s.Weighted() {
			v.errf(a, "missing; WEIGHTED_MAGLEV takes weights from an HTTP health check's X-Load-Balancing-Endpoint-Weight header (R-HC-1): add healthCheck: {type: HTTP, port: 80, requestPath: /healthz}")
		}
		return
	}
	if hc.Type == "" {
		v.errf(a.field("type"), "missing; one of HTTP, TCP, UDP, ICMP")
	}
	v.enum(a.field("type"), hc.Type, "HTTP", "TCP", "UDP", "ICMP")
	if s.Weighted() && hc.Type != "" && hc.Type != "HTTP" {
		v.errf(a.field("type"), "%s cannot carry weights; WEIGHTED_MAGLEV needs type HTTP (R-HC-1)", hc.Type)
	}
	if hc.Type != "ICMP" && (hc.Port < 1 || hc.Port > 65535) {
		v.errf(a.field("port"), "%d out of range 1..65535 (required for %s checks)", hc.Port, hc.Type)
	}
	if hc.RequestPath != "" && !strings.HasPrefix(hc.RequestPath, "/") {
		v.errf(a.field("requestPath"), "%q must start with /", hc.RequestPath)
	}
	v.enum(a.field("method"), hc.Method, "GET", "HEAD", "POST")
	checkRange := func(name string, val, lo, hi int) {
		if val != 0 && (val < lo || val > hi) {
			v.errf(a.field(name), "%d out of range %d..%d", val, lo, hi)
		}
	}
	checkRange("checkIntervalSec", hc.CheckIntervalSec, 1, 300)
	checkRange("timeoutSec", hc.TimeoutSec, 1, 300)
	checkRange("healthyThreshold", hc.HealthyThreshold, 1, 10)
	checkRange("unhealthyThreshold", hc.UnhealthyThreshold, 1, 10)
	if hc.TimeoutSec > 0 && hc.CheckIntervalSec > 0 && hc.TimeoutSec > hc.CheckIntervalSec {
		v.errf(a.field("timeoutSec"), "%d is longer than checkIntervalSec %d; a probe must finish before the next starts", hc.TimeoutSec, hc.CheckIntervalSec)
	}
}

func (v *validator) backends(a at, s *Service, cfg *Config) {
	if len(s.Backends) == 0 {
		v.errf(a.field("backends"), "no backend groups; add at least one group with endpoints")
		return
	}
	groups := map[string]int{}
	endpoints := map[string]at{}
	ips := map[netip.Addr]string{}
	var nEndpoints, nPrimaryGroups, nFailoverGroups, nPrimaryEndpoints int
	vip := s.VIPAddr()
	for gi := range s.Backends {
		g := &s.Backends[gi]
		ga := a.item("backends", gi, "group", g.Name)
		if g.Name == "" {
			v.errf(ga.field("name"), "missing; every backend group needs a name")
		} else if !nameRe.MatchString(g.Name) {
			v.errf(ga.field("name"), "%q: use 1..63 letters, digits, '.', '_' or '-'", g.Name)
		} else if prev, dup := groups[g.Name]; dup {
			v.errf(ga.field("name"), "duplicate group name (also backends[%d])", prev)
		}
		groups[g.Name] = gi
		if g.Failover {
			nFailoverGroups++
			if s.FailoverPolicy == nil {
				v.errf(ga.field("failover"), "failover groups need a failoverPolicy on the service; add failoverPolicy: {failoverRatio: 0.5} or set failover: false")
			}
		} else {
			nPrimaryGroups++
			nPrimaryEndpoints += len(g.Endpoints)
		}
		for ei := range g.Endpoints {
			e := &g.Endpoints[ei]
			ea := ga.item("endpoints", ei, "endpoint", e.Name)
			nEndpoints++
			if e.Name == "" {
				v.errf(ea.field("name"), "missing; every endpoint needs a name (health and weights refer to it)")
			} else if !nameRe.MatchString(e.Name) {
				v.errf(ea.field("name"), "%q: use 1..63 letters, digits, '.', '_' or '-'", e.Name)
			} else if _, dup := endpoints[e.Name]; dup {
				v.errf(ea.field("name"), "duplicate endpoint name in this service (also %s)", endpoints[e.Name].label)
			} else {
				endpoints[e.Name] = ea
			}
			ip, err := netip.ParseAddr(e.IP)
			switch {
			case e.IP == "":
				v.errf(ea.field("ip"), "missing; give the backend's IP address")
			case err != nil:
				v.errf(ea.field("ip"), "%q is not an IP address", e.IP)
			case notUnicast(ip.Unmap()) != "":
				v.errf(ea.field("ip"), "%s cannot be a backend address: %s", ip.Unmap(), notUnicast(ip.Unmap()))
			default:
				ip = ip.Unmap()
				if other, dup := ips[ip]; dup {
					v.errf(ea.field("ip"), "%s is also endpoint %q; each endpoint needs its own address", ip, other)
				}
				ips[ip] = e.Name
				if ip == vip {
					v.errf(ea.field("ip"), "%s is the service's VIP; give the backend's own address", ip)
				}
				if s.Encap() == EncapIPIP {
					fam, src := 0, cfg.Tunnel.SourceIPv4
					if ip.Is6() {
						fam, src = 1, cfg.Tunnel.SourceIPv6
					}
					if need := &v.tunnelNeeds[fam]; src == "" {
						if need.n++; need.n == 1 {
							need.first = ea.label
						}
					}
				}
				if s.Encap() == EncapL2DSR && vip.IsValid() && ip.Is4() != vip.Is4() {
					v.errf(ea.field("ip"), "L2_DSR keeps the packet as it is, so the backend must be in the VIP's address family")
				}
			}
			if e.MAC != "" {
				if hw, err := net.ParseMAC(e.MAC); err != nil || len(hw) != 6 {
					v.errf(ea.field("mac"), "%q is not a 48-bit MAC address like 02:00:00:00:00:01", e.MAC)
				}
			} else if s.Encap() == EncapL2DSR {
				v.errf(ea.field("mac"), "missing; L2_DSR rewrites the destination MAC, so every endpoint needs one")
			}
			if e.Port != 0 && (e.Port < 1 || e.Port > 65535) {
				v.errf(ea.field("port"), "%d out of range 1..65535", e.Port)
			}
		}
	}
	lim := cfg.Limits
	maxE, maxP, maxF := orDefault(lim.MaxEndpoints, DefaultMaxEndpoints), orDefault(lim.MaxPrimaryGroups, DefaultMaxGroups), orDefault(lim.MaxFailoverGroups, DefaultMaxGroups)
	if nEndpoints == 0 {
		v.errf(a.field("backends"), "no endpoints in any group; add at least one endpoint")
	}
	if nEndpoints > maxE {
		v.errf(a.field("backends"), "%d endpoints, over the limit of %d (R-LIMIT); raise limits.maxEndpoints if your datapath has room", nEndpoints, maxE)
	}
	if nPrimaryGroups > maxP {
		v.errf(a.field("backends"), "%d primary groups, over the limit of %d (R-LIMIT); raise limits.maxPrimaryGroups", nPrimaryGroups, maxP)
	}
	if nFailoverGroups > maxF {
		v.errf(a.field("backends"), "%d failover groups, over the limit of %d (R-LIMIT); raise limits.maxFailoverGroups", nFailoverGroups, maxF)
	}
	if s.FailoverPolicy != nil && nPrimaryEndpoints == 0 && nEndpoints > 0 {
		v.errf(a.field("backends"), "a failover policy needs at least one primary endpoint (a group with failover: false)")
	}
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// MinSlotsPerBackend is the least ring slots per endpoint a service may
// have; fewer and weights can no longer be honoured.
const MinSlotsPerBackend = 10

// ring checks ringSize and ringPrecision of the service at sa.
func (v *validator) ring(sa at, s *Service) {
	n := s.EndpointCount()
	a, pa := sa.field("ringSize"), sa.field("ringPrecision")
	if p := s.RingPrecision; p != 0 && !(p >= MinRingPrecision && p <= MaxRingPrecision) {
		v.errf(pa, "%g out of range %g..%g (a fraction: 0.01 means every endpoint's ring share within 1 %% of its ideal; default %g)", p, MinRingPrecision, MaxRingPrecision, DefaultRingPrecision)
		return
	}
	if s.RingAuto() {
		if m := s.Ring(); PrecisionOf(n, m) > s.Precision()+1e-12 {
			v.errf(a, "auto: %d endpoints at ringPrecision %g need more than the largest ring, %d slots; raise ringPrecision to %.2g", n, s.Precision(), MaxRingSize, PrecisionOf(n, m))
		}
		return
	}
	if s.RingPrecision != 0 {
		v.warnf(pa, "ringPrecision applies to ringSize auto only; this service sets ringSize %d (precision %.2g for %d endpoints)", s.RingSize, PrecisionOf(n, s.Ring()), n)
	}
	m := s.Ring()
	if m < 13 || m > MaxRingSize {
		v.errf(a, "%d out of range 13..%d; or write auto (the default)", m, MaxRingSize)
		return
	}
	if !isPrime(m) && m&(m-1) != 0 {
		v.errf(a, "%d is neither prime nor a power of two (R-MAGLEV-1); nearest usable: %d or %d", m, nextPrime(m), nextPow2(m))
		return
	}
	if m < MinSlotsPerBackend*n {
		v.errf(a, "%d is too small for %d endpoints (need at least %d slots each); use ringSize %d or more, or auto", m, n, MinSlotsPerBackend, nextPrime(MinSlotsPerBackend*n))
	} else if p := PrecisionOf(n, m); p > DefaultRingPrecision {
		v.warnf(a, "%d slots for %d endpoints: weights are honoured only to 1 slot in %d (share error up to %.2g %%); ringSize auto picks %d (1 %%)", m, n, m/n, 100*p, AutoRingSize(n, DefaultRingPrecision))
	}
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func nextPrime(n int) int {
	for !isPrime(n) {
		n++
	}
	return n
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// overlaps rejects two services that would claim the same packet. More
// specific keys win in the datapath (port, then ALL ports, then
// L3_DEFAULT), so only keys of the same kind can collide.
func (v *validator) overlaps(cfg *Config, n int) {
	type claim struct {
		svc  int
		port uint16
	}
	byKey := map[string]claim{}
	for i := range cfg.Services[:n] {
		s := &cfg.Services[i]
		vip := s.VIPAddr()
		if !vip.IsValid() || s.Protocol == "" {
			continue
		}
		var keys []string
		switch {
		case s.Protocol == ProtoL3Default:
			keys = []string{vip.String() + "/any"}
		case s.Ports.All:
			keys = []string{vip.String() + "/" + s.Protocol + "/all"}
		default:
			for _, p := range s.Ports.List {
				keys = append(keys, fmt.Sprintf("%s/%s/%d", vip, s.Protocol, p))
			}
		}
		a := at{}.item("services", i, "service", s.Name)
		for _, k := range keys {
			if c, dup := byKey[k]; dup && c.svc != i {
				other := cfg.Services[c.svc].Name
				what := strings.ReplaceAll(k, "/", " ")
				v.errf(a.field("vip"), "%s is also claimed by service %q; a packet must match one service (change the VIP, protocol or ports)", what, other)
				break
			}
			byKey[k] = claim{svc: i}
		}
	}
}
