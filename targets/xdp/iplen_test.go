package xdp_test

import (
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestRMTU_IPLenIsTheBuiltLength: the R-MTU check of the reference model
// reads targets.Packet.IPLen; the packets the XDP replay builds must be
// exactly that long, or the model and the program would judge different
// sizes.
func TestRMTU_IPLenIsTheBuiltLength(t *testing.T) {
	v4s, v4d := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.10")
	v6s, v6d := netip.MustParseAddr("2001:db8::7"), netip.MustParseAddr("2001:db8::10")
	var pkts []targets.Packet
	for _, fam := range [][2]netip.Addr{{v4s, v4d}, {v6s, v6d}} {
		for _, proto := range []uint8{compiler.IPProtoTCP, compiler.IPProtoUDP, compiler.IPProtoICMP, compiler.IPProtoESP, compiler.IPProtoGRE} {
			if proto == compiler.IPProtoICMP && fam[0].Is6() {
				proto = compiler.IPProtoICMPv6
			}
			for _, frag := range []targets.Frag{targets.FragNone, targets.FragFirst, targets.FragMiddle, targets.FragLast} {
				for _, n := range []int{0, 1, 1400, 1472, 1480} {
					p := targets.Packet{Src: fam[0], Dst: fam[1], Proto: proto, Frag: frag, FragID: 7, PayloadLen: n}
					if (proto == compiler.IPProtoTCP || proto == compiler.IPProtoUDP) && frag <= targets.FragFirst {
						p.SrcPort, p.DstPort = 4242, 80
					}
					pkts = append(pkts, p)
				}
			}
		}
		icmp := uint8(compiler.IPProtoICMP)
		if fam[0].Is6() {
			icmp = compiler.IPProtoICMPv6
		}
		for _, n := range []int{0, 1, 520} { // quoted bytes past the first 8
			pkts = append(pkts, targets.Packet{Src: fam[0], Dst: fam[1], Proto: icmp, ICMPType: 3, ICMPCode: 4, PayloadLen: n,
				Inner: &compiler.Tuple{Src: fam[1], Dst: fam[0], Proto: compiler.IPProtoTCP, SrcPort: 80, DstPort: 4242}})
		}
	}
	for _, p := range pkts {
		f, err := xdp.BuildPacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(f) - 14; got != p.IPLen() {
			t.Errorf("%v → %v proto %d frag %s len %d: built %d bytes of IP, IPLen says %d", p.Src, p.Dst, p.Proto, p.Frag, p.PayloadLen, got, p.IPLen())
		}
	}
}
