package trace

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

func TestParsePacketSpec(t *testing.T) {
	for _, s := range []string{
		"tcp 198.51.100.7:4242 > 203.0.113.10:80 S",
		"udp [2001:db8::7]:5000 > [2001:db8::10]:53",
		"udp 198.51.100.7 > 203.0.113.30 frag=middle id=7",
		"udp 198.51.100.7:1 > 203.0.113.30:2 frag=first id=7",
		"icmp 192.0.2.254 > 203.0.113.10 type=3 code=4 quote=tcp 203.0.113.10:80>198.51.100.7:4242",
		"esp 198.51.100.7 > 203.0.113.7",
		"ipip 198.51.100.7 > 203.0.113.30",
		"ipv6 198.51.100.7 > 203.0.113.30",
		"ipip 2001:db8::7 > 2001:db8::10",
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
		{"ipip 198.51.100.7:1 > 203.0.113.30:2", "protocol ipip has no ports"},
		{"ipip6 198.51.100.7 > 203.0.113.30", `proto "ipip6": want tcp, udp, icmp, icmpv6, esp, gre, ipip, ipv6 or a number`},
	} {
		if _, err := ParsePacketSpec(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ...%s...", tc.in, err, tc.want)
		}
	}
}

// TestProtoNames: the packet notation and a trace's "proto" read every
// name the text outputs print (compiler.ProtoName, as /etc/protocols spells
// them), the name and the number mean one protocol, and a line written
// back reads the same.
func TestProtoNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		num  uint8
	}{
		{"tcp", 6}, {"udp", 17}, {"icmp", 1}, {"icmpv6", 58}, {"esp", 50}, {"gre", 47},
		{"ipip", 4}, {"ipv6", 41},
	} {
		if got := ProtoName(tc.num); got != tc.name {
			t.Errorf("ProtoName(%d) = %q, want %q", tc.num, got, tc.name)
		}
		if got := compiler.ProtoName(tc.num); got != tc.name {
			t.Errorf("compiler.ProtoName(%d) = %q, want %q", tc.num, got, tc.name)
		}
		src, dst := "198.51.100.7", "203.0.113.30"
		if tc.num == compiler.IPProtoICMPv6 {
			src, dst = "2001:db8::7", "2001:db8::10"
		}
		for _, proto := range []string{`"` + tc.name + `"`, `"` + strings.ToUpper(tc.name) + `"`, strconv.Itoa(int(tc.num))} {
			ports := ""
			if tc.num == compiler.IPProtoTCP || tc.num == compiler.IPProtoUDP {
				ports = `, "sport": 1, "dport": 2`
			}
			in := `{"t": 1, "src": "` + src + `", "dst": "` + dst + `", "proto": ` + proto + ports + "}\n"
			lines, err := Parse(strings.NewReader(in), "t.jsonl")
			if err != nil {
				t.Errorf("proto %s: %v", proto, err)
				continue
			}
			if got := lines[0].Packet.Proto; got != tc.num {
				t.Errorf("proto %s read as %d, want %d", proto, got, tc.num)
			}
			var b bytes.Buffer
			if err := Write(&b, lines); err != nil {
				t.Fatal(err)
			}
			if want := `"proto":"` + tc.name + `"`; !strings.Contains(b.String(), want) {
				t.Errorf("proto %s written as %s, want %s", proto, b.String(), want)
			}
		}
	}
	// Every number that has a name in one place has it in the other: the
	// names a trace reads (protoNames) are those lbc prints.
	for n := range 256 {
		name := compiler.ProtoName(uint8(n))
		if _, err := strconv.Atoi(name); err == nil {
			continue // printed as its number
		}
		if got, ok := protoNames[name]; !ok || got != uint8(n) {
			t.Errorf("protocol %d: lbc prints %q, which a trace reads as %d (%v)", n, name, got, ok)
		}
	}
	for name, n := range protoNames {
		if got := compiler.ProtoName(n); got != name {
			t.Errorf("a trace reads %q as %d, which lbc prints as %q", name, n, got)
		}
	}
}
