package sim

import (
	"context"
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/targets"
)

// TestICMPErrorFragments: only an unfragmented ICMP error (or its first
// fragment) is recognised as an error; a middle or last fragment has no
// ICMP header, so it is load-balanced like any ICMP fragment (R-FRAG).
func TestICMPErrorFragments(t *testing.T) {
	b, err := examples.Files.ReadFile("udp-fragments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec, err := compiler.Load("udp-fragments.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	d := New(Options{})
	if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("203.0.113.30")
	client := netip.MustParseAddr("198.51.100.7")
	inner := &compiler.Tuple{Src: vip, Dst: client, Proto: compiler.IPProtoUDP, SrcPort: 5000, DstPort: 40000}
	for _, tt := range []struct {
		frag      targets.Frag
		wantError bool
	}{{targets.FragNone, true}, {targets.FragFirst, true}, {targets.FragMiddle, false}, {targets.FragLast, false}} {
		pkt := targets.Packet{Src: netip.MustParseAddr("192.0.2.254"), Dst: vip, Proto: compiler.IPProtoICMP, ICMPType: 3, ICMPCode: 4, Frag: tt.frag, FragID: 9}
		if tt.frag <= targets.FragFirst {
			pkt.Inner = inner
		}
		v, det, err := d.ProcessDetail(pkt, 0)
		if err != nil {
			t.Fatal(err)
		}
		if det.ICMPError != tt.wantError || v.Action != targets.Forward {
			t.Errorf("frag %q: icmpError %v action %s, want icmpError %v and forward", tt.frag, det.ICMPError, v.Action, tt.wantError)
		}
	}
}
