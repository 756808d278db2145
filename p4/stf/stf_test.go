package stf

import (
	"os"
	"strings"
	"testing"
)

// TestParseBMv2STF: a test in the exact form P4Testgen's bmv2 back end
// writes (quoted names, hex exact keys, a 0b LPM key with a priority, a
// default action, a masked expected packet).
func TestParseBMv2STF(t *testing.T) {
	b, err := os.ReadFile("testdata/bmv2.stf")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if tc.Seed != "1000" || tc.Coverage != "0.42" || tc.Drop() {
		t.Errorf("seed %q coverage %q drop %v", tc.Seed, tc.Coverage, tc.Drop())
	}
	if len(tc.Entries) != 2 || len(tc.Defaults) != 1 || len(tc.Packets) != 1 || len(tc.Expects) != 1 {
		t.Fatalf("parsed %+v", tc)
	}
	vip := tc.Entries[0]
	if vip.Table != "LbIngress.vip_port" || vip.Priority != -1 || vip.Action != "LbIngress.set_service_id" || len(vip.Matches) != 3 ||
		vip.Matches[0].Field != "dst_addr" || vip.Matches[0].Bits != 128 || vip.Matches[0].Value.Text(16) != "ffffcb00710a" ||
		vip.Matches[2].Value.Int64() != 80 || vip.Args[0].Name != "service_id" || vip.Args[0].Value.Int64() != 1 {
		t.Errorf("vip_port entry %+v", vip)
	}
	fwd := tc.Entries[1]
	if fwd.Priority != 1 || fwd.Matches[0].Bits != 128 || fwd.Matches[0].Mask.BitLen() != 128 || fwd.Matches[0].Mask.TrailingZeroBits() != 18 ||
		len(fwd.Args) != 2 || fwd.Args[1].Value.Int64() != 0xaa {
		t.Errorf("forward entry (an LPM /110 as 0b with 18 *): %+v", fwd)
	}
	if d := tc.Defaults[0]; d.Table != "LbIngress.egress_mtu" || d.Action != "LbIngress.set_mtu" || d.Args[0].Value.Int64() != 1500 {
		t.Errorf("default %+v", d)
	}
	if p := tc.Packets[0]; p.Port != 0 || len(p.Data) != 54 {
		t.Errorf("packet port %d, %d bytes", p.Port, len(p.Data))
	}
	e := tc.Expects[0]
	out := append([]byte(nil), e.Data...)
	out[12], out[13] = 0x12, 0x34 // under ****: any value
	if !e.Matches(2, out) {
		t.Errorf("expect does not match a packet differing only under its wildcards")
	}
	out[0] = 1
	if e.Matches(2, out) || e.Matches(3, e.Data) || e.Matches(2, e.Data[:10]) {
		t.Errorf("expect matches another packet, port or length")
	}
}

// TestParseTofinoSTF: P4Testgen's tofino back end writes names unquoted,
// ternary keys as 0b with *; no expect line is a drop.
func TestParseTofinoSTF(t *testing.T) {
	b, err := os.ReadFile("testdata/tofino.stf")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	e := tc.Entries[0]
	if tc.Seed != "7" || tc.Coverage != "0.13" || !tc.Drop() || e.Table != "LbIngress.tuples" || e.Action != "LbIngress.use_tcp_a2_t5" ||
		len(e.Args) != 0 || e.Matches[1].Mask.Sign() != 0 || e.Matches[2].Value.Int64() != 5 || e.Matches[2].Mask.Int64() != 7 || tc.Packets[0].Port != 4 {
		t.Errorf("parsed %+v", tc)
	}
}

// TestParseRefusesWhatItCannotRead: a line it does not understand is an
// error naming the line.
func TestParseRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"packet 0 0g", "line 1: packet data"},
		{"# x\nadd T f:0x1 a(p:zz)", `line 2: action "a(p:zz)": argument p: "zz" is not a number`},
		{"add T f:0b12 a()", `line 1: add: match f: "0b12": binary digit '2'`},
		{"expect x", `line 1: expect port "x"`},
		{"wait", `line 1: unknown command "wait"`},
		{"add T f:0x1", "want one ACTION(ARGS) at the end"},
	} {
		if _, err := Parse([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}
