package compiler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
)

// The IR's enumerations marshal to JSON (and any other text encoding) as
// names, not numbers: `lbc compile --format json` and `lbc status
// --format json` are read by people and scripts, for whom `"proto": 6`,
// `"kind": 0` or `"affinity": 5` say nothing (issue 36). The names are
// the configuration's vocabulary where it has one (IPIP, L2_DSR,
// CLIENT_IP_PORT_PROTO), else the words the text outputs already use
// (port, all-ports, any-proto; tcp, udp).
//
// Reading accepts the name in any case and, so that JSON written before
// the names still reads, the old number. A value that is neither gives an
// error that names the field (encoding/json fills in the path of a
// *json.UnmarshalTypeError) and the valid names.
//
// The numbers are unchanged everywhere else: the datapaths, the digest
// and the fleet's protobuf messages (fleet/fleetpb) carry the numbers,
// never these names.

// IPProto is an IP protocol number in a VIP key; 0 is "any" (the key of
// a MatchAnyProto row, L3_DEFAULT).
type IPProto uint8

// ProtoName is a packet's IP protocol as the text outputs (lbc explain,
// lbc status, errors) and the JSON name it: tcp, udp, icmp, icmpv6, esp,
// gre, ipip, ipv6, else the number. Unlike IPProto's String, 0 is "0": a
// packet has a protocol, "any" is only a VIP key's (L3_DEFAULT).
func ProtoName(p uint8) string {
	if p == 0 {
		return "0"
	}
	return IPProto(p).String()
}

// Name is the name JSON gives a tuple: the sessionAffinity that hashes
// it (CLIENT_IP_PORT_PROTO for the 5-tuple), NONE for an untracked class.
// String is its layout (5-tuple), which bytes printed beside it follow.
func (k TupleKind) Name() string { return string(tupleKindNames.marshal(k)) }

// TupleName is a tuple for text beside its bytes: its layout and its JSON
// name, "5-tuple (CLIENT_IP_PORT_PROTO)"; an untracked class's is "NONE".
func TupleName(k TupleKind) string {
	if k == TupleNone {
		return k.Name()
	}
	return k.String() + " (" + k.Name() + ")"
}

// MAC is a 48-bit Ethernet address (an L2 DSR backend's); it marshals as
// "02:00:00:00:00:01".
type MAC [6]byte

// Encap is a service's encapsulation (encapsulation: in the
// configuration).
type Encap uint8

// enum is the names of one enumeration, in the order the error lists them.
type enum[T ~uint8] struct {
	what  string // what a value is, for errors: "protocol"
	names []enumName[T]
	// anyNumber: every number 0..255 is a value (IP protocols); an
	// unnamed one marshals as its decimal.
	anyNumber bool
}

type enumName[T ~uint8] struct {
	v    T
	name string
}

func (e *enum[T]) marshal(v T) []byte {
	for _, n := range e.names {
		if n.v == v {
			return []byte(n.name)
		}
	}
	// Not a value (or an unnamed protocol): its number, which reads back
	// where it is a value and otherwise fails naming the valid names.
	return strconv.AppendUint(nil, uint64(v), 10)
}

// parse reads a name (any case) or a decimal number.
func (e *enum[T]) parse(s string) (T, bool) {
	for _, n := range e.names {
		if strings.EqualFold(n.name, s) {
			return n.v, true
		}
	}
	u, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, false
	}
	if e.anyNumber {
		return T(u), true
	}
	for _, n := range e.names {
		if uint64(n.v) == u {
			return n.v, true
		}
	}
	return 0, false
}

// valid lists the names for an error: "tcp, udp or any".
func (e *enum[T]) valid() string {
	ns := make([]string, len(e.names))
	for i, n := range e.names {
		ns[i] = n.name
	}
	s := strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1]
	if e.anyNumber {
		s = strings.Join(ns, ", ") + " or a number 0..255"
	}
	return s
}

// typeError is the error for a value that is no name of e. It is a
// *json.UnmarshalTypeError so that encoding/json adds the field's path
// ("Go struct field VIPKey.ir.vips.key.proto").
func (e *enum[T]) typeError(value string) error {
	return &json.UnmarshalTypeError{
		Value: fmt.Sprintf("%s (not a %s: use %s)", value, e.what, e.valid()),
		Type:  reflect.TypeFor[T](),
	}
}

func (e *enum[T]) unmarshalText(b []byte, v *T) error {
	x, ok := e.parse(string(b))
	if !ok {
		return e.typeError(strconv.Quote(string(b)))
	}
	*v = x
	return nil
}

// unmarshalJSON reads a JSON string (a name or a number) or, as written
// before the names, a JSON number; null leaves v unchanged.
func (e *enum[T]) unmarshalJSON(b []byte, v *T) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return e.unmarshalText([]byte(s), v)
	}
	x, ok := e.parse(string(b))
	if !ok {
		return e.typeError(string(b))
	}
	*v = x
	return nil
}

var (
	ipProtoNames = &enum[IPProto]{what: "protocol", anyNumber: true, names: []enumName[IPProto]{
		{IPProtoTCP, "tcp"}, {IPProtoUDP, "udp"}, {IPProtoICMP, "icmp"}, {IPProtoICMPv6, "icmpv6"},
		{IPProtoESP, "esp"}, {IPProtoGRE, "gre"}, {IPProtoIPIP, "ipip"}, {IPProtoIPv6, "ipv6"}, {0, "any"}}}
	matchKindNames = &enum[MatchKind]{what: "match kind", names: []enumName[MatchKind]{
		{MatchPort, "port"}, {MatchAllPorts, "all-ports"}, {MatchAnyProto, "any-proto"}}}
	// The tuples by the sessionAffinity that hashes them; a track of
	// TupleNone is an untracked class. An affinity of NONE hashes the
	// 5-tuple (R-AFF), so it reads CLIENT_IP_PORT_PROTO here.
	tupleKindNames = &enum[TupleKind]{what: "tuple", names: []enumName[TupleKind]{
		{TupleNone, "NONE"}, {Tuple2, AffinityClientIP}, {Tuple3, AffinityClientIPProto}, {Tuple5, AffinityClientIPPortProto}}}
	encapNames = &enum[Encap]{what: "encapsulation", names: []enumName[Encap]{
		{EncapKindIPIP, EncapIPIP}, {EncapKindL2DSR, EncapL2DSR}}}
	opNames = &enum[Op]{what: "table operation", names: []enumName[Op]{
		{Insert, "insert"}, {Modify, "modify"}, {Delete, "delete"}}}
	classNames = &enum[Class]{what: "protocol class", names: []enumName[Class]{
		{ClassTCP, "tcp"}, {ClassUDP, "udp"}, {ClassTunnel, "esp/gre"}, {ClassOther, "other"}}}
)

func (p IPProto) MarshalText() ([]byte, error)    { return ipProtoNames.marshal(p), nil }
func (p *IPProto) UnmarshalText(b []byte) error   { return ipProtoNames.unmarshalText(b, p) }
func (p *IPProto) UnmarshalJSON(b []byte) error   { return ipProtoNames.unmarshalJSON(b, p) }
func (k MatchKind) MarshalText() ([]byte, error)  { return matchKindNames.marshal(k), nil }
func (k *MatchKind) UnmarshalText(b []byte) error { return matchKindNames.unmarshalText(b, k) }
func (k *MatchKind) UnmarshalJSON(b []byte) error { return matchKindNames.unmarshalJSON(b, k) }
func (k TupleKind) MarshalText() ([]byte, error)  { return tupleKindNames.marshal(k), nil }
func (k *TupleKind) UnmarshalText(b []byte) error { return tupleKindNames.unmarshalText(b, k) }
func (k *TupleKind) UnmarshalJSON(b []byte) error { return tupleKindNames.unmarshalJSON(b, k) }
func (e Encap) MarshalText() ([]byte, error)      { return encapNames.marshal(e), nil }
func (e *Encap) UnmarshalText(b []byte) error     { return encapNames.unmarshalText(b, e) }
func (e *Encap) UnmarshalJSON(b []byte) error     { return encapNames.unmarshalJSON(b, e) }
func (o Op) MarshalText() ([]byte, error)         { return opNames.marshal(o), nil }
func (o *Op) UnmarshalText(b []byte) error        { return opNames.unmarshalText(b, o) }
func (o *Op) UnmarshalJSON(b []byte) error        { return opNames.unmarshalJSON(b, o) }
func (c Class) MarshalText() ([]byte, error)      { return classNames.marshal(c), nil }
func (c *Class) UnmarshalText(b []byte) error     { return classNames.unmarshalText(b, c) }
func (c *Class) UnmarshalJSON(b []byte) error     { return classNames.unmarshalJSON(b, c) }
func (e Encap) String() string                    { return string(encapNames.marshal(e)) }
func (p IPProto) String() string                  { return string(ipProtoNames.marshal(p)) }
func (m MAC) String() string                      { return net.HardwareAddr(m[:]).String() }
func (m MAC) MarshalText() ([]byte, error)        { return []byte(m.String()), nil }
func (m *MAC) UnmarshalText(b []byte) error       { return m.parse(string(b), strconv.Quote(string(b))) }

func (m *MAC) parse(s, value string) error {
	if s == "" {
		*m = MAC{}
		return nil
	}
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != len(m) {
		return &json.UnmarshalTypeError{Value: value + " (not a 48-bit MAC address: write it like 02:00:00:00:00:01)", Type: reflect.TypeFor[MAC]()}
	}
	copy(m[:], hw)
	return nil
}

// UnmarshalJSON reads "02:00:00:00:00:01" or, as written before, an
// array of six numbers.
func (m *MAC) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '[':
		var a [6]byte
		if err := json.Unmarshal(b, &a); err != nil {
			return err
		}
		*m = a
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b) + " (not a MAC address: write it like \"02:00:00:00:00:01\")", Type: reflect.TypeFor[MAC]()}
	}
	return m.parse(s, strconv.Quote(s))
}

// ClassPolicies is a service's policy per protocol class, indexed by
// Class. In JSON it is an object keyed by the class's name ({"tcp":
// {...}, "udp": ..., "esp/gre": ..., "other": ...}) rather than an array
// whose positions the reader would have to know.
type ClassPolicies [NumClasses]ClassPolicy

// MarshalJSON writes the classes in their order.
func (c ClassPolicies) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := range c {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(Class(i).String())
		v, err := json.Marshal(c[i])
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads the object MarshalJSON writes, every class present,
// or the array of four written before.
func (c *ClassPolicies) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var a [NumClasses]ClassPolicy
		if err := json.Unmarshal(b, &a); err != nil {
			return err
		}
		*c = a
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	var out ClassPolicies
	seen := [NumClasses]bool{}
	for k, raw := range m {
		var cl Class
		if err := cl.UnmarshalText([]byte(k)); err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &out[cl]); err != nil {
			// The path below the class: "tcp.affinity".
			if te, ok := err.(*json.UnmarshalTypeError); ok {
				te.Struct, te.Field = "", k+"."+te.Field
			}
			return err
		}
		seen[cl] = true
	}
	for cl, ok := range seen {
		if !ok {
			return &json.UnmarshalTypeError{Value: fmt.Sprintf("an object without %q (classes needs %s)", Class(cl).String(), classNames.valid()), Type: reflect.TypeFor[ClassPolicies]()}
		}
	}
	*c = out
	return nil
}
