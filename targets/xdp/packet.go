package xdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Addresses of the Ethernet header of built packets: the router that hands
// packets to the load balancer, and the load balancer's interface.
var (
	RouterMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	LBMAC     = [6]byte{0x02, 0, 0, 0, 0, 0x02}
)

// defaultPayload is the payload length of a packet whose PayloadLen is 0.
const defaultPayload = 16

// fragment offsets (in 8-byte units) of middle and last fragments.
const (
	middleOffset = 185 // 1480 bytes
	lastOffset   = 370
)

// BuildPacket returns the Ethernet frame of a trace packet, as it would
// arrive at the load balancer: an 802.1Q tag when VLAN is set, IPv4 (DF as
// the packet says) or IPv6 (with a Fragment header when fragmented), then
// the transport header for unfragmented packets and first fragments. ICMP
// errors quote Inner's IP header and first 8 bytes, then PayloadLen bytes
// more of it. The IP datagram is
// p.IPLen() bytes long, the length R-MTU checks.
func BuildPacket(p targets.Packet) ([]byte, error) {
	src, dst := p.Src.Unmap(), p.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("packet %v → %v: want two addresses of one family", p.Src, p.Dst)
	}
	n := p.PayloadLen
	if n <= 0 {
		n = defaultPayload
	}
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i)
	}
	var l4 []byte
	if p.Frag == targets.FragNone || p.Frag == targets.FragFirst {
		var err error
		if l4, err = transport(p, src, dst, payload); err != nil {
			return nil, err
		}
	} else {
		l4 = payload
	}
	if p.VLAN > 0xfff {
		return nil, fmt.Errorf("VLAN %d: a VID has 12 bits", p.VLAN)
	}
	eth := make([]byte, 12, 18+60+len(l4))
	copy(eth[0:6], LBMAC[:])
	copy(eth[6:12], RouterMAC[:])
	if p.VLAN != 0 {
		eth = binary.BigEndian.AppendUint16(eth, 0x8100)
		eth = binary.BigEndian.AppendUint16(eth, p.VLAN)
	}
	eth = append(eth, 0, 0)
	et := eth[len(eth)-2:]
	if src.Is4() {
		binary.BigEndian.PutUint16(et, 0x0800)
		var flags uint16
		if p.DF {
			flags |= 0x4000
		}
		switch p.Frag {
		case targets.FragFirst:
			flags |= 0x2000
		case targets.FragMiddle:
			flags |= 0x2000 | middleOffset
		case targets.FragLast:
			flags |= lastOffset
		}
		return append(eth, ipv4(src, dst, p.Proto, uint16(p.FragID), flags, 64, l4)...), nil
	}
	binary.BigEndian.PutUint16(et, 0x86DD)
	if p.Frag == targets.FragNone {
		return append(eth, ipv6(src, dst, p.Proto, 64, l4)...), nil
	}
	var off uint16
	switch p.Frag {
	case targets.FragFirst:
		off = 1
	case targets.FragMiddle:
		off = middleOffset<<3 | 1
	case targets.FragLast:
		off = lastOffset << 3
	}
	fh := make([]byte, 8, 8+len(l4))
	fh[0] = p.Proto
	binary.BigEndian.PutUint16(fh[2:], off)
	binary.BigEndian.PutUint32(fh[4:], p.FragID)
	return append(eth, ipv6(src, dst, 44, 64, append(fh, l4...))...), nil
}

func transport(p targets.Packet, src, dst netip.Addr, payload []byte) ([]byte, error) {
	switch p.Proto {
	case compiler.IPProtoTCP:
		h := make([]byte, 20, 20+len(payload))
		binary.BigEndian.PutUint16(h[0:], p.SrcPort)
		binary.BigEndian.PutUint16(h[2:], p.DstPort)
		binary.BigEndian.PutUint32(h[4:], 1000)
		if p.Flags&targets.FlagACK != 0 {
			binary.BigEndian.PutUint32(h[8:], 2000)
		}
		h[12] = 5 << 4
		var f byte
		if p.Flags&targets.FlagFIN != 0 {
			f |= 0x01
		}
		if p.Flags&targets.FlagSYN != 0 {
			f |= 0x02
		}
		if p.Flags&targets.FlagRST != 0 {
			f |= 0x04
		}
		if p.Flags&targets.FlagPSH != 0 {
			f |= 0x08
		}
		if p.Flags&targets.FlagACK != 0 {
			f |= 0x10
		}
		h[13] = f
		binary.BigEndian.PutUint16(h[14:], 65535)
		h = append(h, payload...)
		if p.Frag == targets.FragNone {
			binary.BigEndian.PutUint16(h[16:], l4Checksum(src, dst, p.Proto, h))
		}
		return h, nil
	case compiler.IPProtoUDP:
		h := make([]byte, 8, 8+len(payload))
		binary.BigEndian.PutUint16(h[0:], p.SrcPort)
		binary.BigEndian.PutUint16(h[2:], p.DstPort)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(payload)))
		h = append(h, payload...)
		if p.Frag == targets.FragNone {
			c := l4Checksum(src, dst, p.Proto, h)
			if c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(h[6:], c)
		}
		return h, nil
	case compiler.IPProtoICMP, compiler.IPProtoICMPv6:
		h := make([]byte, 8, 8+60)
		h[0], h[1] = p.ICMPType, p.ICMPCode
		body := payload
		if p.Inner != nil {
			q, err := quoted(*p.Inner)
			if err != nil {
				return nil, err
			}
			body = q
			if p.PayloadLen > 0 {
				body = append(body, payload...) // the rest of the quoted packet
			}
		} else {
			binary.BigEndian.PutUint16(h[4:], 0x1234) // echo identifier
		}
		h = append(h, body...)
		if p.Proto == compiler.IPProtoICMP {
			binary.BigEndian.PutUint16(h[2:], checksum(0, h))
		} else {
			binary.BigEndian.PutUint16(h[2:], l4Checksum(src, dst, p.Proto, h))
		}
		return h, nil
	}
	return payload, nil
}

// quoted is what an ICMP error carries: the failed packet's IP header and
// the first 8 bytes after it (the ports of TCP and UDP).
func quoted(t compiler.Tuple) ([]byte, error) {
	src, dst := t.Src.Unmap(), t.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("quoted packet %v → %v: want two addresses of one family", t.Src, t.Dst)
	}
	l4 := make([]byte, 8)
	binary.BigEndian.PutUint16(l4[0:], t.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], t.DstPort)
	if t.Proto == compiler.IPProtoUDP {
		binary.BigEndian.PutUint16(l4[4:], 8+defaultPayload)
	}
	if src.Is4() {
		ip := ipv4(src, dst, t.Proto, 1, 0, 64, l4)
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+defaultPayload)) // the original length
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], checksum(0, ip[:20]))
		return ip, nil
	}
	return ipv6(src, dst, t.Proto, 64, l4), nil
}

func ipv4(src, dst netip.Addr, proto uint8, id, flags uint16, ttl uint8, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	binary.BigEndian.PutUint16(h[4:], id)
	binary.BigEndian.PutUint16(h[6:], flags)
	h[8] = ttl
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], checksum(0, h))
	return append(h, payload...)
}

func ipv6(src, dst netip.Addr, next uint8, hop uint8, payload []byte) []byte {
	h := make([]byte, 40, 40+len(payload))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = next
	h[7] = hop
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, payload...)
}

// checksum is the Internet checksum of b, starting from sum.
func checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func l4Checksum(src, dst netip.Addr, proto uint8, seg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	add(src.AsSlice())
	add(dst.AsSlice())
	sum += uint32(proto) + uint32(len(seg))
	return checksum(sum, seg)
}
