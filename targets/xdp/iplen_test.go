package xdp

import (
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// R-MTU: the model measures targets.Packet.IPLen against the MTU; the
// replay frames must be exactly that long after their Ethernet header.
func TestRMTU_IPLenIsTheFramesIPLength(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")
	vip4, vip6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10")
	inner := &compiler.Tuple{Src: vip4, Dst: v4, Proto: compiler.IPProtoTCP, SrcPort: 80, DstPort: 4000}
	inner6 := &compiler.Tuple{Src: vip6, Dst: v6, Proto: compiler.IPProtoUDP, SrcPort: 53, DstPort: 4000}
	for _, p := range []targets.Packet{
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoTCP, SrcPort: 1, DstPort: 80},
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoTCP, SrcPort: 1, DstPort: 80, PayloadLen: 1460, DF: true},
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 53, PayloadLen: 1472},
		{Src: v6, Dst: vip6, Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 53, PayloadLen: 1452},
		{Src: v6, Dst: vip6, Proto: compiler.IPProtoTCP, SrcPort: 1, DstPort: 80, PayloadLen: 1000},
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 53, Frag: targets.FragFirst, FragID: 9, PayloadLen: 1472},
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoUDP, Frag: targets.FragMiddle, FragID: 9, PayloadLen: 1480},
		{Src: v6, Dst: vip6, Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 53, Frag: targets.FragFirst, FragID: 9, PayloadLen: 1000},
		{Src: v6, Dst: vip6, Proto: compiler.IPProtoUDP, Frag: targets.FragLast, FragID: 9, PayloadLen: 100},
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoESP, PayloadLen: 300},
		{Src: v4, Dst: vip4, Proto: compiler.IPProtoICMP, ICMPType: 8},
		{Src: netip.MustParseAddr("192.0.2.254"), Dst: vip4, Proto: compiler.IPProtoICMP, ICMPType: 3, ICMPCode: 4, Inner: inner},
		{Src: netip.MustParseAddr("2001:db8:ffff::fe"), Dst: vip6, Proto: compiler.IPProtoICMPv6, ICMPType: 2, Inner: inner6},
	} {
		f, err := BuildPacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(f) - l2HeaderLen(f); got != p.IPLen() {
			t.Errorf("%v → %v proto %d frag %v payload %d: frame carries %d bytes of IP, IPLen says %d", p.Src, p.Dst, p.Proto, p.Frag, p.PayloadLen, got, p.IPLen())
		}
	}
}

// l2HeaderLen is 14, or 18 with an 802.1Q tag.
func l2HeaderLen(f []byte) int {
	if len(f) >= 18 && f[12] == 0x81 && f[13] == 0x00 {
		return 18
	}
	return 14
}

// R-VLAN, R-MTU: a packet's VLAN becomes one 802.1Q tag in front of the
// IP ethertype; DF sets IPv4's don't-fragment bit; neither changes the IP
// packet.
func TestRVLAN_BuildPacketTagAndDF(t *testing.T) {
	p := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 53}
	plain, err := BuildPacket(p)
	if err != nil {
		t.Fatal(err)
	}
	p.VLAN, p.DF = 100, true
	tagged, err := BuildPacket(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(tagged) != len(plain)+4 || tagged[12] != 0x81 || tagged[13] != 0 || tagged[14] != 0 || tagged[15] != 100 || tagged[16] != 0x08 || tagged[17] != 0 {
		t.Fatalf("tagged frame header % x, want 81 00 00 64 08 00 after the MACs", tagged[:18])
	}
	if tagged[18+6]&0x40 == 0 || plain[14+6]&0x40 != 0 {
		t.Fatalf("DF bit: tagged %#x, plain %#x; want set only with DF", tagged[18+6], plain[14+6])
	}
	if len(tagged)-l2HeaderLen(tagged) != p.IPLen() {
		t.Fatalf("tagged frame carries %d bytes of IP, IPLen says %d", len(tagged)-18, p.IPLen())
	}
	p.VLAN = 4095
	if _, err := BuildPacket(p); err == nil {
		t.Fatal("VLAN 4095 accepted")
	}
}
