package fallback_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestIPv4KeysInTheirOwnMaps: IPv4 VIPs are written to vips4 and IPv4
// flows tracked in conntrack4 (their short keys), IPv6 ones in vips and
// conntrack; a flow of either family is created by its SYN, hits its entry
// with the next packet, is read back with its tuple, and is a miss once
// its entry is deleted from its own map.
func TestIPv4KeysInTheirOwnMaps(t *testing.T) {
	needBPF(t)
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, ConntrackEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if _, err := dp.Apply(compiler.DiffIR(nil, benchIR()).Changes, nil); err != nil {
		t.Fatal(err)
	}
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")}); err != nil {
		t.Fatal(err)
	}
	count := func(m *ebpf.Map) int {
		n := 0
		k := make([]byte, m.KeySize())
		v := make([]byte, m.ValueSize())
		for it := m.Iterate(); it.Next(&k, &v); {
			n++
		}
		return n
	}
	// benchIR: 203.0.113.10 TCP 80 and UDP all ports; 2001:db8:100::10 TCP 80.
	if v4, v6 := count(dp.Vips4), count(dp.Vips); v4 != 2 || v6 != 1 {
		t.Fatalf("vips4 holds %d VIPs, vips %d; want 2 and 1", v4, v6)
	}
	flows := []targets.Packet{
		{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: compiler.IPProtoTCP, SrcPort: 4242, DstPort: 80},
		{Src: netip.MustParseAddr("2001:db8:ff::7"), Dst: netip.MustParseAddr("2001:db8:100::10"), Proto: compiler.IPProtoTCP, SrcPort: 4242, DstPort: 80},
	}
	run := func(p targets.Packet, flags uint8, want uint8) fallback.Verdict {
		t.Helper()
		p.Flags = flags
		frame, err := xdp.BuildPacket(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := dp.Run(frame, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Action != fallback.ActForward || r.Verdict.Ct != want {
			t.Fatalf("%s → %s flags %#x: verdict %+v, want forward with conntrack outcome %d", p.Src, p.Dst, flags, r.Verdict, want)
		}
		return r.Verdict
	}
	for _, p := range flows {
		syn := run(p, targets.FlagSYN, fallback.CTNew)
		if ack := run(p, targets.FlagACK, fallback.CTHit); ack.Backend != syn.Backend {
			t.Fatalf("%s: the hit went to backend %d, the SYN to %d", p.Src, ack.Backend, syn.Backend)
		}
	}
	if v4, v6 := count(dp.Conntrack4), count(dp.Conntrack); v4 != 1 || v6 != 1 {
		t.Fatalf("conntrack4 holds %d entries, conntrack %d; want one each", v4, v6)
	}
	es, err := dp.ReadConntrack()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("ReadConntrack: %d entries, want 2: %+v", len(es), es)
	}
	for _, e := range es {
		if e.Tuple.SrcPort != 4242 || e.Tuple.DstPort != 80 || e.Tuple.Proto != compiler.IPProtoTCP ||
			(e.Tuple.Src != flows[0].Src || e.Tuple.Dst != flows[0].Dst) && (e.Tuple.Src != flows[1].Src || e.Tuple.Dst != flows[1].Dst) {
			t.Fatalf("ReadConntrack: entry %+v is neither flow's tuple", e)
		}
	}
	// A fleet peer's copy of another IPv4 flow lands in conntrack4, is
	// withdrawn from there, and once written again, its flow hits it.
	var own targets.ConntrackEntry
	for _, e := range es {
		if e.Tuple.Src == flows[0].Src {
			own = e
		}
	}
	peer := own
	peer.Tuple.SrcPort = 4343
	peer.Idle = 0
	if n, err := dp.WriteConntrack([]targets.ConntrackEntry{peer}); err != nil || n != 1 {
		t.Fatalf("WriteConntrack: %d, %v; want 1", n, err)
	}
	if n := count(dp.Conntrack4); n != 2 {
		t.Fatalf("conntrack4 holds %d entries after a peer's copy, want 2", n)
	}
	if n, err := dp.DeleteConntrack([]targets.ConntrackEntry{peer}); err != nil || n != 1 {
		t.Fatalf("DeleteConntrack: %d, %v; want 1", n, err)
	}
	if n := count(dp.Conntrack4); n != 1 {
		t.Fatalf("conntrack4 holds %d entries after the withdrawal, want 1", n)
	}
	if _, err := dp.WriteConntrack([]targets.ConntrackEntry{peer}); err != nil {
		t.Fatal(err)
	}
	p := flows[0]
	p.SrcPort = 4343
	if v := run(p, targets.FlagACK, fallback.CTHit); v.Backend != peer.BackendID {
		t.Fatalf("the copied flow went to backend %d, want the copy's %d", v.Backend, peer.BackendID)
	}
}
