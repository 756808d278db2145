package trace

import (
	"strings"
	"testing"
)

func TestParsePacketSpec(t *testing.T) {
	for _, s := range []string{
		"tcp 198.51.100.7:4242 > 203.0.113.10:80 S",
		"udp [2001:db8::7]:5000 > [2001:db8::10]:53",
		"udp 198.51.100.7 > 203.0.113.30 frag=middle id=7",
		"udp 198.51.100.7:1 > 203.0.113.30:2 frag=first id=7",
		"icmp 192.0.2.254 > 203.0.113.10 type=3 code=4 quote=tcp 203.0.113.10:80>198.51.100.7:4242",
		"esp 198.51.100.7 > 203.0.113.7",
		"132 198.51.100.7 > 203.0.113.7",
		"udp 198.51.100.7:1 > 203.0.113.30:53 len=1472 vlan=100 df",
		"tcp [2001:db8::7]:1 > [2001:db8::10]:80 A len=1420 vlan=4094",
	} {
		p, err := ParsePacketSpec(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if got := FormatPacket(p); got != s {
			t.Errorf("round trip: %q → %q", s, got)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"tcp 198.51.100.7:4242 203.0.113.10:80", "want"},
		{"tcp 198.51.100.7 > 203.0.113.10:80 S", "needs sport and dport"},
		{"tcp 198.51.100.7:1 > 203.0.113.10:80 Q", `"Q" is not one of`},
		{"tcp 198.51.100.7:1 > 2001:db8::1 S", "one is IPv4"},
		{"tcp 198.51.100.7:1 > 203.0.113.300:80 S", "not ADDR"},
		{"udp 198.51.100.7:1 > 203.0.113.10:80 frag=third", `frag "third"`},
		{"icmp 192.0.2.254 > 203.0.113.10 type=x", "want a number"},
		{"udp 198.51.100.7:1 > 203.0.113.10:80 vlan=0", "vlan 0 out of range"},
		{"udp [2001:db8::7]:1 > [2001:db8::10]:80 df", "IPv6 has no DF bit"},
	} {
		if _, err := ParsePacketSpec(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ...%s...", tc.in, err, tc.want)
		}
	}
}
