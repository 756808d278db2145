package sim

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// forceCRC returns the 4 bytes x for which f(x) == want, where f is a
// CRC-32 over a message holding x at a fixed place (so f is affine in x's
// bits over GF(2)): Gaussian elimination over the 32 unit vectors. It lets
// a test build the flow a hash collision or a zero signature needs,
// which no random search finds (1 in 2^32).
func forceCRC(t *testing.T, f func(x [4]byte) uint32, want uint32) [4]byte {
	t.Helper()
	var zero [4]byte
	c := f(zero)
	// Rows: column j's image A_j = f(e_j) ^ c, paired with the unit e_j.
	type row struct{ img, in uint32 }
	rows := make([]row, 32)
	for j := 0; j < 32; j++ {
		var x [4]byte
		binary.BigEndian.PutUint32(x[:], 1<<j)
		rows[j] = row{f(x) ^ c, 1 << j}
	}
	// Reduce to a basis with one pivot bit each.
	for bit := 31; bit >= 0; bit-- {
		p := -1
		for i := 31 - bit; i < 32; i++ {
			if rows[i].img>>bit&1 == 1 {
				p = i
				break
			}
		}
		if p < 0 {
			t.Fatalf("forceCRC: the map is singular at bit %d", bit)
		}
		pos := 31 - bit
		rows[pos], rows[p] = rows[p], rows[pos]
		for i := range rows {
			if i != pos && rows[i].img>>bit&1 == 1 {
				rows[i].img ^= rows[pos].img
				rows[i].in ^= rows[pos].in
			}
		}
	}
	target, in := want^c, uint32(0)
	for i, r := range rows {
		if target>>(31-i)&1 == 1 {
			in ^= r.in
		}
	}
	var x [4]byte
	binary.BigEndian.PutUint32(x[:], in)
	if got := f(x); got != want {
		t.Fatalf("forceCRC: got %#08x, want %#08x", got, want)
	}
	return x
}

// zeroSigKey is a 5-tuple key of service svc whose register-conntrack
// signature CRC32(be32(h) | be32(svc)) is 0 before lb.p4 maps it to 1.
func zeroSigKey(t *testing.T, svc uint32) Key {
	t.Helper()
	hb := forceCRC(t, func(x [4]byte) uint32 {
		var b [8]byte
		copy(b[:4], x[:])
		binary.BigEndian.PutUint32(b[4:], svc)
		return compiler.HashBytes(b[:])
	}, 0)
	h := binary.BigEndian.Uint32(hb[:])
	base := compiler.Tuple{Dst: netip.MustParseAddr("203.0.113.10"), Proto: compiler.IPProtoTCP, SrcPort: 4242, DstPort: 80}
	src := forceCRC(t, func(x [4]byte) uint32 {
		tu := base
		tu.Src = netip.AddrFrom4(x)
		return tu.Hash(compiler.Tuple5)
	}, h)
	base.Src = netip.AddrFrom4(src)
	k := MakeKey(svc, compiler.Tuple5, base)
	if _, sig := slotHashes(k); sig != 0 {
		t.Fatalf("forced key %v: signature %#x, want 0", k, sig)
	}
	return k
}

func TestForceCRC(t *testing.T) {
	for _, want := range []uint32{0, 1, 0xdeadbeef, 0xffffffff} {
		x := forceCRC(t, func(x [4]byte) uint32 {
			return compiler.HashBytes(append([]byte("prefix"), append(x[:], "suffix"...)...))
		}, want)
		if got := compiler.HashBytes(append([]byte("prefix"), append(x[:], "suffix"...)...)); got != want {
			t.Errorf("want %#x: got %#x with %x", want, got, x)
		}
	}
}
