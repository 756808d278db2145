package testgen

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseFrameAsLbP4 checks the frame → targets.Packet reading against
// lb.p4's parser, case by case: what it extracts, what it leaves unparsed
// (the fallback's, design decision 5, R-FRAG), and where it runs out of
// bytes (a parser error: dropped as malformed).
func TestParseFrameAsLbP4(t *testing.T) {
	const (
		eth   = "000000000001 000000000002 0800"
		ip4   = "45000028 0000 0000 4006 0000 c6336402 cb00710a"
		tcp   = "04d20050 00000000 00000000 5012 0000 0000 0000"
		udp   = "04d20035 0010 0000"
		vlan  = "000000000001 000000000002 8100 2064 0800"
		eth6  = "000000000001 000000000002 86dd"
		ip6h  = "60000000 0014 06 40 20010db8000000000000000000000001 20010db8000000000000000000000002"
		frag6 = "60000000 001c 2c 40 20010db8000000000000000000000001 20010db8000000000000000000000002 06000000 00000001"
	)
	v4src, v4dst := netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("203.0.113.10")
	for _, c := range []struct {
		name  string
		frame string
		check func(t *testing.T, f frame)
	}{
		{"R-TRK-tcp", eth + ip4 + tcp, func(t *testing.T, f frame) {
			p := f.pkt
			if f.parserError || !f.ip || !f.v4 || p.Src != v4src || p.Dst != v4dst || p.Proto != compiler.IPProtoTCP || p.SrcPort != 1234 || p.DstPort != 80 || p.Flags != targets.FlagSYN|targets.FlagACK {
				t.Errorf("%+v", p)
			}
			// total_len 40 = 20 + 20: no payload, which PayloadLen
			// cannot say (the model counts 56; Run's lengthDomain).
			if f.innerLen != 40 || p.PayloadLen != 0 {
				t.Errorf("innerLen %d, PayloadLen %d", f.innerLen, p.PayloadLen)
			}
		}},
		{"R-VLAN", vlan + "45000030 0000 0000 4011 0000 c6336402 cb00710a" + udp + "00000000 00000000", func(t *testing.T, f frame) {
			if f.pkt.VLAN != 0x064 || f.l3 != 18 || f.etherOff != 16 || f.pkt.Proto != compiler.IPProtoUDP || f.pkt.DstPort != 53 || f.pkt.PayloadLen != 20 {
				t.Errorf("%+v l3 %d", f.pkt, f.l3)
			}
		}},
		{"truncated-tcp", eth + ip4 + "04d20050", func(t *testing.T, f frame) {
			if !f.parserError {
				t.Error("a TCP header cut short must be a parser error")
			}
		}},
		{"truncated-ethernet", "000000000001", func(t *testing.T, f frame) {
			if !f.parserError {
				t.Error("want a parser error")
			}
		}},
		{"ipv4-options-unparsed", eth + "46000030 0000 0000 4006 0000 c6336402 cb00710a 00000000" + tcp, func(t *testing.T, f frame) {
			if f.parserError || f.pkt.Proto != protoUnparsed {
				t.Errorf("IPv4 with options: proto %d, want %d (unparsed)", f.pkt.Proto, protoUnparsed)
			}
		}},
		{"R-FRAG-first", eth + "45000028 0001 2000 4006 0000 c6336402 cb00710a" + tcp, func(t *testing.T, f frame) {
			if f.pkt.Frag != targets.FragFirst || f.pkt.DstPort != 80 {
				t.Errorf("%+v", f.pkt)
			}
		}},
		{"R-FRAG-last", eth + "45000028 0001 0010 4006 0000 c6336402 cb00710a" + tcp, func(t *testing.T, f frame) {
			if f.pkt.Frag != targets.FragLast || f.pkt.DstPort != 0 {
				t.Errorf("%+v", f.pkt)
			}
		}},
		{"R-FRAG-ipv6-atomic", eth6 + frag6 + tcp, func(t *testing.T, f frame) {
			if !f.pkt.Fragmented() || f.pkt.Proto != compiler.IPProtoTCP {
				t.Errorf("an atomic IPv6 fragment is still a fragment to lb.p4: %+v", f.pkt)
			}
		}},
		{"ipv6-tcp", eth6 + ip6h + tcp, func(t *testing.T, f frame) {
			if f.v4 || f.pkt.Proto != compiler.IPProtoTCP || f.innerLen != 60 || !f.pkt.DF {
				t.Errorf("%+v", f.pkt)
			}
		}},
		{"R-ICMP-error", eth + "45000038 0000 0000 4001 0000 c6336402 cb00710a 03040000 000005dc" + "45000028 0000 4000 4006 0000 cb00710a c6336402 005004d2", func(t *testing.T, f frame) {
			p := f.pkt
			if p.ICMPType != 3 || p.Inner == nil || p.Inner.Src != v4dst || p.Inner.SrcPort != 80 || p.Inner.DstPort != 1234 || !p.IsICMPError() {
				t.Errorf("%+v inner %+v", p, p.Inner)
			}
		}},
		{"ICMP-bad-quote", eth + "45000038 0000 0000 4001 0000 c6336402 cb00710a 03040000 000005dc" + "65000028 0000 4000 4006 0000 cb00710a c6336402 005004d2", func(t *testing.T, f frame) {
			if in := f.pkt.Inner; in == nil || in.Src.Is4() {
				t.Errorf("a quote of another family must reach the model as one: %+v", in)
			}
		}},
		{"non-ip", "000000000001 000000000002 0806 0001", func(t *testing.T, f frame) {
			if f.ip || f.parserError {
				t.Errorf("ARP: ip %v parserError %v", f.ip, f.parserError)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, parseFrame(mustHex(t, c.frame), false)) })
	}
}
