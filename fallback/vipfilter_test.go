package fallback_test

import (
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestVIPFilterSharedBit: two VIP addresses that fold to the same filter
// bit; removing one must leave the other reachable (the bit stays set),
// and the removed one must pass as not ours afterwards, as must an
// address that was never a VIP.
func TestVIPFilterSharedBit(t *testing.T) {
	needBPF(t)
	// Find two addresses of 198.18.0.0/15 with the same bit (131,072
	// addresses over 65,536 bits: a pair exists).
	seen := map[uint32]netip.Addr{}
	var a, b netip.Addr
	for i := 0; i < 1<<17 && !b.IsValid(); i++ {
		ip := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16), byte(i >> 8), byte(i)})
		bit := fallback.VIPFilterBit(ip.As16())
		if prev, ok := seen[bit]; ok {
			a, b = prev, ip
		}
		seen[bit] = ip
	}
	if !b.IsValid() {
		t.Fatal("no two addresses share a filter bit")
	}
	dp, err := fallback.Load(fallback.LoadOptions{Test: true})
	if err != nil {
		t.Fatalf("load (needs root): %v", err)
	}
	defer dp.Close()
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	ir := func(vips ...netip.Addr) *compiler.IR {
		ir := &compiler.IR{}
		for i, vip := range vips {
			id := uint32(i + 1)
			ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoTCP, Port: 80, Kind: compiler.MatchPort}, ServiceID: id})
			s := compiler.ServiceRow{ID: id, RingSize: 3, IdleTimeoutSec: 60}
			for c := range s.Classes {
				s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
			}
			ir.Services = append(ir.Services, s)
			ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: id, Halves: [2][]uint32{{10 * id, 10 * id, 10 * id}, nil}})
			ir.Backends = append(ir.Backends, compiler.BackendRow{ID: 10 * id, ServiceID: id, IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(id)}), Healthy: true})
		}
		return ir
	}
	send := func(dst netip.Addr, want uint32) {
		t.Helper()
		frame, err := xdp.BuildPacket(targets.Packet{Src: netip.MustParseAddr("203.0.113.7"), Dst: dst, Proto: compiler.IPProtoTCP, SrcPort: 40000, DstPort: 80, Flags: targets.FlagSYN})
		if err != nil {
			t.Fatal(err)
		}
		r, err := dp.Run(frame, 1e9)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Action != want {
			t.Fatalf("packet to %s: verdict %+v, want action %d", dst, r.Verdict, want)
		}
	}
	both, onlyB := ir(a, b), ir(b)
	onlyB.Services[0].ID, onlyB.VIPs[0].ServiceID, onlyB.Rings[0].ServiceID, onlyB.Backends[0].ServiceID = 2, 2, 2, 2
	onlyB.Backends[0].ID, onlyB.Rings[0].Halves[0] = 20, []uint32{20, 20, 20}
	onlyB.Backends[0].IP = netip.AddrFrom4([4]byte{10, 0, 0, 2})
	if _, err := dp.Apply(compiler.DiffIR(nil, both).Changes, nil); err != nil {
		t.Fatal(err)
	}
	send(a, fallback.ActForward)
	send(b, fallback.ActForward)
	send(netip.MustParseAddr("203.0.113.99"), fallback.ActNotOurs)
	if _, err := dp.Apply(compiler.DiffIR(both, onlyB).Changes, nil); err != nil {
		t.Fatal(err)
	}
	send(b, fallback.ActForward) // the shared bit must stay set
	send(a, fallback.ActNotOurs)
	if _, err := dp.Apply(compiler.DiffIR(onlyB, &compiler.IR{}).Changes, nil); err != nil {
		t.Fatal(err)
	}
	send(b, fallback.ActNotOurs)
	var w uint64
	bit := fallback.VIPFilterBit(b.As16())
	if err := dp.VipFilter.Lookup(bit>>6, &w); err != nil || w != 0 {
		t.Fatalf("filter word %d = %#x (%v) with no VIPs left, want 0", bit>>6, w, err)
	}
}
