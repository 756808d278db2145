package fallback_test

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestEncap4Header: the outer IPv4 header of a forwarded packet, whose
// checksum the program sums from the words it writes rather than reading
// the header back: for packets of every TOS and of several lengths, the
// header carries the inner TOS, the length, TTL 64, IP-in-IP, the tunnel
// source and the backend, and its checksum verifies.
func TestEncap4Header(t *testing.T) {
	needBPF(t)
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, ConntrackEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	ir := benchIR()
	if _, err := dp.Apply(compiler.DiffIR(nil, ir).Changes, nil); err != nil {
		t.Fatal(err)
	}
	src4 := netip.MustParseAddr("192.0.2.1")
	if err := dp.SetConfig(fallback.Config{TunnelSource4: src4}); err != nil {
		t.Fatal(err)
	}
	backends := map[uint32]netip.Addr{}
	for _, b := range ir.Backends {
		backends[b.ID] = b.IP
	}
	for tos := 0; tos < 256; tos++ {
		p := targets.Packet{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(tos)}), Dst: netip.MustParseAddr("203.0.113.10"),
			Proto: compiler.IPProtoTCP, SrcPort: 1000 + uint16(tos), DstPort: 80, Flags: targets.FlagSYN, PayloadLen: 1 + tos*5}
		frame, err := xdp.BuildPacket(p)
		if err != nil {
			t.Fatal(err)
		}
		in := frame[14:]
		in[1] = byte(tos)
		binary.BigEndian.PutUint16(in[10:], 0)
		binary.BigEndian.PutUint16(in[10:], ^onesSum(in[:20]))
		innerLen := int(binary.BigEndian.Uint16(in[2:]))
		r, err := dp.Run(frame, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Action != fallback.ActForward {
			t.Fatalf("TOS %#x: verdict %+v, want forward", tos, r.Verdict)
		}
		if len(r.Out) < 14+20 || binary.BigEndian.Uint16(r.Out[12:]) != 0x0800 {
			t.Fatalf("TOS %#x: output %x is not IPv4", tos, r.Out)
		}
		h := r.Out[14 : 14+20]
		be := backends[r.Verdict.Backend]
		switch {
		case h[0] != 0x45 || h[1] != byte(tos):
			t.Fatalf("TOS %#x: outer version/IHL %#x TOS %#x", tos, h[0], h[1])
		case int(binary.BigEndian.Uint16(h[2:])) != innerLen+20:
			t.Fatalf("TOS %#x: outer length %d, want %d", tos, binary.BigEndian.Uint16(h[2:]), innerLen+20)
		case binary.BigEndian.Uint32(h[4:]) != 0 || h[8] != 64 || h[9] != 4:
			t.Fatalf("TOS %#x: outer id/frag %#x TTL %d proto %d, want 0, 64, 4", tos, binary.BigEndian.Uint32(h[4:]), h[8], h[9])
		case netip.AddrFrom4([4]byte(h[12:16])) != src4 || netip.AddrFrom4([4]byte(h[16:20])) != be:
			t.Fatalf("TOS %#x: outer %s → %s, want %s → %s", tos, netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20])), src4, be)
		case onesSum(h) != 0xffff:
			t.Fatalf("TOS %#x: outer header checksum %#04x does not verify (sum %#04x)", tos, binary.BigEndian.Uint16(h[10:]), onesSum(h))
		}
	}
}

// onesSum is the ones' complement sum of b's 16-bit words.
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
