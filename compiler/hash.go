package compiler

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// TupleKind says which header fields a hash or a conntrack key covers.
type TupleKind uint8

// Tuple kinds; TupleNone marks a protocol that is not tracked.
const (
	TupleNone TupleKind = 0
	Tuple2    TupleKind = 2 // src IP, dst IP
	Tuple3    TupleKind = 3 // src IP, dst IP, protocol
	Tuple5    TupleKind = 5 // src IP, dst IP, protocol, src port, dst port
)

func (k TupleKind) String() string {
	switch k {
	case Tuple2:
		return "2-tuple"
	case Tuple3:
		return "3-tuple"
	case Tuple5:
		return "5-tuple"
	}
	return "none"
}

// Tuple is the header fields of a packet that hashing may read.
type Tuple struct {
	Src, Dst         netip.Addr
	Proto            uint8
	SrcPort, DstPort uint16
}

// AppendLayout appends the R-HASH byte layout of t's kind-tuple to b.
//
// The layout is the fields in network byte order, back to back, with no
// padding and no family tag:
//
//	2-tuple: src IP | dst IP                         (IPv4: 8 bytes,  IPv6: 32)
//	3-tuple: src IP | dst IP | proto (1)             (IPv4: 9 bytes,  IPv6: 33)
//	5-tuple: src IP | dst IP | proto | sport | dport (IPv4: 13 bytes, IPv6: 37)
//
// IPv4 addresses are 4 bytes (an IPv4-mapped IPv6 address counts as IPv4).
// This is what a P4 hash extern over the header fields in this order and
// an XDP program copying them into a buffer both see.
func (t Tuple) AppendLayout(b []byte, kind TupleKind) []byte {
	src, dst := t.Src.Unmap(), t.Dst.Unmap()
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	if kind >= Tuple3 {
		b = append(b, t.Proto)
	}
	if kind == Tuple5 {
		b = binary.BigEndian.AppendUint16(b, t.SrcPort)
		b = binary.BigEndian.AppendUint16(b, t.DstPort)
	}
	return b
}

// HashBytes is the R-HASH function: CRC-32 (IEEE 802.3 polynomial
// 0x04C11DB7, reflected, init and final XOR 0xFFFFFFFF), the variant that
// v1model's HashAlgorithm.crc32, Tofino's CRCPolynomial and zlib share.
func HashBytes(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

// Hash hashes t's kind-tuple.
func (t Tuple) Hash(kind TupleKind) uint32 {
	var buf [40]byte
	return HashBytes(t.AppendLayout(buf[:0], kind))
}

// Slot maps a hash onto a ring of m slots (R-MAGLEV-1): hash mod m, which
// for a power-of-two m is the low bits of the hash.
func Slot(h uint32, m uint32) uint32 { return h % m }
