package bgp

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/strictyaml"
)

// Config is bgp.yaml: who this node is, whom it peers with, and what it
// attaches to the VIPs it announces. The field names follow MetalLB's
// BGPPeer and BGPAdvertisement resources where they mean the same.
type Config struct {
	// LocalASN is this node's AS number (myASN in MetalLB).
	LocalASN uint32 `yaml:"localASN"`
	// RouterID is this node's BGP identifier (an IPv4 address).
	RouterID string `yaml:"routerID"`
	// Peers are the routers this node announces VIPs to.
	Peers []Peer `yaml:"peers"`
	// Advertisements attach communities and local-pref to VIPs; the first
	// entry whose vips contain a VIP applies (none: no attribute added).
	Advertisements []Advertisement `yaml:"advertisements"`
	// NextHopIPv6 is the next hop of IPv6 VIPs sent over IPv4 sessions
	// (and NextHopIPv4 of IPv4 VIPs over IPv6 sessions). Over a session of
	// the VIP's own family the next hop is the session's local address.
	NextHopIPv4 string `yaml:"nextHopIPv4"`
	NextHopIPv6 string `yaml:"nextHopIPv6"`

	routerID netip.Addr
	nh4, nh6 netip.Addr
}

// Peer is one BGP neighbour. This node always dials out and never listens
// on port 179, as MetalLB's speaker.
type Peer struct {
	// Address is the router's address (peerAddress in MetalLB).
	Address string `yaml:"address"`
	// ASN is the router's AS number (peerASN); equal to localASN: iBGP.
	ASN uint32 `yaml:"asn"`
	// Port is the router's BGP port (default 179).
	Port int `yaml:"port"`
	// SourceAddress is the local address of the session (default: chosen
	// by the kernel's route to the peer).
	SourceAddress string `yaml:"sourceAddress"`
	// Password enables TCP MD5 signatures (RFC 2385).
	Password string `yaml:"password"`
	// TTL above 1 allows an eBGP peer that many hops away (ebgpMultihop).
	TTL int `yaml:"ttl"`
	// HoldTime is the BGP hold time the node proposes (default 90s; 0s
	// or at least 3s); KeepaliveTime defaults to a third of it.
	HoldTime      string `yaml:"holdTime"`
	KeepaliveTime string `yaml:"keepaliveTime"`
	// ConnectRetry is the wait between connection attempts (default 5s),
	// also used after a session was reset.
	ConnectRetry string `yaml:"connectRetry"`
	// Families the session carries: ipv4, ipv6 (default: both).
	Families []string `yaml:"families"`

	addr, src         netip.Addr
	hold, keep, retry time.Duration
	ipv4, ipv6        bool
}

// Advertisement attaches BGP attributes to the VIPs it selects.
type Advertisement struct {
	// VIPs are prefixes (or addresses) that select VIPs; empty: every VIP.
	VIPs []string `yaml:"vips"`
	// Communities are "ASN:VALUE" or a well-known name (no-export,
	// no-advertise, no-peer, blackhole).
	Communities []string `yaml:"communities"`
	// LocalPref is sent to iBGP peers only (eBGP drops it); 0: default 100.
	LocalPref uint32 `yaml:"localPref"`

	prefixes    []netip.Prefix
	communities []uint32
}

// Path is what one VIP is announced with.
type Path struct {
	Prefix      netip.Prefix
	Communities []uint32
	LocalPref   uint32
}

// pathFor returns the attributes of vip.
func (c *Config) pathFor(vip netip.Addr) Path {
	p := Path{Prefix: netip.PrefixFrom(vip, vip.BitLen())}
	for _, a := range c.Advertisements {
		if a.selects(vip) {
			p.Communities, p.LocalPref = a.communities, a.LocalPref
			break
		}
	}
	return p
}

func (a *Advertisement) selects(vip netip.Addr) bool {
	if len(a.prefixes) == 0 {
		return true
	}
	for _, p := range a.prefixes {
		if p.Contains(vip) {
			return true
		}
	}
	return false
}

var wellKnown = map[string]uint32{
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
	"blackhole":           0xFFFF029A,
}

// Load parses and validates bgp.yaml strictly: an unknown field is an
// error with its line, and every problem is reported at once with its
// line and field path.
func Load(file string, data []byte) (*Config, error) {
	var cfg Config
	root, issues := strictyaml.Decode(data, &cfg, schema)
	if len(issues) > 0 {
		return nil, compiler.YAMLProblems(file, issues)
	}
	if strictyaml.Empty(root) {
		return nil, compiler.Problems{{File: file, Msg: "empty configuration; it needs localASN, routerID and peers (see docs/fleet.md)"}}
	}
	if ps := cfg.validate(); len(ps) > 0 {
		out := make(compiler.Problems, len(ps))
		for i, x := range ps {
			out[i] = compiler.Problem{File: file, Line: strictyaml.LineOf(root, x.keys), Path: x.path, Msg: x.msg}
		}
		return nil, out
	}
	return &cfg, nil
}

var schema = strictyaml.Schema{
	Doc:    "bgp.yaml",
	Labels: map[string]string{"Config": "the top level", "Peer": "a peer", "Advertisement": "an advertisement"},
}

type problem struct {
	keys []any
	path string
	msg  string
}

func (c *Config) validate() []problem {
	var ps []problem
	bad := func(keys []any, format string, a ...any) {
		ps = append(ps, problem{keys: keys, path: strictyaml.KeyPath(keys), msg: fmt.Sprintf(format, a...)})
	}
	if c.LocalASN == 0 {
		bad([]any{"localASN"}, "localASN is missing or 0: set this node's AS number (e.g. 64512, a private ASN)")
	}
	if c.RouterID == "" {
		bad([]any{"routerID"}, "routerID is missing: set an IPv4 address unique to this node (usually its own address)")
	} else if a, err := netip.ParseAddr(c.RouterID); err != nil || !a.Is4() {
		bad([]any{"routerID"}, "routerID %q: want an IPv4 address such as 10.0.0.2", c.RouterID)
	} else {
		c.routerID = a
	}
	for _, nh := range []struct {
		name string
		s    string
		v4   bool
		dst  *netip.Addr
	}{{"nextHopIPv4", c.NextHopIPv4, true, &c.nh4}, {"nextHopIPv6", c.NextHopIPv6, false, &c.nh6}} {
		if nh.s == "" {
			continue
		}
		a, err := netip.ParseAddr(nh.s)
		if err != nil || a.Is4() != nh.v4 {
			bad([]any{nh.name}, "%s %q: want an IPv%s address", nh.name, nh.s, map[bool]string{true: "4", false: "6"}[nh.v4])
			continue
		}
		*nh.dst = a
	}
	if len(c.Peers) == 0 {
		bad([]any{"peers"}, "no peers: list at least one router (address and asn)")
	}
	seen := map[netip.Addr]int{}
	for i := range c.Peers {
		p := &c.Peers[i]
		at := func(field string) []any { return []any{"peers", i, field} }
		a, err := netip.ParseAddr(p.Address)
		switch {
		case p.Address == "":
			bad(at("address"), "address is missing: the router's IP address")
		case err != nil:
			bad(at("address"), "address %q: want an IP address such as 10.0.0.1", p.Address)
		default:
			p.addr = a
			if j, dup := seen[a]; dup {
				bad(at("address"), "address %s is also peers[%d]: one session per router", a, j)
			}
			seen[a] = i
		}
		if p.ASN == 0 {
			bad(at("asn"), "asn is missing or 0: the router's AS number (equal to localASN for iBGP)")
		}
		if p.Port < 0 || p.Port > 65535 {
			bad(at("port"), "port %d out of range 1..65535", p.Port)
		}
		if p.SourceAddress != "" {
			s, err := netip.ParseAddr(p.SourceAddress)
			if err != nil {
				bad(at("sourceAddress"), "sourceAddress %q: want an IP address of this node", p.SourceAddress)
			} else if p.addr.IsValid() && s.Is4() != p.addr.Is4() {
				bad(at("sourceAddress"), "sourceAddress %s and address %s are of different families", s, p.addr)
			} else {
				p.src = s
			}
		}
		if p.TTL < 0 || p.TTL > 255 {
			bad(at("ttl"), "ttl %d out of range 1..255", p.TTL)
		}
		dur := func(field, s string, def time.Duration) time.Duration {
			if s == "" {
				return def
			}
			d, err := time.ParseDuration(s)
			if err != nil || d < 0 || d%time.Second != 0 {
				bad(at(field), "%s %q: want whole seconds such as 9s or 1m30s", field, s)
				return def
			}
			return d
		}
		p.hold = dur("holdTime", p.HoldTime, 90*time.Second)
		if p.hold != 0 && p.hold < 3*time.Second {
			bad(at("holdTime"), "holdTime %s: BGP allows 0s (no keepalives) or at least 3s (RFC 4271)", p.hold)
		}
		p.keep = dur("keepaliveTime", p.KeepaliveTime, p.hold/3)
		if p.hold > 0 && p.keep > p.hold {
			bad(at("keepaliveTime"), "keepaliveTime %s is longer than holdTime %s: the session would expire between keepalives", p.keep, p.hold)
		}
		p.retry = dur("connectRetry", p.ConnectRetry, 5*time.Second)
		if p.retry == 0 {
			p.retry = time.Second
		}
		fams := p.Families
		if len(fams) == 0 {
			fams = []string{"ipv4", "ipv6"}
		}
		for j, f := range fams {
			switch f {
			case "ipv4":
				p.ipv4 = true
			case "ipv6":
				p.ipv6 = true
			default:
				bad([]any{"peers", i, "families", j}, "family %q: want ipv4 or ipv6", f)
			}
		}
		if p.addr.IsValid() && len(p.Families) > 0 {
			if p.addr.Is4() && p.ipv6 && !c.nh6.IsValid() {
				bad(at("families"), "ipv6 over the IPv4 session to %s needs nextHopIPv6 (the address routers forward IPv6 VIPs to)", p.addr)
			}
			if p.addr.Is6() && p.ipv4 && !c.nh4.IsValid() {
				bad(at("families"), "ipv4 over the IPv6 session to %s needs nextHopIPv4", p.addr)
			}
		}
		if p.addr.IsValid() && len(p.Families) == 0 {
			// Default: the session's own family, and the other one when
			// its next hop is configured.
			p.ipv4 = p.addr.Is4() || c.nh4.IsValid()
			p.ipv6 = p.addr.Is6() || c.nh6.IsValid()
		}
	}
	for i := range c.Advertisements {
		a := &c.Advertisements[i]
		for j, s := range a.VIPs {
			pf, err := netip.ParsePrefix(s)
			if err != nil {
				if ad, aerr := netip.ParseAddr(s); aerr == nil {
					pf, err = netip.PrefixFrom(ad, ad.BitLen()), nil
				}
			}
			if err != nil {
				bad([]any{"advertisements", i, "vips", j}, "vips entry %q: want a prefix (10.0.0.0/24) or an address", s)
				continue
			}
			a.prefixes = append(a.prefixes, pf.Masked())
		}
		for j, s := range a.Communities {
			v, err := parseCommunity(s)
			if err != nil {
				bad([]any{"advertisements", i, "communities", j}, "community %q: %v", s, err)
				continue
			}
			a.communities = append(a.communities, v)
		}
	}
	return ps
}

func parseCommunity(s string) (uint32, error) {
	if v, ok := wellKnown[strings.ToLower(s)]; ok {
		return v, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("want ASN:VALUE (each 0..65535) or one of no-export, no-advertise, no-export-subconfed, no-peer, blackhole")
	}
	h, err1 := strconv.ParseUint(hi, 10, 16)
	l, err2 := strconv.ParseUint(lo, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("both halves of ASN:VALUE must be 0..65535 (large communities are not supported)")
	}
	return uint32(h)<<16 | uint32(l), nil
}

// String renders a community as ASN:VALUE.
func communityString(v uint32) string {
	for n, w := range wellKnown {
		if w == v {
			return n
		}
	}
	return fmt.Sprintf("%d:%d", v>>16, v&0xffff)
}
