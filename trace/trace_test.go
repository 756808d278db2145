package trace

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

func TestParsePacketAndEvent(t *testing.T) {
	in := `# a comment
{"t": 12.5, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 4242, "dport": 80, "flags": "S"}

{"src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "frag": "middle", "id": 7}
{"t": 30, "event": "health", "backend": "vm-a1", "healthy": false}
{"t": 31, "event": "weight", "backend": "vm-a1", "weight": 0}
{"t": 32, "event": "remove", "backend": "vm-a1"}
{"t": 33, "event": "add", "group": "ig-a", "endpoint": {"name": "vm-a3", "ip": "10.0.1.3"}}
{"t": 34, "src": "2001:db8::1", "dst": "2001:db8::10", "proto": "icmp", "type": 128}
{"t": 35, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": 132}
{"t": 36, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 1, "dport": 53, "len": 1472, "vlan": 100, "df": true, "expect": {"mtu": 1480}}
`
	lines, err := Parse(strings.NewReader(in), "t.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 9 {
		t.Fatalf("%d lines, want 9", len(lines))
	}
	want := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: compiler.IPProtoTCP, SrcPort: 4242, DstPort: 80, Flags: targets.FlagSYN}
	if l := lines[0]; l.No != 2 || l.T != 12.5 || !reflect.DeepEqual(*l.Packet, want) {
		t.Errorf("line 2: %+v %+v", l, l.Packet)
	}
	if l := lines[1]; l.No != 4 || l.T != 12.5 || l.Packet.Frag != targets.FragMiddle || l.Packet.FragID != 7 || l.Packet.DstPort != 0 {
		t.Errorf("line 4 (t inherited, middle fragment): %+v %+v", l, l.Packet)
	}
	if e := lines[2].Event; e.Kind != EventHealth || e.Backend != "vm-a1" || e.Healthy {
		t.Errorf("health: %+v", e)
	}
	if e := lines[3].Event; e.Kind != EventWeight || e.Weight != 0 {
		t.Errorf("weight: %+v", e)
	}
	if e := lines[5].Event; e.Kind != EventAdd || e.Group != "ig-a" || e.Endpoint.IP != "10.0.1.3" {
		t.Errorf("add: %+v", e)
	}
	if p := lines[6].Packet; p.Proto != compiler.IPProtoICMPv6 || p.ICMPType != 128 {
		t.Errorf(`"icmp" over IPv6 is ICMPv6: %+v`, p)
	}
	if p := lines[7].Packet; p.Proto != 132 {
		t.Errorf("numeric proto: %+v", p)
	}
	if l := lines[8]; l.Packet.VLAN != 100 || !l.Packet.DF || l.Packet.PayloadLen != 1472 || l.Packet.IPLen() != 1500 || *l.Expect.MTU != 1480 {
		t.Errorf("R-VLAN, R-MTU fields: %+v %+v", l.Packet, l.Expect)
	}
}

// TestParseErrorsNameTheLine: a malformed line is an error that names its
// line and says what to fix.
func TestParseErrorsNameTheLine(t *testing.T) {
	ok := `{"t": 1, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 80}` + "\n"
	for _, tc := range []struct{ line, want string }{
		{`{"t": 1, "src": "198.51.100.7"`, "not valid JSON"},
		{`not json`, "not valid JSON"},
		{`[1,2]`, "want"},
		{`{}`, "neither a packet"},
		{`{"t": 1, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 80, "expect": {"in": [], "ct": "new"}}`, "in: empty list; name at least one backend"},
		{`{"t": 1, "event": "health", "backend": "vm-a1", "healthy": false, "expect": {"eligible": []}}`, `eligible: empty list; to assert that no backend is eligible, expect "events": ["no-backends"]`},
		{`{"t": 2, "src": "1.2.3", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 2}`, `src "1.2.3" is not an IP address`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "2001:db8::1", "proto": "tcp", "sport": 1, "dport": 2}`, "one is IPv4"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "sctp"}`, `proto "sctp"`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": 300}`, `proto "300"`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1}`, "needs sport and dport"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 70000}`, "dport 70000 out of range"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 2, "flags": "SX"}`, `"X" is not one of S, A, F, R, P`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 2, "flags": "SS"}`, "given twice"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 1, "dport": 2, "flags": "S"}`, "only TCP"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "frag": "second"}`, `frag "second"`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "frag": "last", "sport": 1, "dport": 2}`, "carries no ports"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "sport": 1}`, "has no ports"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 2, "dprot": 3}`, `unknown field "dprot"`},
		{`{"t": 0.5, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 2}`, "before the previous line"},
		{`{"t": -1, "event": "remove", "backend": "x"}`, "want seconds"},
		{`{"t": 2, "event": "reboot", "backend": "x"}`, `event "reboot"`},
		{`{"t": 2, "event": "health", "backend": "x"}`, `needs "backend" and "healthy"`},
		{`{"t": 2, "event": "weight", "backend": "x", "weight": 1001}`, "weight 1001 out of range"},
		{`{"t": 2, "event": "health", "backend": "x", "healthy": true, "weight": 3}`, `has no field "weight"`},
		{`{"t": 2, "event": "add", "group": "g"}`, `needs "group" and "endpoint"`},
		{`{"t": 2, "event": "remove", "backend": "x", "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp"}`, "not both"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"ct": "maybe"}}`, `ct "maybe"`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"same": "nobody"}}`, `label "nobody" is not defined`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"eligible": ["a"]}}`, "a packet line expects"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"backend": "a", "drop": "no-backends"}}`, "implies forward"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 2, "type": 3}`, "ICMP fields"},
		{`{"t": 1, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 1, "dport": 80} {}`, "more than one JSON value"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "vlan": 4095}`, "vlan 4095 out of range 1..4094"},
		{`{"t": 2, "src": "2001:db8::7", "dst": "2001:db8::10", "proto": "esp", "df": true}`, "df: IPv6 has no DF bit"},
		{`{"t": 2, "event": "remove", "backend": "x", "vlan": 7}`, `has no field "vlan"`},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"action": "forward", "mtu": 1480}}`, "implies action too-big"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"backend": "a", "mtu": 1480}}`, "implies forward"},
		{`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "expect": {"action": "too-small"}}`, "or too-big"},
	} {
		in := ok + "\n# comment\n" + tc.line + "\n" + ok
		_, err := Parse(strings.NewReader(in), "t.jsonl")
		var te *Error
		if !errors.As(err, &te) {
			t.Errorf("%s: error %v, want a line error", tc.line, err)
			continue
		}
		if te.Line != 4 || !strings.HasPrefix(err.Error(), "t.jsonl:4: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got  %v\n want t.jsonl:4: ...%s...", tc.line, err, tc.want)
		}
	}
}

func TestDuplicateLabel(t *testing.T) {
	in := `{"t": 1, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "label": "a"}
{"t": 1, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "esp", "label": "a"}`
	if _, err := Parse(strings.NewReader(in), ""); err == nil || !strings.Contains(err.Error(), `line 2: label "a" already names line 1`) {
		t.Fatalf("got %v", err)
	}
}

func TestLongLine(t *testing.T) {
	in := `{"t": 1, "event": "remove", "backend": "` + strings.Repeat("x", MaxLineBytes) + `"}`
	if _, err := Parse(strings.NewReader(in), ""); err == nil || !strings.Contains(err.Error(), "line 1: line longer") {
		t.Fatalf("got %v", err)
	}
}

// FuzzParseTrace: no input panics; whatever parses writes back to the same
// lines (MarshalLine is ParseLine's inverse).
func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{
		`{"t": 12.5, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "tcp", "sport": 4242, "dport": 80, "flags": "S"}`,
		`{"t": 1, "src": "2001:db8::1", "dst": "2001:db8::10", "proto": "udp", "frag": "first", "id": 9, "sport": 1, "dport": 2}`,
		`{"t": 1, "src": "192.0.2.254", "dst": "203.0.113.1", "proto": "icmp", "type": 3, "code": 4, "inner": {"src": "203.0.113.1", "dst": "198.51.100.7", "proto": "tcp", "sport": 80, "dport": 4242}}`,
		`{"t": 30, "event": "health", "backend": "vm-a1", "healthy": false, "expect": {"eligible": ["a"], "events": []}}`,
		`{"event": "add", "group": "ig-a", "endpoint": {"name": "vm-a3", "ip": "10.0.1.3"}}`,
		`{"t": 2, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": 47, "label": "x", "expect": {"in": ["a", "b"], "ct": "miss"}}` + "\n" + `{"t": 3, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": 47, "expect": {"same": "x"}}`,
		"# comment\n\n{}",
		`{"t": 4, "src": "198.51.100.7", "dst": "203.0.113.10", "proto": "udp", "sport": 1, "dport": 53, "len": 1472, "vlan": 100, "df": true, "expect": {"action": "too-big", "mtu": 1480, "rules": ["R-MTU"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, err := Parse(bytes.NewReader(data), "fuzz")
		if err != nil {
			var te *Error
			if !errors.As(err, &te) || te.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := Write(&buf, lines); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(&buf, "again")
		if err != nil {
			t.Fatalf("written trace does not parse: %v\n%s", err, buf.String())
		}
		if len(again) != len(lines) {
			t.Fatalf("%d lines, then %d", len(lines), len(again))
		}
		for i := range lines {
			a, b := lines[i], again[i]
			a.No, b.No = 0, 0
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("line %d changed in a round trip:\n%+v\n%+v", i, a, b)
			}
		}
	})
}
