package trace

import (
	"encoding/json"
	"io"
	"strconv"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// MarshalLine writes a line in the trace format (without a newline).
// ParseLine(MarshalLine(l)) gives l back (but for No).
func MarshalLine(l Line) ([]byte, error) {
	t := l.T
	r := rawLine{T: &t, Label: l.Label, Expect: l.Expect}
	if p := l.Packet; p != nil {
		r.Src, r.Dst = p.Src.String(), p.Dst.String()
		r.Proto = protoJSON(p.Proto)
		if (p.Proto == compiler.IPProtoTCP || p.Proto == compiler.IPProtoUDP) && p.Frag <= targets.FragFirst {
			sp, dp := int(p.SrcPort), int(p.DstPort)
			r.Sport, r.Dport = &sp, &dp
		}
		if p.Flags != 0 {
			f := FormatFlags(p.Flags)
			r.Flags = &f
		}
		if p.Frag != targets.FragNone {
			f := p.Frag.String()
			r.Frag = &f
			id := int64(p.FragID)
			r.ID = &id
		}
		if p.PayloadLen != 0 {
			n := p.PayloadLen
			r.Len = &n
		}
		if p.VLAN != 0 {
			v := int(p.VLAN)
			r.VLAN = &v
		}
		if p.DF && p.Src.Is4() {
			df := true
			r.DF = &df
		}
		if isICMP(p.Proto) && (p.ICMPType != 0 || p.ICMPCode != 0 || p.Inner != nil) {
			ty, co := int(p.ICMPType), int(p.ICMPCode)
			r.Type, r.Code = &ty, &co
		}
		if in := p.Inner; in != nil {
			r.Inner = &rawInner{Src: in.Src.String(), Dst: in.Dst.String(), Proto: protoJSON(in.Proto), Sport: int(in.SrcPort), Dport: int(in.DstPort)}
		}
	}
	if e := l.Event; e != nil {
		r.Event = e.Kind
		switch e.Kind {
		case EventHealth:
			h := e.Healthy
			r.Backend, r.Healthy = e.Backend, &h
		case EventWeight:
			w := e.Weight
			r.Backend, r.Weight = e.Backend, &w
		case EventRemove:
			r.Backend = e.Backend
		case EventAdd:
			ep := e.Endpoint
			r.Group, r.Service, r.Endpoint = e.Group, e.Service, &ep
		}
	}
	return json.Marshal(r)
}

func protoJSON(p uint8) json.RawMessage {
	n := ProtoName(p)
	if _, err := strconv.Atoi(n); err == nil {
		return json.RawMessage(n)
	}
	return json.RawMessage(strconv.Quote(n))
}

// Write writes lines, one per line.
func Write(w io.Writer, lines []Line) error {
	for _, l := range lines {
		b, err := MarshalLine(l)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}
