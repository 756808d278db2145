package trace

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// ParsePacketSpec reads the one-line packet notation of `lbc explain`:
//
//	PROTO SRC[:PORT] > DST[:PORT] [FLAGS] [frag=first|middle|last] [id=N] [len=N] [vlan=N] [df] [type=N] [code=N] [quote=PROTO SRC:PORT>DST:PORT]
//
// for example "tcp 198.51.100.7:4242 > 203.0.113.10:80 S",
// "udp [2001:db8::7]:5000 > [2001:db8::10]:53", "udp 198.51.100.7 > 203.0.113.30 frag=middle id=7",
// "icmp 192.0.2.254 > 203.0.113.10 type=3 code=4 quote=tcp 203.0.113.10:80>198.51.100.7:4242".
// The result obeys the same rules as a trace line.
func ParsePacketSpec(s string) (targets.Packet, error) {
	fields := strings.Fields(s)
	// quote= takes the rest of the line.
	var quote string
	for i, f := range fields {
		if strings.HasPrefix(f, "quote=") {
			quote = strings.TrimPrefix(strings.Join(fields[i:], " "), "quote=")
			fields = fields[:i]
			break
		}
	}
	if len(fields) < 4 || fields[2] != ">" {
		return targets.Packet{}, errors.New(`want "PROTO SRC[:PORT] > DST[:PORT] [FLAGS] [frag=...] [id=N] [type=N code=N]", e.g. "tcp 198.51.100.7:4242 > 203.0.113.10:80 S"`)
	}
	r := rawLine{Proto: []byte(strconv.Quote(fields[0]))}
	var err error
	if r.Src, r.Sport, err = hostPort(fields[1]); err != nil {
		return targets.Packet{}, fmt.Errorf("source: %w", err)
	}
	if r.Dst, r.Dport, err = hostPort(fields[3]); err != nil {
		return targets.Packet{}, fmt.Errorf("destination: %w", err)
	}
	for _, f := range fields[4:] {
		k, v, kv := strings.Cut(f, "=")
		if strings.EqualFold(f, "df") {
			df := true
			r.DF = &df
			continue
		}
		if !kv {
			fl := f
			r.Flags = &fl
			continue
		}
		num := func() (*int, error) {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: want a number", k, v)
			}
			return &n, nil
		}
		switch k {
		case "frag":
			fr := v
			r.Frag = &fr
		case "id":
			n, err := num()
			if err != nil {
				return targets.Packet{}, err
			}
			id := int64(*n)
			r.ID = &id
		case "type":
			if r.Type, err = num(); err != nil {
				return targets.Packet{}, err
			}
		case "code":
			if r.Code, err = num(); err != nil {
				return targets.Packet{}, err
			}
		case "len":
			if r.Len, err = num(); err != nil {
				return targets.Packet{}, err
			}
		case "vlan":
			if r.VLAN, err = num(); err != nil {
				return targets.Packet{}, err
			}
		default:
			return targets.Packet{}, fmt.Errorf("%q: want FLAGS (letters SAFRP), frag=, id=, len=, vlan=, df, type=, code= or quote=", f)
		}
	}
	if quote != "" {
		q := strings.Fields(strings.ReplaceAll(quote, ">", " > "))
		if len(q) != 4 || q[2] != ">" {
			return targets.Packet{}, fmt.Errorf("quote=%q: want PROTO SRC:PORT>DST:PORT", quote)
		}
		in := &rawInner{Proto: []byte(strconv.Quote(q[0]))}
		var sp, dp *int
		if in.Src, sp, err = hostPort(q[1]); err != nil {
			return targets.Packet{}, fmt.Errorf("quote: %w", err)
		}
		if in.Dst, dp, err = hostPort(q[3]); err != nil {
			return targets.Packet{}, fmt.Errorf("quote: %w", err)
		}
		if sp != nil {
			in.Sport = *sp
		}
		if dp != nil {
			in.Dport = *dp
		}
		r.Inner = in
	}
	p, err := parsePacket(&r)
	if err != nil {
		return targets.Packet{}, err
	}
	return *p, nil
}

// hostPort reads ADDR, ADDR:PORT or [ADDR6]:PORT.
func hostPort(s string) (string, *int, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		p := int(ap.Port())
		return ap.Addr().String(), &p, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.String(), nil, nil
	}
	return "", nil, fmt.Errorf("%q is not ADDR, ADDR:PORT or [ADDR6]:PORT", s)
}

// FormatPacket writes a packet in the notation ParsePacketSpec reads.
func FormatPacket(p targets.Packet) string {
	hp := func(a netip.Addr, port uint16, has bool) string {
		if !has {
			return a.String()
		}
		return netip.AddrPortFrom(a, port).String()
	}
	has := (p.Proto == compiler.IPProtoTCP || p.Proto == compiler.IPProtoUDP) && p.Frag <= targets.FragFirst
	s := fmt.Sprintf("%s %s > %s", ProtoName(p.Proto), hp(p.Src, p.SrcPort, has), hp(p.Dst, p.DstPort, has))
	if p.Flags != 0 {
		s += " " + FormatFlags(p.Flags)
	}
	if p.Frag != targets.FragNone {
		s += fmt.Sprintf(" frag=%s id=%d", p.Frag, p.FragID)
	}
	if p.PayloadLen != 0 {
		s += fmt.Sprintf(" len=%d", p.PayloadLen)
	}
	if p.VLAN != 0 {
		s += fmt.Sprintf(" vlan=%d", p.VLAN)
	}
	if p.DF && p.Src.Is4() {
		s += " df"
	}
	if isICMP(p.Proto) && (p.ICMPType != 0 || p.ICMPCode != 0 || p.Inner != nil) {
		s += fmt.Sprintf(" type=%d code=%d", p.ICMPType, p.ICMPCode)
	}
	if in := p.Inner; in != nil {
		s += fmt.Sprintf(" quote=%s %s>%s", ProtoName(in.Proto), netip.AddrPortFrom(in.Src, in.SrcPort), netip.AddrPortFrom(in.Dst, in.DstPort))
	}
	return s
}
