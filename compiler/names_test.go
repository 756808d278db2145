package compiler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// Every enumeration of the IR marshals as its name and reads back, from
// the name and from the number JSON held before the names (issue 36).
func TestEnumNamesRoundTrip(t *testing.T) {
	type row struct {
		v    any    // a pointer to the value to marshal
		name string // its JSON
		old  string // the JSON written before the names
	}
	p := func(v IPProto) *IPProto { return &v }
	m := func(v MatchKind) *MatchKind { return &v }
	k := func(v TupleKind) *TupleKind { return &v }
	e := func(v Encap) *Encap { return &v }
	o := func(v Op) *Op { return &v }
	c := func(v Class) *Class { return &v }
	for _, tc := range []row{
		{p(IPProtoTCP), `"tcp"`, `6`},
		{p(IPProtoUDP), `"udp"`, `17`},
		{p(IPProtoICMP), `"icmp"`, `1`},
		{p(IPProtoICMPv6), `"icmpv6"`, `58`},
		{p(IPProtoESP), `"esp"`, `50`},
		{p(IPProtoGRE), `"gre"`, `47`},
		{p(IPProtoIPIP), `"ipip"`, `4`},
		{p(IPProtoIPv6), `"ipv6"`, `41`},
		{p(0), `"any"`, `0`},
		{p(132), `"132"`, `132`}, // SCTP: no name, its number as a string
		{m(MatchPort), `"port"`, `0`},
		{m(MatchAllPorts), `"all-ports"`, `1`},
		{m(MatchAnyProto), `"any-proto"`, `2`},
		{k(TupleNone), `"NONE"`, `0`},
		{k(Tuple2), `"CLIENT_IP"`, `2`},
		{k(Tuple3), `"CLIENT_IP_PROTO"`, `3`},
		{k(Tuple5), `"CLIENT_IP_PORT_PROTO"`, `5`},
		{e(EncapKindIPIP), `"IPIP"`, `0`},
		{e(EncapKindL2DSR), `"L2_DSR"`, `1`},
		{o(Insert), `"insert"`, `0`},
		{o(Modify), `"modify"`, `1`},
		{o(Delete), `"delete"`, `2`},
		{c(ClassTCP), `"tcp"`, `0`},
		{c(ClassUDP), `"udp"`, `1`},
		{c(ClassTunnel), `"esp/gre"`, `2`},
		{c(ClassOther), `"other"`, `3`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.name {
			t.Errorf("%T %v: marshals as %s (%v), want %s", tc.v, tc.v, b, err, tc.name)
			continue
		}
		// Read back from the name, in any case, and from the old number.
		for _, in := range []string{tc.name, strings.ToUpper(tc.name), strings.ToLower(tc.name), tc.old} {
			got := newLike(tc.v)
			if err := json.Unmarshal([]byte(in), got); err != nil {
				t.Errorf("%T: %s: %v", tc.v, in, err)
				continue
			}
			if again, _ := json.Marshal(got); string(again) != tc.name {
				t.Errorf("%T: %s reads as %s, want %s", tc.v, in, again, tc.name)
			}
		}
	}
}

// newLike returns a pointer to a new zero value of *v's type.
func newLike(v any) any {
	switch v.(type) {
	case *IPProto:
		return new(IPProto)
	case *MatchKind:
		return new(MatchKind)
	case *TupleKind:
		return new(TupleKind)
	case *Encap:
		return new(Encap)
	case *Op:
		return new(Op)
	case *Class:
		return new(Class)
	}
	panic("newLike: add the type")
}

// A value that is no name is an error that names the field and the valid
// names.
func TestEnumNamesUnknown(t *testing.T) {
	for _, tc := range []struct {
		in   string
		into any
		want []string
	}{
		{`{"key": {"proto": "sctpx"}}`, &VIPRow{}, []string{"key.proto", `"sctpx"`, "tcp, udp, icmp, icmpv6, esp, gre, ipip, ipv6, any or a number 0..255"}},
		{`{"key": {"proto": 256}}`, &VIPRow{}, []string{"key.proto", "256"}},
		{`{"key": {"kind": "exact"}}`, &VIPRow{}, []string{"key.kind", `"exact"`, "port, all-ports or any-proto"}},
		{`{"key": {"kind": 7}}`, &VIPRow{}, []string{"key.kind", "7", "port, all-ports or any-proto"}},
		{`{"encap": "GRE"}`, &ServiceRow{}, []string{"encap", `"GRE"`, "IPIP or L2_DSR"}},
		{`{"classes": {"tcp": {"affinity": "CLIENT_PORT"}}}`, &ServiceRow{}, []string{"classes.tcp.affinity", `"CLIENT_PORT"`, "NONE, CLIENT_IP, CLIENT_IP_PROTO or CLIENT_IP_PORT_PROTO"}},
		{`{"classes": {"tcp": {"track": 4}}}`, &ServiceRow{}, []string{"classes.tcp.track", "4", "CLIENT_IP_PORT_PROTO"}},
		{`{"classes": {"sctp": {}}}`, &ServiceRow{}, []string{"classes", `"sctp"`, "tcp, udp, esp/gre or other"}},
		{`{"classes": {"tcp": {}}}`, &ServiceRow{}, []string{"classes", `without "udp"`}},
		{`{"mac": "02:00:00:00:00"}`, &BackendRow{}, []string{"mac", `"02:00:00:00:00"`, "02:00:00:00:00:01"}},
		{`{"mac": 7}`, &BackendRow{}, []string{"mac", "02:00:00:00:00:01"}},
		{`{"op": "upsert"}`, &Change{}, []string{"op", `"upsert"`, "insert, modify or delete"}},
	} {
		err := json.Unmarshal([]byte(tc.in), tc.into)
		if err == nil {
			t.Errorf("%s read without error", tc.in)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.in, err, w)
			}
		}
	}
}

// MACs marshal as strings and read back from strings and from the array
// of numbers written before; a zero MAC (IP-in-IP) is left out.
func TestMACJSON(t *testing.T) {
	b := BackendRow{ID: 1, Name: "ns1", MAC: MAC{0x02, 0, 0, 0, 0, 0xab}}
	out, err := json.Marshal(b)
	if err != nil || !bytes.Contains(out, []byte(`"mac":"02:00:00:00:00:ab"`)) {
		t.Fatalf("marshals as %s (%v)", out, err)
	}
	for _, in := range []string{`{"mac":"02:00:00:00:00:ab"}`, `{"mac":"02-00-00-00-00-AB"}`, `{"mac":[2,0,0,0,0,171]}`} {
		var got BackendRow
		if err := json.Unmarshal([]byte(in), &got); err != nil || got.MAC != b.MAC {
			t.Errorf("%s reads as %v (%v)", in, got.MAC, err)
		}
	}
	if out, _ := json.Marshal(BackendRow{}); bytes.Contains(out, []byte(`"mac"`)) {
		t.Errorf("zero MAC written: %s", out)
	}
}

// A compiled IR marshals with names and reads back to the same tables;
// the JSON of before the names (numbers, the classes as an array, MACs
// as arrays) reads to the same tables too.
func TestIRJSONRoundTrip(t *testing.T) {
	dec, err := Load("test.yaml", []byte(`tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::1"}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    backends:
      - name: a
        endpoints:
          - {name: a1, ip: 10.0.1.1}
  - name: dns
    vip: "2001:db8::53"
    protocol: UDP
    ports: ALL
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {trackingMode: PER_SESSION}
    encapsulation: L2_DSR
    backends:
      - name: ig-dns
        endpoints:
          - {name: ns1, ip: "2001:db8:1::1", mac: "02:00:00:00:00:01"}
  - name: any
    vip: 203.0.113.20
    protocol: L3_DEFAULT
    ports: ALL
    backends:
      - name: g
        endpoints:
          - {name: g1, ip: 10.0.2.1}
`))
	if err != nil {
		t.Fatal(err)
	}
	ir := compileOK(t, Input{Config: dec.Config}).IR
	js, err := json.Marshal(ir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"proto":"tcp"`, `"proto":"udp"`, `"proto":"any"`, `"kind":"port"`, `"kind":"all-ports"`, `"kind":"any-proto"`,
		`"encap":"L2_DSR"`, `"encap":"IPIP"`, `"mac":"02:00:00:00:00:01"`, `"affinity":"CLIENT_IP"`, `"track":"CLIENT_IP_PORT_PROTO"`, `"classes":{"tcp":{`} {
		if !bytes.Contains(js, []byte(want)) {
			t.Errorf("IR JSON lacks %s:\n%s", want, js)
		}
	}
	var back IR
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if d := DiffIR(ir, &back); !d.Empty() {
		t.Errorf("read back, the IR differs: %s", d.Summary())
	}

	// The same IR as JSON held it before the names.
	old := string(js)
	for name, num := range map[string]string{`"proto":"tcp"`: `"proto":6`, `"proto":"udp"`: `"proto":17`, `"proto":"any"`: `"proto":0`,
		`"kind":"port"`: `"kind":0`, `"kind":"all-ports"`: `"kind":1`, `"kind":"any-proto"`: `"kind":2`,
		`"encap":"L2_DSR"`: `"encap":1`, `"encap":"IPIP"`: `"encap":0`, `"mac":"02:00:00:00:00:01"`: `"mac":[2,0,0,0,0,1]`,
		`"NONE"`: `0`, `"CLIENT_IP"`: `2`, `"CLIENT_IP_PROTO"`: `3`, `"CLIENT_IP_PORT_PROTO"`: `5`} {
		old = strings.ReplaceAll(old, name, num)
	}
	for _, cl := range []string{`"tcp":`, `"udp":`, `"esp/gre":`, `"other":`} {
		old = strings.ReplaceAll(old, cl, "")
	}
	old = strings.ReplaceAll(strings.ReplaceAll(old, `"classes":{`, `"classes":[`), `}},"noBackends"`, `}],"noBackends"`)
	if strings.Contains(old, `"proto":"`) || strings.Contains(old, `"classes":{`) {
		t.Fatalf("the old form still has names:\n%s", old)
	}
	var fromOld IR
	if err := json.Unmarshal([]byte(old), &fromOld); err != nil {
		t.Fatalf("the JSON of before the names: %v\n%s", err, old)
	}
	if d := DiffIR(ir, &fromOld); !d.Empty() {
		t.Errorf("read from the old JSON, the IR differs: %s", d.Summary())
	}
}

// The text outputs (lbc explain, lbc status, write errors) name protocols
// and tuples as JSON does, not by number (issue 36).
func TestTextNames(t *testing.T) {
	vip := func(p IPProto, k MatchKind) Change {
		return Change{Table: "vip", Op: Insert, VIP: &VIPRow{Key: VIPKey{VIP: netip.MustParseAddr("203.0.113.10"), Proto: p, Port: 80, Kind: k}, ServiceID: 1}}
	}
	for _, tc := range []struct{ got, want string }{
		{IPProto(IPProtoTCP).String(), "tcp"},
		{IPProto(IPProtoUDP).String(), "udp"},
		{IPProto(IPProtoGRE).String(), "gre"},
		{IPProto(0).String(), "any"}, // a VIP key's L3_DEFAULT
		{IPProto(132).String(), "132"},
		{fmt.Sprintf("%v", IPProto(IPProtoESP)), "esp"},
		{ProtoName(IPProtoTCP), "tcp"},
		{ProtoName(IPProtoICMPv6), "icmpv6"},
		{ProtoName(0), "0"}, // a packet's protocol 0 is not "any"
		{ProtoName(132), "132"},
		{Tuple5.Name(), "CLIENT_IP_PORT_PROTO"},
		{TupleName(Tuple5), "5-tuple (CLIENT_IP_PORT_PROTO)"},
		{TupleName(Tuple3), "3-tuple (CLIENT_IP_PROTO)"},
		{TupleName(Tuple2), "2-tuple (CLIENT_IP)"},
		{TupleName(TupleNone), "NONE"},
		{vip(IPProtoTCP, MatchPort).String(), "insert vip 203.0.113.10 proto tcp port 80 (port) → service 1"},
		{vip(IPProtoUDP, MatchAllPorts).String(), "insert vip 203.0.113.10 proto udp port 80 (all-ports) → service 1"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
