package compiler

import (
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"os"
	"testing"
)

// rhashLiterals are R-HASH layouts written out by hand from the layout in
// AppendLayout's comment (fields in network byte order, back to back, no
// padding, IPv4 as 4 bytes), with CRCs computed once outside Go by a
// bit-at-a-time CRC-32. They do not come from the code under test, unlike
// testdata/hash_vectors.json, which `-update` regenerates.
var rhashLiterals = []struct {
	name   string
	tuple  Tuple
	kind   TupleKind
	layout string
	crc    uint32
}{
	{"IPv6 TCP 2-tuple", v6tcp, Tuple2, "20010db8000000000000000000000007" + "20010db8010000000000000000000020", 0xaf2be3b2},
	{"IPv6 TCP 3-tuple", v6tcp, Tuple3, "20010db8000000000000000000000007" + "20010db8010000000000000000000020" + "06", 0x1ea1b3fb},
	{"IPv6 TCP 5-tuple", v6tcp, Tuple5, "20010db8000000000000000000000007" + "20010db8010000000000000000000020" + "06" + "ffff" + "01bb", 0xdf1dd761},
	{"IPv4 UDP 2-tuple", v4udp, Tuple2, "c0000201" + "cb00711e", 0x024b0c36},
	{"IPv4 UDP 3-tuple", v4udp, Tuple3, "c0000201" + "cb00711e" + "11", 0x770a11ea},
	{"IPv4 UDP 5-tuple", v4udp, Tuple5, "c0000201" + "cb00711e" + "11" + "cf08" + "1388", 0x135d5e7a},
	{"IPv6 ICMPv6 2-tuple", v6icmp, Tuple2, "fe800000000000000000000000000001" + "20010db8010000000000000000000030", 0xcbd0048e},
	{"IPv6 ICMPv6 3-tuple", v6icmp, Tuple3, "fe800000000000000000000000000001" + "20010db8010000000000000000000030" + "3a", 0x1ec5481c},
	{"IPv4-mapped source 2-tuple", Tuple{Src: netip.MustParseAddr("::ffff:198.51.100.7"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: IPProtoTCP}, Tuple2, "c6336407" + "cb00710a", 0x169877e4},
}

var (
	v6tcp  = Tuple{Src: netip.MustParseAddr("2001:db8::7"), Dst: netip.MustParseAddr("2001:db8:100::20"), Proto: IPProtoTCP, SrcPort: 65535, DstPort: 443}
	v4udp  = Tuple{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("203.0.113.30"), Proto: IPProtoUDP, SrcPort: 53000, DstPort: 5000}
	v6icmp = Tuple{Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("2001:db8:100::30"), Proto: IPProtoICMPv6}
)

// TestRHASH_Literals checks the layout and the hash against the literals,
// the literal CRCs against the independent bitwise CRC in hash_test.go, and
// that the committed vectors agree with the literals where they overlap.
func TestRHASH_Literals(t *testing.T) {
	b, err := os.ReadFile("testdata/hash_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []HashVector
	if err := json.Unmarshal(b, &vectors); err != nil {
		t.Fatal(err)
	}
	for _, tt := range rhashLiterals {
		t.Run(tt.name, func(t *testing.T) {
			want, err := hex.DecodeString(tt.layout)
			if err != nil {
				t.Fatal(err)
			}
			if got := crcBitwise(want); got != tt.crc {
				t.Fatalf("bitwise CRC of the literal layout %08x, literal %08x", got, tt.crc)
			}
			if got := tt.tuple.AppendLayout(nil, tt.kind); hex.EncodeToString(got) != tt.layout {
				t.Fatalf("layout %x, want %s", got, tt.layout)
			}
			if got := tt.tuple.Hash(tt.kind); got != tt.crc {
				t.Fatalf("Hash %08x, want %08x", got, tt.crc)
			}
			for _, v := range vectors {
				if v.Layout == tt.layout && v.CRC32 != tt.crc {
					t.Fatalf("hash_vectors.json has CRC %08x for this layout, want %08x", v.CRC32, tt.crc)
				}
			}
		})
	}
	// The vectors must cover the literal kinds for both families.
	covered := map[string]bool{}
	for _, v := range vectors {
		for _, tt := range rhashLiterals {
			if v.Layout == tt.layout {
				covered[tt.name] = true
			}
		}
	}
	for _, name := range []string{"IPv6 TCP 2-tuple", "IPv6 TCP 3-tuple", "IPv4 UDP 2-tuple", "IPv4 UDP 3-tuple"} {
		if !covered[name] {
			t.Errorf("hash_vectors.json has no vector with the %s layout", name)
		}
	}
}
