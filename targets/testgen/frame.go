package testgen

import (
	"encoding/binary"
	"net/netip"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Ethertypes and IP protocols lb.p4 parses.
const (
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	etherVLAN = 0x8100
	protoFrag = 44

	// protoUnparsed stands, in the targets.Packet handed to the model, for
	// a TCP, UDP or ICMP packet lb.p4 does not parse because of how it is
	// laid out (IPv4 options; an ICMP error quoting a fragment or a header
	// with options): targets.Packet has no field for the layout, and the
	// switch treats such packets exactly as a protocol it does not parse
	// (design decision 5). 255 is IANA's reserved protocol number.
	protoUnparsed = 255
)

// frame is an input frame read as lb.p4's parser reads it.
type frame struct {
	raw []byte
	tna bool
	// parserError: a header the parser extracts runs past the frame's
	// end (PacketTooShort): lb.p4 drops the packet as malformed.
	parserError bool
	// ip: an IPv4 or IPv6 header was parsed; otherwise the frame is
	// routed on address 0 (meta.fwd_addr is never set).
	ip, v4   bool
	l3       int    // offset of the IP header
	etherOff int    // offset of the ethertype the outer header replaces
	innerLen uint16 // what the program calls the IP datagram's length: IPv4 total_len, IPv6 payload_len + 40
	dst      [16]byte
	pkt      targets.Packet
	// domain says why the frame is outside what targets.Packet can
	// express, "" when it is inside.
	domain string
}

// parseFrame mirrors LbParser of p4/lb.p4, or with tna LbIngressParser of
// p4/tna/lb.p4 (ingress from a front-panel port; the CPU port's
// packet_out path is not a test input here).
func parseFrame(b []byte, tna bool) frame {
	f := frame{raw: b, tna: tna}
	need := func(off, n int) bool {
		if off+n > len(b) {
			f.parserError = true
			return false
		}
		return true
	}
	if !need(0, 14) {
		return f
	}
	off, et := 14, binary.BigEndian.Uint16(b[12:])
	f.etherOff = 12
	if et == etherVLAN {
		if !need(14, 4) {
			return f
		}
		f.pkt.VLAN = binary.BigEndian.Uint16(b[14:]) & 0x0fff
		f.etherOff = 16
		et, off = binary.BigEndian.Uint16(b[16:]), 18
	}
	f.l3 = off
	switch et {
	case etherIPv4:
		f.parseIPv4(off, need)
	case etherIPv6:
		f.parseIPv6(off, need)
	default:
		f.pkt.NotIP = true // routed on address 0, as f.dst is
	}
	return f
}

func (f *frame) parseIPv4(off int, need func(int, int) bool) {
	b := f.raw
	if !need(off, 20) {
		return
	}
	f.ip, f.v4 = true, true
	h := b[off:]
	ihl, proto := h[0]&0xf, h[9]
	f.innerLen = binary.BigEndian.Uint16(h[2:])
	mf, fragOff := h[6]&0x20 != 0, binary.BigEndian.Uint16(h[6:])&0x1fff
	p := &f.pkt
	p.Src, p.Dst = netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20]))
	f.dst = netip.AddrFrom4([4]byte(h[16:20])).As16()
	p.Proto, p.DF = proto, h[6]&0x40 != 0
	if mf || fragOff != 0 {
		p.Frag, p.FragID = fragKind(mf, fragOff), uint32(binary.BigEndian.Uint16(h[4:]))
		if !f.tna && fragOff == 0 && ihl == 5 && (proto == compiler.IPProtoTCP || proto == compiler.IPProtoUDP) {
			f.parseL4(off+20, proto, need)
		}
		return
	}
	if ihl != 5 {
		if proto == compiler.IPProtoTCP || proto == compiler.IPProtoUDP || proto == compiler.IPProtoICMP {
			p.Proto = protoUnparsed
		}
		return
	}
	switch proto {
	case compiler.IPProtoTCP, compiler.IPProtoUDP:
		f.parseL4(off+20, proto, need)
	case compiler.IPProtoICMP:
		f.parseICMP(off+20, true, need)
	}
}

func (f *frame) parseIPv6(off int, need func(int, int) bool) {
	b := f.raw
	if !need(off, 40) {
		return
	}
	f.ip = true
	h := b[off:]
	f.innerLen = binary.BigEndian.Uint16(h[4:]) + 40
	p := &f.pkt
	p.Src, p.Dst = netip.AddrFrom16([16]byte(h[8:24])), netip.AddrFrom16([16]byte(h[24:40]))
	f.dst = [16]byte(h[24:40])
	if p.Src.Is4In6() || p.Dst.Is4In6() {
		f.domain = "an IPv6 packet with an IPv4-mapped address: targets.Packet holds netip addresses, which the model unmaps to IPv4"
	}
	p.Proto, p.DF = h[6], true
	switch p.Proto {
	case protoFrag:
		if !need(off+40, 8) {
			return
		}
		fh := b[off+40:]
		p.Proto = fh[0]
		fragOff, more := binary.BigEndian.Uint16(fh[2:])>>3, fh[3]&1 != 0
		p.Frag, p.FragID = fragKind(more, fragOff), binary.BigEndian.Uint32(fh[4:])
		if p.Frag == targets.FragNone {
			// An atomic fragment (offset 0, M clear) still has a
			// Fragment header: lb.p4 sends it to the fallback as every
			// fragment; the model knows fragments by their kind.
			p.Frag = targets.FragFirst
		}
		if !f.tna && fragOff == 0 && (p.Proto == compiler.IPProtoTCP || p.Proto == compiler.IPProtoUDP) {
			f.parseL4(off+48, p.Proto, need)
		}
	case compiler.IPProtoTCP, compiler.IPProtoUDP:
		f.parseL4(off+40, p.Proto, need)
	case compiler.IPProtoICMPv6:
		f.parseICMP(off+40, false, need)
	}
}

func fragKind(more bool, off uint16) targets.Frag {
	switch {
	case off == 0 && more:
		return targets.FragFirst
	case off == 0:
		return targets.FragNone
	case more:
		return targets.FragMiddle
	}
	return targets.FragLast
}

func (f *frame) parseL4(off int, proto uint8, need func(int, int) bool) {
	b, p := f.raw, &f.pkt
	n := 20
	if proto == compiler.IPProtoUDP {
		n = 8
	}
	if !need(off, n) {
		return
	}
	p.SrcPort, p.DstPort = binary.BigEndian.Uint16(b[off:]), binary.BigEndian.Uint16(b[off+2:])
	if proto == compiler.IPProtoTCP {
		fl := b[off+13]
		for bit, flag := range map[uint8]uint8{0x02: targets.FlagSYN, 0x10: targets.FlagACK, 0x01: targets.FlagFIN, 0x04: targets.FlagRST, 0x08: targets.FlagPSH} {
			if fl&bit != 0 {
				p.Flags |= flag
			}
		}
	}
	f.setPayload(n)
}

// setPayload sets PayloadLen so that the model's idea of the datagram's
// length (targets.Packet.IPLen, which R-MTU adds the outer header to) is
// the program's (innerLen, from the header); l4 is the transport header's
// length. A length targets.Packet cannot express (a payload of 0 bytes or
// less: PayloadLen 0 means a default) is left to Model.Run, which
// checks whether R-MTU could tell the two lengths apart.
func (f *frame) setPayload(l4 int) {
	if f.pkt.Inner != nil {
		// An ICMP error: PayloadLen counts what it quotes past the
		// quoted IP header and its first 8 bytes, and 0 is none, so the
		// datagram's length without it is IPLen's.
		f.pkt.PayloadLen = 0
		if n := int(f.innerLen) - f.pkt.IPLen(); n >= 0 {
			f.pkt.PayloadLen = n
		}
		return
	}
	hdr := 20 + l4
	if !f.v4 {
		hdr = 40 + l4
		if f.pkt.Fragmented() {
			hdr += 8
		}
	}
	if n := int(f.innerLen) - hdr; n > 0 {
		f.pkt.PayloadLen = n
	}
}

// parseICMP reads an ICMP (v4) or ICMPv6 header and, for the errors lb.p4
// looks up, the quoted IP header and ports.
func (f *frame) parseICMP(off int, v4 bool, need func(int, int) bool) {
	b, p := f.raw, &f.pkt
	if !need(off, 8) {
		return
	}
	p.ICMPType, p.ICMPCode = b[off], b[off+1]
	errType := (v4 && (p.ICMPType == 3 || p.ICMPType == 11 || p.ICMPType == 12)) || (!v4 && p.ICMPType >= 1 && p.ICMPType <= 4)
	if !errType {
		return
	}
	q := off + 8
	in := &compiler.Tuple{}
	if v4 {
		if !need(q, 20) {
			return
		}
		h := b[q:]
		ver, ihl, fragOff, proto := h[0]>>4, h[0]&0xf, binary.BigEndian.Uint16(h[6:])&0x1fff, h[9]
		if ver != 4 {
			// Not a header of the error's family: lb.p4 drops it as
			// malformed; so does the model, told the quote's addresses
			// are not IPv4.
			in.Src, in.Dst, in.Proto = netip.IPv6Unspecified(), netip.IPv6Unspecified(), proto
			p.Inner = in
			return
		}
		in.Src, in.Dst, in.Proto = netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20])), proto
		if ihl != 5 || fragOff != 0 {
			in.Proto = protoUnparsed
		}
		q += 20
	} else {
		if !need(q, 40) {
			return
		}
		h := b[q:]
		if h[0]>>4 != 6 {
			in.Src, in.Dst, in.Proto = netip.IPv4Unspecified(), netip.IPv4Unspecified(), h[6]
			p.Inner = in
			return
		}
		in.Src, in.Dst, in.Proto = netip.AddrFrom16([16]byte(h[8:24])), netip.AddrFrom16([16]byte(h[24:40])), h[6]
		if in.Src.Is4In6() || in.Dst.Is4In6() {
			f.domain = "an ICMPv6 error quoting an IPv4-mapped address: the model unmaps it to IPv4"
		}
		q += 40
	}
	p.Inner = in
	if in.Proto == compiler.IPProtoTCP || in.Proto == compiler.IPProtoUDP {
		if !need(q, 4) {
			return
		}
		in.SrcPort, in.DstPort = binary.BigEndian.Uint16(b[q:]), binary.BigEndian.Uint16(b[q+2:])
	}
	f.setPayload(8)
}
