package proximity

import (
	"fmt"
	"net/netip"
	"strings"
)

// Allow is the set of addresses a site may probe for the GSLB: the
// resolvers that query it. Its zero value allows nothing.
type Allow struct {
	public   bool
	prefixes []netip.Prefix
}

// notPublic are the IPv4 ranges that IsGlobalUnicast lets through but
// that no resolver on the Internet has: "this network", shared address
// space (carrier-grade NAT), IETF protocol assignments, benchmarking and
// the reserved 240/4.
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// IsPublic reports whether a is a global unicast address outside the
// private (RFC 1918, fc00::/7) and special-purpose ranges: loopback,
// link-local, multicast, unspecified, broadcast, carrier-grade NAT and
// the like are not public.
func IsPublic(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range notPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// ParseAllow reads a list of entries: "public" (IsPublic), a prefix such
// as 10.0.0.0/8 or 2001:db8::/32, or one address; "none" alone allows
// nothing. Entries may also be separated by commas.
func ParseAllow(entries []string) (*Allow, error) {
	a := &Allow{}
	var none bool
	n := 0
	for _, e := range entries {
		for _, f := range strings.Split(e, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			n++
			switch strings.ToLower(f) {
			case "public":
				a.public = true
				continue
			case "none":
				none = true
				continue
			}
			p, err := netip.ParsePrefix(f)
			if err != nil {
				ip, aerr := netip.ParseAddr(f)
				if aerr != nil || ip.Zone() != "" {
					return nil, fmt.Errorf("%q: want public, none, a prefix such as 10.0.0.0/8, or an address", f)
				}
				p = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
			}
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			}
			a.prefixes = append(a.prefixes, p.Masked())
		}
	}
	if none && n > 1 {
		return nil, fmt.Errorf("none allows nothing: give it alone")
	}
	return a, nil
}

// Contains reports whether a may be probed.
func (a *Allow) Contains(addr netip.Addr) bool {
	if a == nil {
		return false
	}
	addr = addr.Unmap().WithZone("")
	if a.public && IsPublic(addr) {
		return true
	}
	for _, p := range a.prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Empty reports whether a allows nothing.
func (a *Allow) Empty() bool { return a == nil || (!a.public && len(a.prefixes) == 0) }

// String lists the entries, "none" when empty.
func (a *Allow) String() string {
	if a.Empty() {
		return "none"
	}
	var s []string
	if a.public {
		s = append(s, "public")
	}
	for _, p := range a.prefixes {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}
