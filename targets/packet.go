package targets

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
)

// TCP flags as traces spell them.
const (
	FlagSYN uint8 = 1 << iota
	FlagACK
	FlagFIN
	FlagRST
	FlagPSH
)

// Frag says which piece of a fragmented datagram a packet is.
type Frag uint8

// Fragment kinds. FragNone is an unfragmented packet; FragFirst carries the
// transport header (offset 0, more-fragments set); FragMiddle and FragLast
// carry no ports (R-FRAG).
const (
	FragNone Frag = iota
	FragFirst
	FragMiddle
	FragLast
)

func (f Frag) String() string {
	return [...]string{"", "first", "middle", "last"}[f]
}

// Packet is the header fields of one packet as the datapaths see them. The
// replay path of a real datapath builds bytes from it; the reference model
// reads the fields.
type Packet struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16 // zero for non-first fragments and portless protocols
	Flags            uint8  // TCP flags, FlagSYN|FlagACK|...
	Frag             Frag
	FragID           uint32 // IP identification of a fragmented datagram
	PayloadLen       int    // bytes after the transport header; 0 means a small default (an ICMP error: quoted bytes after the quote's first 8; 0 means none)
	// VLAN is the VLAN ID (1..4094) of the packet's one 802.1Q tag, 0 when
	// untagged. Every datapath parses it and keeps it on what it forwards,
	// so that tagged traffic behaves exactly as untagged traffic (R-VLAN).
	VLAN uint16
	// DF is IPv4's don't-fragment bit. IPv6 is never fragmented on the way,
	// so an IPv6 packet counts as DF whatever this says (R-MTU).
	DF bool
	// ICMPType/ICMPCode for ICMP and ICMPv6 packets.
	ICMPType, ICMPCode uint8
	// Inner is the packet an ICMP error quotes (destination unreachable,
	// packet too big, time exceeded; and their ICMPv6 forms), as sent: from
	// the VIP to the client. See ICMP errors below.
	Inner *compiler.Tuple
	// NotIP marks a frame that carries neither IPv4 nor IPv6 (another
	// EtherType). Every datapath leaves it to the network: not ours,
	// routed (P4) or passed (XDP) as it is. The other fields are unused.
	NotIP bool
}

// ICMP errors: a router that cannot deliver a reply sent from the VIP
// (backends answer clients directly, with the VIP as source) sends the
// error to the VIP. The datapaths send it to the backend of the flow it
// quotes: they reverse the quoted tuple (client → VIP), find the service,
// look the flow up in conntrack (without creating or refreshing an entry)
// and, on a miss, pick the backend from the ring by that flow's affinity
// tuple. The error itself is never tracked.

// IsICMPError reports an ICMP error that quotes a packet: IPv4 ICMP
// types 3, 11 and 12, ICMPv6 types 1 to 4, each in its own family. A
// middle or last fragment carries no ICMP header: no datapath can tell it
// is part of an error.
func (p Packet) IsICMPError() bool {
	if p.Frag == FragMiddle || p.Frag == FragLast {
		return false
	}
	switch {
	case p.Proto == compiler.IPProtoICMP && p.Src.Unmap().Is4():
		return p.ICMPType == 3 || p.ICMPType == 11 || p.ICMPType == 12
	case p.Proto == compiler.IPProtoICMPv6 && p.Src.Is6() && !p.Src.Is4In6():
		return p.ICMPType >= 1 && p.ICMPType <= 4
	}
	return false
}

// QuotedFlow is the flow an ICMP error is about: the quoted packet went
// from the VIP to the client, so the flow is its reverse. It is the zero
// Tuple when the packet quotes nothing.
func (p Packet) QuotedFlow() compiler.Tuple {
	in := p.Inner
	if in == nil {
		return compiler.Tuple{}
	}
	return compiler.Tuple{Src: in.Dst.Unmap(), Dst: in.Src.Unmap(), Proto: in.Proto, SrcPort: in.DstPort, DstPort: in.SrcPort}
}

// IsSYN reports a TCP SYN with ACK clear (R-CT-1).
func (p Packet) IsSYN() bool {
	return p.Proto == compiler.IPProtoTCP && p.Flags&FlagSYN != 0 && p.Flags&FlagACK == 0 && p.Frag <= FragFirst
}

// DefaultPayloadLen is the payload of a packet whose PayloadLen is 0.
const DefaultPayloadLen = 16

// IPLen is the length of the packet's IP datagram as a datapath receives
// it (what R-MTU adds the encapsulation overhead to): the IPv4 header (20)
// or the IPv6 header (40, and 8 for the Fragment header of a fragment),
// the transport header where the packet carries one (TCP 20, UDP 8, ICMP
// 8; none for other protocols and non-first fragments), and the payload:
// PayloadLen bytes (DefaultPayloadLen when 0), or for an ICMP error the
// quoted packet's IP header, its first 8 bytes, and PayloadLen bytes more
// of it (0: none; routers quote up to 576 or 1280 bytes, RFC 1812 4.3.2.3,
// RFC 4443 2.4).
func (p Packet) IPLen() int {
	n := 20
	if !p.Src.Unmap().Is4() {
		n = 40
		if p.Fragmented() {
			n += 8
		}
	}
	payload := p.PayloadLen
	if payload <= 0 {
		payload = DefaultPayloadLen
	}
	if p.Frag == FragMiddle || p.Frag == FragLast {
		return n + payload
	}
	switch p.Proto {
	case compiler.IPProtoTCP:
		n += 20
	case compiler.IPProtoUDP:
		n += 8
	case compiler.IPProtoICMP, compiler.IPProtoICMPv6:
		n += 8
		if p.Inner != nil {
			q := 20
			if !p.Inner.Src.Unmap().Is4() {
				q = 40
			}
			return n + q + 8 + max(p.PayloadLen, 0)
		}
	}
	return n + payload
}

// Fragmented reports whether the packet is any piece of a fragmented datagram.
func (p Packet) Fragmented() bool { return p.Frag != FragNone }

// Tuple returns the packet's header tuple.
func (p Packet) Tuple() compiler.Tuple {
	return compiler.Tuple{Src: p.Src, Dst: p.Dst, Proto: p.Proto, SrcPort: p.SrcPort, DstPort: p.DstPort}
}

// Action is what a datapath did with a packet.
type Action uint8

// Actions.
const (
	Forward  Action = iota // encapsulated to Verdict.Backend
	Drop                   // dropped; Verdict.DropReason says why
	NotOurs                // no service: passed on untouched
	Fallback               // sent out the fallback port (P4: fragments, unparsed protocols)
	TooBig                 // answered from the VIP with ICMP fragmentation needed / packet too big (R-MTU)
)

func (a Action) String() string {
	return [...]string{"forward", "drop", "not-ours", "fallback", "too-big"}[a]
}

// Conntrack outcomes, as replay prints them.
const (
	CTHit       = "hit"       // a valid entry decided the backend
	CTMiss      = "miss"      // looked up, no valid entry: selected afresh
	CTNew       = "new"       // a SYN that skips lookup (R-CT-1/2): selected afresh
	CTUntracked = "untracked" // the protocol is not tracked for this service (R-CT-3)
)

// Drop reasons, shared by every datapath's counters.
const (
	DropNoBackends = "no-backends" // the eligible set is empty (R-ELIG-3/4 drop)
	DropMalformed  = "malformed"   // truncated or inconsistent headers
	// DropNoService: the VIP row that matched names a service no row
	// holds. lbc never leaves that state (it writes a service before its
	// VIPs and deletes VIPs first), but a datapath given it drops the packet
	// rather than try a less specific VIP row (p4/lb.p4's DROP_NO_SERVICE).
	DropNoService = "no-service"
)

// Step is one decision of the per-packet algorithm, with its rule ID.
type Step struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

// Verdict is a datapath's decision for one packet.
type Verdict struct {
	Action     Action
	ServiceID  uint32
	Service    string // name, where known
	BackendID  uint32
	Backend    string // name, where known
	CT         string // CTHit, CTMiss, CTNew, CTUntracked ("" when no service)
	DropReason string
	// MTU is the next-hop MTU a TooBig answer announces (R-MTU).
	MTU   uint16
	Steps []Step // the reference model fills these; other targets may not
}

// Same reports whether two verdicts agree on everything a datapath can
// observe (not the explanation).
func (v Verdict) Same(o Verdict) bool {
	return v.Action == o.Action && v.ServiceID == o.ServiceID && v.BackendID == o.BackendID && v.CT == o.CT && v.DropReason == o.DropReason && v.MTU == o.MTU
}

func (v Verdict) String() string {
	var b strings.Builder
	b.WriteString(v.Action.String())
	if v.Action == Forward {
		fmt.Fprintf(&b, " backend %d", v.BackendID)
		if v.Backend != "" {
			fmt.Fprintf(&b, " (%s)", v.Backend)
		}
	}
	if v.CT != "" {
		fmt.Fprintf(&b, " ct=%s", v.CT)
	}
	if v.DropReason != "" {
		fmt.Fprintf(&b, " reason=%s", v.DropReason)
	}
	return b.String()
}
