package runtime

import (
	"bytes"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// barefootExterns is the Tofino 1 P4Info p4c-barefoot 9.13.4 wrote for
// p4/tna/lb.p4 without --p4runtime-force-std-externs (the committed
// p4/tna/build/lb.p4info.txtpb before it gained the flag; testdata/README.md):
// every extern, counters and registers included, is a barefoot.* Any.
const barefootExterns = "testdata/tofino-barefoot-externs.p4info.txtpb"

// TestLoadsTofinoCompilerP4Info: the P4Info of p4c-barefoot names its
// externs' descriptions as Any messages of the barefoot package, in
// expanded text form. Without --p4runtime-force-std-externs every extern
// is one; it loads, each description is the wire encoding of
// barefoot/p4info.proto's message (checked byte for byte for a Counter, a
// DynHash and a Register), and a binary round trip (what a pipeline push
// sends) keeps them byte for byte. The committed P4Infos, compiled with
// the flag, list counters and registers as P4Runtime's and keep only
// PortMetadata as an Any, also kept.
func TestLoadsTofinoCompilerP4Info(t *testing.T) {
	u32 := func(w int32) *p4configv1.P4DataTypeSpec {
		return &p4configv1.P4DataTypeSpec{TypeSpec: &p4configv1.P4DataTypeSpec_Bitstring{Bitstring: &p4configv1.P4BitstringLikeTypeSpec{
			TypeSpec: &p4configv1.P4BitstringLikeTypeSpec_Bit{Bit: &p4configv1.P4BitTypeSpec{Bitwidth: w}}}}}
	}
	msg := func(b []byte, num protowire.Number, m proto.Message) []byte {
		v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
	}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
	}
	// barefoot.Counter{spec: {unit: PACKETS_AND_BYTES}, size: 1024}
	counter := varint(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), varint(nil, 1, 3)), 2, 1024)
	// barefoot.Register{type_spec: bit<32>, size: 32768, data_field_name}
	register := str(varint(msg(nil, 1, u32(32)), 2, 32768), 3, "LbIngress.ct_sig0")
	// barefoot.DynHash{type_spec: (bit<32>, bit<32>, bit<8>, bit<16>,
	// bit<16>), field_infos: the five fields, hash_width: 32}
	tuple := &p4configv1.P4DataTypeSpec{TypeSpec: &p4configv1.P4DataTypeSpec_Tuple{Tuple: &p4configv1.P4TupleTypeSpec{
		Members: []*p4configv1.P4DataTypeSpec{u32(32), u32(32), u32(8), u32(16), u32(16)}}}}
	dynhash := msg(nil, 1, tuple)
	for _, f := range []string{"md.flow_src[31:0]", "md.flow_dst[31:0]", "md.protocol", "md.src_port", "md.dst_port"} {
		dynhash = protowire.AppendBytes(protowire.AppendTag(dynhash, 2, protowire.BytesType), str(nil, 1, f))
	}
	dynhash = varint(dynhash, 3, 32)

	for _, c := range []struct {
		path string
		// want: extern instance alias → its description's type and bytes
		// (nil: only that it is kept).
		want map[string]struct {
			url   string
			value []byte
		}
		externs, counters, registers int
	}{
		{barefootExterns, map[string]struct {
			url   string
			value []byte
		}{
			"service_packets": {"type.googleapis.com/barefoot.Counter", counter},
			"ct_sig0":         {"type.googleapis.com/barefoot.Register", register},
			"hash_v4_5":       {"type.googleapis.com/barefoot.DynHash", dynhash},
			"$PORT_METADATA":  {"type.googleapis.com/barefoot.PortMetadata", nil},
		}, 33, 0, 0},
		// The committed builds: 7 counters (ct_refused among them) and the
		// 4-way conntrack's registers, 3 per way (Tofino 1) and 6 per way,
		// two arrays each (Tofino 2).
		{"../p4/tna/build/lb.p4info.txtpb", map[string]struct {
			url   string
			value []byte
		}{"$PORT_METADATA": {"type.googleapis.com/barefoot.PortMetadata", nil}}, 1, 7, 12},
		{"../p4/tna/build/tofino2/lb.p4info.txtpb", map[string]struct {
			url   string
			value []byte
		}{"$PORT_METADATA": {"type.googleapis.com/barefoot.PortMetadata", nil}}, 1, 7, 24},
	} {
		s, err := LoadP4Info(c.path)
		if err != nil {
			t.Fatal(err)
		}
		info := s.Info
		n := 0
		seen := map[string]bool{}
		for _, e := range info.GetExterns() {
			for _, in := range e.GetInstances() {
				n++
				alias := in.GetPreamble().GetAlias()
				if in.GetInfo().GetTypeUrl() == "" || len(in.GetInfo().GetValue()) == 0 {
					t.Errorf("%s: extern %s: its description was not kept", c.path, alias)
				}
				w, ok := c.want[alias]
				if !ok {
					continue
				}
				seen[alias] = true
				if got := in.GetInfo().GetTypeUrl(); got != w.url {
					t.Errorf("%s: extern %s: type %q, want %q", c.path, alias, got, w.url)
				}
				if w.value != nil && !bytes.Equal(in.GetInfo().GetValue(), w.value) {
					t.Errorf("%s: extern %s: description\n% x\nwant\n% x", c.path, alias, in.GetInfo().GetValue(), w.value)
				}
			}
		}
		for alias := range c.want {
			if !seen[alias] {
				t.Errorf("%s: no extern %s", c.path, alias)
			}
		}
		if n != c.externs || len(info.Counters) != c.counters || len(info.Registers) != c.registers {
			t.Errorf("%s: %d extern instances, %d counters, %d registers; want %d, %d, %d", c.path, n, len(info.Counters), len(info.Registers), c.externs, c.counters, c.registers)
		}
		if c.counters > 0 {
			if ctr, err := s.Counter("service_packets"); err != nil || ctr.Size != 1024 || ctr.GetSpec().GetUnit() != p4configv1.CounterSpec_BOTH {
				t.Errorf("%s: counter service_packets: %v %v", c.path, ctr, err)
			}
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseP4Info(b)
		if err != nil || !proto.Equal(back, info) {
			t.Fatalf("%s: binary round trip: %v", c.path, err)
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(back)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%s: the binary round trip changed bytes (%v)", c.path, err)
		}
	}
}
