package runtime

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Canonical returns the canonical bytestring of a big-endian unsigned
// value: leading zero bytes stripped, and zero as the single byte 0x00
// (P4Runtime spec §8.4).
func Canonical(b []byte) []byte {
	i := 0
	for i < len(b)-1 && b[i] == 0 {
		i++
	}
	if len(b) == 0 {
		return []byte{0}
	}
	return append([]byte(nil), b[i:]...)
}

// IsCanonical reports whether b is the canonical bytestring of its value.
func IsCanonical(b []byte) bool {
	return len(b) >= 1 && (len(b) == 1 || b[0] != 0)
}

// BitLen returns the number of bits a big-endian unsigned value needs
// (zero needs none).
func BitLen(b []byte) int {
	for i, x := range b {
		if x != 0 {
			return (len(b)-i-1)*8 + bits.Len8(x)
		}
	}
	return 0
}

// Fit canonicalises b and checks that it fits in width bits.
func Fit(b []byte, width int32) ([]byte, error) {
	if n := BitLen(b); n > int(width) {
		return nil, fmt.Errorf("value 0x%x needs %d bits, field is %d bits wide", Canonical(b), n, width)
	}
	return Canonical(b), nil
}

// Uint encodes v as a canonical bytestring.
func Uint(v uint64) []byte {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], v)
	return Canonical(buf[:])
}

// Bool encodes a one-bit flag.
func Bool(v bool) []byte {
	if v {
		return []byte{1}
	}
	return []byte{0}
}

// ToUint decodes a bytestring of at most 8 significant bytes.
func ToUint(b []byte) (uint64, error) {
	if BitLen(b) > 64 {
		return 0, fmt.Errorf("value 0x%x wider than 64 bits", b)
	}
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v, nil
}

// Pad returns b left-padded with zeros to n bytes (b must fit).
func Pad(b []byte, n int) []byte {
	if len(b) >= n {
		return b[len(b)-n:]
	}
	out := make([]byte, n)
	copy(out[n-len(b):], b)
	return out
}
