package compiler

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/hash_vectors.json from the Go model")

// HashVector is one entry of testdata/hash_vectors.json, the R-HASH
// vectors the P4 and XDP datapaths check themselves against.
type HashVector struct {
	Src    string            `json:"src"`
	Dst    string            `json:"dst"`
	Proto  uint8             `json:"proto"`
	Sport  uint16            `json:"sport"`
	Dport  uint16            `json:"dport"`
	Kind   int               `json:"kind"`
	Layout string            `json:"layout"`
	CRC32  uint32            `json:"crc32"`
	Slots  map[string]uint32 `json:"slots"`
}

var vectorRingSizes = []uint32{65537, 4099, 251, 16384, 1 << 20}

func vectorTuples() []Tuple {
	a := netip.MustParseAddr
	return []Tuple{
		{Src: a("198.51.100.7"), Dst: a("203.0.113.10"), Proto: IPProtoTCP, SrcPort: 4242, DstPort: 80},
		{Src: a("192.0.2.1"), Dst: a("203.0.113.30"), Proto: IPProtoUDP, SrcPort: 53000, DstPort: 5000},
		{Src: a("10.255.0.1"), Dst: a("203.0.113.30"), Proto: IPProtoESP},
		{Src: a("255.255.255.255"), Dst: a("0.0.0.1"), Proto: IPProtoGRE},
		{Src: a("2001:db8::7"), Dst: a("2001:db8:100::20"), Proto: IPProtoTCP, SrcPort: 65535, DstPort: 443},
		{Src: a("2001:db8:ffff::1"), Dst: a("2001:db8:100::30"), Proto: IPProtoUDP, SrcPort: 1, DstPort: 65535},
		{Src: a("fe80::1"), Dst: a("2001:db8:100::30"), Proto: IPProtoICMPv6},
	}
}

func makeVectors() []HashVector {
	var out []HashVector
	for _, tu := range vectorTuples() {
		for _, k := range []TupleKind{Tuple2, Tuple3, Tuple5} {
			b := tu.AppendLayout(nil, k)
			h := HashBytes(b)
			v := HashVector{Src: tu.Src.String(), Dst: tu.Dst.String(), Proto: tu.Proto, Sport: tu.SrcPort, Dport: tu.DstPort,
				Kind: int(k), Layout: hex.EncodeToString(b), CRC32: h, Slots: map[string]uint32{}}
			for _, m := range vectorRingSizes {
				v.Slots[jsonKey(m)] = Slot(h, m)
			}
			out = append(out, v)
		}
	}
	return out
}

func jsonKey(m uint32) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// TestRHASH_CRC32Variant pins the CRC variant: CRC-32/ISO-HDLC's check value.
func TestRHASH_CRC32Variant(t *testing.T) {
	if got := HashBytes([]byte("123456789")); got != 0xCBF43926 {
		t.Fatalf("CRC32(123456789) = %08x, want cbf43926", got)
	}
}

func TestRHASH_LayoutSizes(t *testing.T) {
	v4 := Tuple{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("::ffff:203.0.113.1"), Proto: 6, SrcPort: 0x1234, DstPort: 0x50}
	v6 := Tuple{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), Proto: 17}
	for _, tt := range []struct {
		t    Tuple
		k    TupleKind
		size int
	}{{v4, Tuple2, 8}, {v4, Tuple3, 9}, {v4, Tuple5, 13}, {v6, Tuple2, 32}, {v6, Tuple3, 33}, {v6, Tuple5, 37}} {
		if got := len(tt.t.AppendLayout(nil, tt.k)); got != tt.size {
			t.Errorf("%v %s: %d bytes, want %d", tt.t.Src, tt.k, got, tt.size)
		}
	}
	want, _ := hex.DecodeString("c0000201cb007101" + "06" + "1234" + "0050")
	if got := v4.AppendLayout(nil, Tuple5); !reflect.DeepEqual(got, want) {
		t.Fatalf("IPv4 5-tuple layout %x, want %x (mapped destination must count as IPv4)", got, want)
	}
}

// TestRHASH_Vectors checks the committed vectors against the Go model;
// -update rewrites them.
func TestRHASH_Vectors(t *testing.T) {
	got := makeVectors()
	path := "testdata/hash_vectors.json"
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./compiler -run TestRHASH_Vectors -update)", err)
	}
	var want []HashVector
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("hash vectors differ from the Go model: the R-HASH layout or CRC changed; every datapath must change with it")
	}
}

// crcBitwise is an independent, bit-at-a-time CRC-32 as a switch or a BPF
// program computes it, to cross-check the table-driven library.
func crcBitwise(b []byte) uint32 {
	c := uint32(0xFFFFFFFF)
	for _, x := range b {
		c ^= uint32(x)
		for i := 0; i < 8; i++ {
			if c&1 != 0 {
				c = c>>1 ^ 0xEDB88320
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

func TestRHASH_VectorsBitwise(t *testing.T) {
	for _, v := range makeVectors() {
		b, _ := hex.DecodeString(v.Layout)
		if got := crcBitwise(b); got != v.CRC32 {
			t.Fatalf("%s→%s kind %d: bitwise CRC %08x, vector %08x", v.Src, v.Dst, v.Kind, got, v.CRC32)
		}
	}
}
