package runtime

import (
	"strings"
	"testing"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// Controller headers: packet-out metadata is encoded by name and checked
// against its width; packet-in metadata is decoded by ID, and a field the
// header does not have, or a value wider than its field, is an error, not
// a truncated number.
func TestPacketMetadata(t *testing.T) {
	s, err := LoadP4Info("../testbench/p4rt/testdata/lb-fixture.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PacketMetadata("no_such_header"); err == nil || !strings.Contains(err.Error(), "controller header") {
		t.Fatalf("unknown header: %v", err)
	}
	out, err := s.PacketMetadata("packet_out")
	if err != nil {
		t.Fatal(err)
	}
	md, err := out.Encode(U("op", 1))
	if err != nil || len(md) != 1 || md[0].GetMetadataId() != 1 || string(md[0].GetValue()) != "\x01" {
		t.Fatalf("Encode(op 1) = %v, %v", md, err)
	}
	for _, bad := range []Value{U("op", 256), U("timestamp", 1)} {
		if _, err := out.Encode(bad); err == nil {
			t.Errorf("Encode(%s = %x) accepted", bad.Name, bad.Bytes)
		}
	}
	in, err := s.PacketMetadata("packet_in")
	if err != nil {
		t.Fatal(err)
	}
	v, err := in.Decode([]*p4v1.PacketMetadata{{MetadataId: 1, Value: []byte{1}}, {MetadataId: 2, Value: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}})
	if err != nil || v["op"] != 1 || v["timestamp"] != 1<<48-1 {
		t.Fatalf("Decode = %v, %v; want op 1, timestamp 2^48-1", v, err)
	}
	for name, md := range map[string][]*p4v1.PacketMetadata{
		"unknown ID":      {{MetadataId: 3, Value: []byte{1}}},
		"wider than 48":   {{MetadataId: 2, Value: []byte{1, 0, 0, 0, 0, 0, 0}}},
		"op wider than 8": {{MetadataId: 1, Value: []byte{1, 0}}},
	} {
		if _, err := in.Decode(md); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
