package fallback_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestRDRAIN_ReusedSlotIsNotTheOldBackend: a conntrack entry names its
// backend by ID and array slot. When the backend is deleted and a later
// backend is given the same slot (IDs 5 and 65541 both prefer slot 5 of
// the 65,536-row array), the entry must not follow the slot to the new
// backend: the row is gone (R-DRAIN), so the packet is a miss.
func TestRDRAIN_ReusedSlotIsNotTheOldBackend(t *testing.T) {
	needBPF(t)
	dp, err := fallback.Load(fallback.LoadOptions{Test: true})
	if err != nil {
		t.Fatalf("load (needs root): %v", err)
	}
	defer dp.Close()
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("203.0.113.10")
	ir := func(backends ...uint32) *compiler.IR {
		ir := &compiler.IR{VIPs: []compiler.VIPRow{{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoTCP, Port: 80, Kind: compiler.MatchPort}, ServiceID: 1}}}
		s := compiler.ServiceRow{ID: 1, Name: "web", RingSize: 7, IdleTimeoutSec: 60}
		for c := range s.Classes {
			s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
		}
		ir.Services = []compiler.ServiceRow{s}
		ring := make([]uint32, 7)
		for i := range ring {
			ring[i] = backends[i%len(backends)]
		}
		ir.Rings = []compiler.RingRows{{ServiceID: 1, Halves: [2][]uint32{ring, nil}}}
		for _, id := range backends {
			ir.Backends = append(ir.Backends, compiler.BackendRow{ID: id, ServiceID: 1, IP: netip.AddrFrom4([4]byte{10, 0, byte(id >> 8), byte(id)}), Healthy: true})
		}
		return ir
	}
	push := func(old, new *compiler.IR) {
		t.Helper()
		if _, err := dp.Apply(compiler.DiffIR(old, new).Changes, nil); err != nil {
			t.Fatal(err)
		}
		held, err := dp.ReadTables()
		if err != nil {
			t.Fatal(err)
		}
		if d := compiler.DiffIR(held, new); !d.Empty() {
			t.Fatalf("maps differ from the IR pushed: %s", d.Summary())
		}
	}
	frame, err := xdp.BuildPacket(targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: 40000, DstPort: 80, Flags: targets.FlagACK})
	if err != nil {
		t.Fatal(err)
	}
	run := func(now time.Duration, wantCT uint8, wantBackend uint32) {
		t.Helper()
		r, err := dp.Run(frame, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Action != fallback.ActForward || r.Verdict.Ct != wantCT || r.Verdict.Backend != wantBackend {
			t.Fatalf("verdict %+v, want forward to %d with conntrack outcome %d", r.Verdict, wantBackend, wantCT)
		}
	}
	one, two, three := ir(5), ir(7), ir(7, 65541)
	push(nil, one)
	run(1e9, fallback.CTMiss, 5) // entry written: backend 5, slot 5
	run(2e9, fallback.CTHit, 5)
	push(one, two)   // backend 5 deleted, slot 5 freed
	push(two, three) // backend 65541 takes slot 5
	// The ring gives the tuple 7 or 65541; what matters is that the entry
	// for 5 is not a hit on the row now in its slot.
	r, err := dp.Run(frame, 3e9)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict.Ct != fallback.CTMiss {
		t.Fatalf("verdict %+v: the entry for deleted backend 5 matched the row now in its slot; want a miss", r.Verdict)
	}
}
