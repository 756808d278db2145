package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Event kinds of a trace.
const (
	EventHealth = "health" // {"event":"health","backend":"vm-a1","healthy":false}
	EventWeight = "weight" // {"event":"weight","backend":"vm-a1","weight":0}
	EventRemove = "remove" // {"event":"remove","backend":"vm-a1"}
	EventAdd    = "add"    // {"event":"add","group":"ig-a","endpoint":{"name":"vm-a3","ip":"10.0.1.3"}}
)

// Line is one line of a trace: a packet or an event.
type Line struct {
	// No is the 1-based line number in the file it was read from.
	No int
	// T is the virtual time in seconds; lines are in time order.
	T      float64
	Packet *targets.Packet
	Event  *Event
	// Label names a packet so that a later expectation can refer to its
	// backend ("same": "a").
	Label  string
	Expect *Expect
}

// Event changes the configuration or the health state.
type Event struct {
	Kind    string
	Backend string // health, weight, remove: the endpoint's name
	Healthy bool   // health
	Weight  int    // weight
	Group   string // add: the backend group to add to
	// Service disambiguates add when several services have a group of
	// that name.
	Service  string
	Endpoint compiler.Endpoint // add
}

// rawLine is a line as JSON spells it.
type rawLine struct {
	T        *float64           `json:"t,omitempty"`
	Src      string             `json:"src,omitempty"`
	Dst      string             `json:"dst,omitempty"`
	Proto    json.RawMessage    `json:"proto,omitempty"`
	Sport    *int               `json:"sport,omitempty"`
	Dport    *int               `json:"dport,omitempty"`
	Flags    *string            `json:"flags,omitempty"`
	Frag     *string            `json:"frag,omitempty"`
	ID       *int64             `json:"id,omitempty"`
	Len      *int               `json:"len,omitempty"`
	VLAN     *int               `json:"vlan,omitempty"`
	DF       *bool              `json:"df,omitempty"`
	Type     *int               `json:"type,omitempty"`
	Code     *int               `json:"code,omitempty"`
	Inner    *rawInner          `json:"inner,omitempty"`
	Event    string             `json:"event,omitempty"`
	Backend  string             `json:"backend,omitempty"`
	Healthy  *bool              `json:"healthy,omitempty"`
	Weight   *int               `json:"weight,omitempty"`
	Group    string             `json:"group,omitempty"`
	Service  string             `json:"service,omitempty"`
	Endpoint *compiler.Endpoint `json:"endpoint,omitempty"`
	Label    string             `json:"label,omitempty"`
	Expect   *Expect            `json:"expect,omitempty"`
}

// rawInner is the packet an ICMP error quotes, as sent (VIP → client).
type rawInner struct {
	Src   string          `json:"src"`
	Dst   string          `json:"dst"`
	Proto json.RawMessage `json:"proto"`
	Sport int             `json:"sport,omitempty"`
	Dport int             `json:"dport,omitempty"`
}

// protoNames are the names a trace's "proto" and the packet notation
// read, spelled as /etc/protocols does: ipip is IPv4 in IP (4), ipv6 is
// IPv6 encapsulated in IP (41). They are compiler.ProtoName's names, so
// that what explain prints reads back.
var protoNames = map[string]uint8{
	"tcp": compiler.IPProtoTCP, "udp": compiler.IPProtoUDP, "icmp": compiler.IPProtoICMP,
	"icmpv6": compiler.IPProtoICMPv6, "esp": compiler.IPProtoESP, "gre": compiler.IPProtoGRE,
	"ipip": compiler.IPProtoIPIP, "ipv6": compiler.IPProtoIPv6,
}

// protoChoices lists protoNames for errors.
const protoChoices = "tcp, udp, icmp, icmpv6, esp, gre, ipip, ipv6 or a number 0..255"

// ProtoName is the trace spelling of an IP protocol number: its name, else
// the number; compiler.ProtoName's, so that what lbc prints reads back
// (protoNames holds the same names, which TestProtoNames checks).
func ProtoName(p uint8) string { return compiler.ProtoName(p) }

func parseProto(raw json.RawMessage) (uint8, error) {
	if len(raw) == 0 {
		return 0, errors.New(`missing "proto" (` + protoChoices + `)`)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var n float64
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, fmt.Errorf("proto %s: want a name or a number", raw)
		}
		s = strconv.FormatFloat(n, 'f', -1, 64)
	}
	if p, ok := protoNames[strings.ToLower(s)]; ok {
		return p, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return 0, fmt.Errorf("proto %q: want %s", s, protoChoices)
	}
	return uint8(n), nil
}

func parseAddr(field, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, fmt.Errorf("missing %q address", field)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IP address", field, s)
	}
	return a.Unmap(), nil
}

func port(field string, p *int) (uint16, error) {
	if p == nil {
		return 0, nil
	}
	if *p < 0 || *p > 65535 {
		return 0, fmt.Errorf("%s %d out of range 0..65535", field, *p)
	}
	return uint16(*p), nil
}

// ParseFlags reads TCP flags spelled with the letters S, A, F, R, P.
func ParseFlags(s string) (uint8, error) {
	var f uint8
	for _, c := range s {
		var b uint8
		switch c {
		case 'S':
			b = targets.FlagSYN
		case 'A':
			b = targets.FlagACK
		case 'F':
			b = targets.FlagFIN
		case 'R':
			b = targets.FlagRST
		case 'P':
			b = targets.FlagPSH
		default:
			return 0, fmt.Errorf("flags %q: %q is not one of S, A, F, R, P", s, string(c))
		}
		if f&b != 0 {
			return 0, fmt.Errorf("flags %q: %q given twice", s, string(c))
		}
		f |= b
	}
	return f, nil
}

// FormatFlags spells TCP flags in the order SAFRP.
func FormatFlags(f uint8) string {
	var b strings.Builder
	for i, c := range "SAFRP" {
		if f&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func parseFrag(s string) (targets.Frag, error) {
	switch s {
	case "first":
		return targets.FragFirst, nil
	case "middle":
		return targets.FragMiddle, nil
	case "last":
		return targets.FragLast, nil
	}
	return 0, fmt.Errorf("frag %q: want first, middle or last (absent for an unfragmented packet)", s)
}

// ParseLine parses one line. It does not know the previous line: a line
// without "t" gets T = -1, which Parse replaces with the previous time.
func ParseLine(b []byte) (Line, error) {
	var r rawLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Line{}, jsonErr(err)
	}
	if dec.More() {
		return Line{}, errors.New("more than one JSON value on the line")
	}
	l := Line{T: -1, Label: r.Label, Expect: r.Expect}
	if r.T != nil {
		if math.IsNaN(*r.T) || math.IsInf(*r.T, 0) || *r.T < 0 || *r.T > 1e9 {
			return Line{}, fmt.Errorf("t %v: want seconds in 0..1e9", *r.T)
		}
		l.T = *r.T
	}
	isPacket := r.Src != "" || r.Dst != "" || len(r.Proto) > 0
	switch {
	case r.Event != "" && isPacket:
		return Line{}, errors.New(`a line is a packet (src, dst, proto) or an event, not both`)
	case r.Event != "":
		e, err := parseEvent(&r)
		if err != nil {
			return Line{}, err
		}
		l.Event = e
	case isPacket:
		p, err := parsePacket(&r)
		if err != nil {
			return Line{}, err
		}
		l.Packet = p
	default:
		return Line{}, errors.New(`neither a packet (src, dst, proto) nor an event ("event": health|weight|remove|add)`)
	}
	if r.Expect != nil {
		if err := r.Expect.validate(l.Event != nil); err != nil {
			return Line{}, fmt.Errorf("expect: %w", err)
		}
	}
	if l.Event != nil && r.Label != "" {
		return Line{}, errors.New("label: only packets have labels")
	}
	return l, nil
}

func jsonErr(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not valid JSON (offset %d): %v", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("not valid JSON: the line ends inside a value")
	}
	return err
}

func parseEvent(r *rawLine) (*Event, error) {
	e := &Event{Kind: r.Event}
	extra := func(allowed ...string) error {
		have := map[string]bool{"backend": r.Backend != "", "healthy": r.Healthy != nil, "weight": r.Weight != nil,
			"group": r.Group != "", "service": r.Service != "", "endpoint": r.Endpoint != nil,
			"sport": r.Sport != nil, "dport": r.Dport != nil, "flags": r.Flags != nil, "frag": r.Frag != nil,
			"id": r.ID != nil, "len": r.Len != nil, "type": r.Type != nil, "code": r.Code != nil, "inner": r.Inner != nil,
			"vlan": r.VLAN != nil, "df": r.DF != nil}
		for _, a := range allowed {
			delete(have, a)
		}
		for _, f := range []string{"backend", "healthy", "weight", "group", "service", "endpoint", "sport", "dport", "flags", "frag", "id", "len", "type", "code", "inner", "vlan", "df"} {
			if have[f] {
				return fmt.Errorf("event %q has no field %q", r.Event, f)
			}
		}
		return nil
	}
	switch r.Event {
	case EventHealth:
		if r.Backend == "" || r.Healthy == nil {
			return nil, errors.New(`event "health" needs "backend" and "healthy": true|false`)
		}
		e.Backend, e.Healthy = r.Backend, *r.Healthy
		return e, extra("backend", "healthy")
	case EventWeight:
		if r.Backend == "" || r.Weight == nil {
			return nil, errors.New(`event "weight" needs "backend" and "weight": 0..1000`)
		}
		if *r.Weight < 0 || *r.Weight > compiler.MaxWeight {
			return nil, fmt.Errorf("weight %d out of range 0..%d", *r.Weight, compiler.MaxWeight)
		}
		e.Backend, e.Weight = r.Backend, *r.Weight
		return e, extra("backend", "weight")
	case EventRemove:
		if r.Backend == "" {
			return nil, errors.New(`event "remove" needs "backend"`)
		}
		e.Backend = r.Backend
		return e, extra("backend")
	case EventAdd:
		if r.Group == "" || r.Endpoint == nil || r.Endpoint.Name == "" || r.Endpoint.IP == "" {
			return nil, errors.New(`event "add" needs "group" and "endpoint": {"name": ..., "ip": ...}`)
		}
		e.Group, e.Service, e.Endpoint = r.Group, r.Service, *r.Endpoint
		return e, extra("group", "service", "endpoint")
	}
	return nil, fmt.Errorf("event %q: want health, weight, remove or add", r.Event)
}

func isICMP(p uint8) bool { return p == compiler.IPProtoICMP || p == compiler.IPProtoICMPv6 }

func parsePacket(r *rawLine) (*targets.Packet, error) {
	if r.Backend != "" || r.Healthy != nil || r.Weight != nil || r.Group != "" || r.Service != "" || r.Endpoint != nil {
		return nil, errors.New("a packet has no backend, healthy, weight, group, service or endpoint field")
	}
	var p targets.Packet
	var err error
	if p.Src, err = parseAddr("src", r.Src); err != nil {
		return nil, err
	}
	if p.Dst, err = parseAddr("dst", r.Dst); err != nil {
		return nil, err
	}
	if p.Src.Is4() != p.Dst.Is4() {
		return nil, fmt.Errorf("src %s and dst %s: one is IPv4, the other IPv6", p.Src, p.Dst)
	}
	if p.Proto, err = parseProto(r.Proto); err != nil {
		return nil, err
	}
	// "icmp" names the ICMP of the packet's family.
	if p.Proto == compiler.IPProtoICMP && p.Src.Is6() {
		p.Proto = compiler.IPProtoICMPv6
	}
	if r.Frag != nil {
		if p.Frag, err = parseFrag(*r.Frag); err != nil {
			return nil, err
		}
	}
	if r.ID != nil {
		if *r.ID < 0 || *r.ID > math.MaxUint32 {
			return nil, fmt.Errorf("id %d out of range 0..4294967295", *r.ID)
		}
		if p.Frag == targets.FragNone {
			return nil, errors.New(`id is the fragment identification: only with "frag"`)
		}
		p.FragID = uint32(*r.ID)
	}
	if r.Len != nil {
		if *r.Len < 0 || *r.Len > 65000 {
			return nil, fmt.Errorf("len %d out of range 0..65000", *r.Len)
		}
		p.PayloadLen = *r.Len
	}
	if r.VLAN != nil {
		if *r.VLAN < 1 || *r.VLAN > 4094 {
			return nil, fmt.Errorf("vlan %d out of range 1..4094 (leave it out for an untagged frame)", *r.VLAN)
		}
		p.VLAN = uint16(*r.VLAN)
	}
	if r.DF != nil {
		if !p.Src.Is4() {
			return nil, errors.New("df: IPv6 has no DF bit and is never fragmented on the way (it always counts as DF, R-MTU); leave df out")
		}
		p.DF = *r.DF
	}
	ported := p.Proto == compiler.IPProtoTCP || p.Proto == compiler.IPProtoUDP
	hasPorts := p.Frag == targets.FragNone || p.Frag == targets.FragFirst
	switch {
	case (r.Sport != nil || r.Dport != nil) && !ported:
		return nil, fmt.Errorf("sport/dport: protocol %s has no ports", ProtoName(p.Proto))
	case (r.Sport != nil || r.Dport != nil) && !hasPorts:
		return nil, fmt.Errorf("sport/dport: a %s fragment carries no ports (R-FRAG)", p.Frag)
	case ported && hasPorts && (r.Sport == nil || r.Dport == nil):
		return nil, fmt.Errorf("%s packet needs sport and dport", ProtoName(p.Proto))
	}
	if p.SrcPort, err = port("sport", r.Sport); err != nil {
		return nil, err
	}
	if p.DstPort, err = port("dport", r.Dport); err != nil {
		return nil, err
	}
	if r.Flags != nil {
		if p.Proto != compiler.IPProtoTCP || !hasPorts {
			return nil, errors.New("flags: only TCP packets that carry the TCP header have flags")
		}
		if p.Flags, err = ParseFlags(*r.Flags); err != nil {
			return nil, err
		}
	}
	if r.Type != nil || r.Code != nil || r.Inner != nil {
		if !isICMP(p.Proto) {
			return nil, errors.New("type, code and inner are ICMP fields")
		}
		if p.Frag != targets.FragNone {
			return nil, errors.New("type, code and inner: a fragmented ICMP packet is not supported in traces")
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  *uint8
	}{{"type", r.Type, &p.ICMPType}, {"code", r.Code, &p.ICMPCode}} {
		if f.v != nil {
			if *f.v < 0 || *f.v > 255 {
				return nil, fmt.Errorf("%s %d out of range 0..255", f.name, *f.v)
			}
			*f.dst = uint8(*f.v)
		}
	}
	if r.Inner != nil {
		in := compiler.Tuple{}
		if in.Src, err = parseAddr("inner src", r.Inner.Src); err != nil {
			return nil, err
		}
		if in.Dst, err = parseAddr("inner dst", r.Inner.Dst); err != nil {
			return nil, err
		}
		if in.Src.Is4() != p.Src.Is4() || in.Dst.Is4() != p.Src.Is4() {
			return nil, errors.New("inner: the quoted packet must be of the error's address family")
		}
		if in.Proto, err = parseProto(r.Inner.Proto); err != nil {
			return nil, fmt.Errorf("inner: %w", err)
		}
		if r.Inner.Sport < 0 || r.Inner.Sport > 65535 || r.Inner.Dport < 0 || r.Inner.Dport > 65535 {
			return nil, errors.New("inner: sport/dport out of range 0..65535")
		}
		in.SrcPort, in.DstPort = uint16(r.Inner.Sport), uint16(r.Inner.Dport)
		p.Inner = &in
	}
	return &p, nil
}

// Error is a problem with one line of a trace.
type Error struct {
	File string
	Line int
	Err  error
}

func (e *Error) Error() string {
	if e.File != "" {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("line %d: %v", e.Line, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// MaxLineBytes bounds one line of a trace.
const MaxLineBytes = 1 << 20

// Reader reads a trace line by line, so that a long trace streams.
type Reader struct {
	header Header
	file   string
	sc     *bufio.Scanner
	no     int
	t      float64
	labels map[string]int
}

// NewReader reads a trace from r; file names it in errors.
func NewReader(r io.Reader, file string) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), MaxLineBytes)
	return &Reader{file: file, sc: sc, labels: map[string]int{}}
}

// Next returns the next line, io.EOF at the end, or an *Error naming the
// line. Blank lines and lines starting with '#' are comments. A line
// without "t" happens at the previous line's time; time never goes back.
func (rd *Reader) Next() (Line, error) {
	for rd.sc.Scan() {
		rd.no++
		b := bytes.TrimSpace(rd.sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			rd.header.comment(string(b))
			continue
		}
		l, err := ParseLine(b)
		if err != nil {
			return Line{}, &Error{File: rd.file, Line: rd.no, Err: err}
		}
		l.No = rd.no
		if l.T < 0 {
			l.T = rd.t
		} else if l.T < rd.t {
			return Line{}, &Error{File: rd.file, Line: rd.no, Err: fmt.Errorf("t %g is before the previous line's %g; lines are in time order", l.T, rd.t)}
		}
		rd.t = l.T
		if l.Label != "" {
			if prev, dup := rd.labels[l.Label]; dup {
				return Line{}, &Error{File: rd.file, Line: rd.no, Err: fmt.Errorf("label %q already names line %d", l.Label, prev)}
			}
			rd.labels[l.Label] = rd.no
		}
		if l.Expect != nil {
			for _, ref := range []string{l.Expect.Same, l.Expect.NotSame} {
				if ref != "" {
					if _, ok := rd.labels[ref]; !ok {
						return Line{}, &Error{File: rd.file, Line: rd.no, Err: fmt.Errorf("expect: label %q is not defined on an earlier line", ref)}
					}
				}
			}
		}
		return l, nil
	}
	if err := rd.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Line{}, &Error{File: rd.file, Line: rd.no + 1, Err: fmt.Errorf("line longer than %d bytes", MaxLineBytes)}
		}
		return Line{}, err
	}
	return Line{}, io.EOF
}

// Header returns what the header comments read so far say (see Header);
// the ones at the top of a trace are read before Next returns its first
// line.
func (rd *Reader) Header() Header { return rd.header }

// Parse reads a whole trace.
func Parse(r io.Reader, file string) ([]Line, error) {
	rd := NewReader(r, file)
	var out []Line
	for {
		l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
}
