package runtime

import (
	"bytes"
	"strings"
	"testing"
)

func TestCanonicalBytestrings(t *testing.T) {
	cases := []struct {
		in, want []byte
		bits     int
	}{
		{nil, []byte{0}, 0},
		{[]byte{0, 0}, []byte{0}, 0},
		{[]byte{0, 0, 1}, []byte{1}, 1},
		{[]byte{0, 0x80, 0}, []byte{0x80, 0}, 16},
		{[]byte{0x01, 0xff}, []byte{0x01, 0xff}, 9},
	}
	for _, c := range cases {
		if got := Canonical(c.in); !bytes.Equal(got, c.want) || !IsCanonical(got) {
			t.Errorf("Canonical(%x) = %x, want %x", c.in, got, c.want)
		}
		if got := BitLen(c.in); got != c.bits {
			t.Errorf("BitLen(%x) = %d, want %d", c.in, got, c.bits)
		}
	}
	if _, err := Fit([]byte{0x02, 0x00}, 9); err == nil || !strings.Contains(err.Error(), "needs 10 bits") {
		t.Errorf("Fit of a 10-bit value in 9 bits: %v", err)
	}
	if IsCanonical([]byte{0, 1}) || IsCanonical(nil) {
		t.Error("padded or empty bytestrings reported canonical")
	}
	if v, _ := ToUint(Uint(65537)); v != 65537 || !bytes.Equal(Uint(0), []byte{0}) {
		t.Error("Uint/ToUint do not round-trip")
	}
}

func TestSchemaNamesAndEntries(t *testing.T) {
	s, err := LoadP4Info("../testbench/p4rt/testdata/lb-fixture.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ring", "LbIngress.ring"} {
		if tb, err := s.Table(name); err != nil || tb.Preamble.Alias != "ring" {
			t.Errorf("Table(%q): %v", name, err)
		}
	}
	if _, err := s.Table("nope"); err == nil {
		t.Error("unknown table resolved")
	}
	if _, err := s.Entry("vip_port", []Value{B("dst_addr", []byte{10, 0, 0, 1}), U("protocol", 6)}, "set_service_id", []Value{U("service_id", 1)}); err == nil || !strings.Contains(err.Error(), `"dst_port" missing`) {
		t.Errorf("missing exact field: %v", err)
	}
	if _, err := s.Entry("vip_port", []Value{B("dst_addr", []byte{10, 0, 0, 1}), U("protocol", 256), U("dst_port", 80)}, "set_service_id", []Value{U("service_id", 1)}); err == nil || !strings.Contains(err.Error(), "needs 9 bits") {
		t.Errorf("too wide: %v", err)
	}
	e, err := s.Entry("ring", []Value{B("addr", []byte{0, 0, 1, 0})}, "set_ring_backend", []Value{U("backend_id", 9)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e.Match[0].GetExact().Value, []byte{1, 0}) {
		t.Errorf("addr not canonical: %x", e.Match[0].GetExact().Value)
	}
	d, err := s.Decode(e)
	if err != nil || d.Table != "ring" || d.Action != "set_ring_backend" || d.Uint("addr") != 256 || d.Uint("backend_id") != 9 {
		t.Errorf("Decode: %+v %v", d, err)
	}
	if CodeName(5) != "NOT_FOUND" || CodeName(0) != "OK" {
		t.Errorf("CodeName: %s %s", CodeName(5), CodeName(0))
	}
}
