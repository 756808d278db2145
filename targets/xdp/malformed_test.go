package xdp_test

import (
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestMalformedFramesDropAndCount truncates valid frames at every length
// and corrupts header fields: the program must return a defined verdict
// (a counted malformed drop, or not-ours when the destination is not a
// VIP), never forward a packet it could not parse, and keep working.
func TestMalformedFramesDropAndCount(t *testing.T) {
	needBPF(t)
	f := families[0]
	cfg := diffConfig(f, compiler.AffinityClientIPProto, compiler.TrackPerSession, compiler.PersistDefault, false)
	tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	st := compiler.State{}
	for _, e := range cfg.Services[1].Backends[0].Endpoints {
		st.SetWeight(e.Name, 1)
	}
	res, err := compiler.Compile(compiler.Input{Config: cfg, State: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Apply(t.Context(), compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	client := f.client(1)
	pkts := []targets.Packet{
		{Src: client, Dst: f.vipTCP, Proto: compiler.IPProtoTCP, SrcPort: 1000, DstPort: 80, Flags: targets.FlagSYN},
		{Src: client, Dst: f.vipUDP, Proto: compiler.IPProtoUDP, SrcPort: 1000, DstPort: 53},
		{Src: f.router, Dst: f.vipTCP, Proto: compiler.IPProtoICMP, ICMPType: 3, ICMPCode: 4, Inner: &compiler.Tuple{Src: f.vipTCP, Dst: client, Proto: compiler.IPProtoTCP, SrcPort: 80, DstPort: 1000}},
		{Src: netip.MustParseAddr("2001:db8:c::1"), Dst: netip.MustParseAddr("2001:db8:100::30"), Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 2, Frag: targets.FragFirst, FragID: 7},
	}
	malformed := 0
	for _, p := range pkts {
		frame, err := xdp.BuildPacket(p)
		if err != nil {
			t.Fatal(err)
		}
		for n := 14; n < len(frame); n++ {
			v, _, err := tgt.RunFrame(frame[:n], 0)
			if err != nil {
				t.Fatalf("%v truncated to %d bytes: %v", p.Proto, n, err)
			}
			if v.Action == targets.Forward && n < len(frame)-16 {
				// Only the payload may be cut without notice (16 default bytes).
				t.Fatalf("%v truncated to %d of %d bytes was forwarded", p.Proto, n, len(frame))
			}
			if v.Action == targets.Drop {
				if v.DropReason != targets.DropMalformed {
					t.Fatalf("truncated frame dropped for %q", v.DropReason)
				}
				malformed++
			}
		}
		// Corrupt the IP version and the IPv4 header length.
		bad := append([]byte(nil), frame...)
		bad[14] = 0x15
		if v, _, err := tgt.RunFrame(bad, 0); err != nil || v.Action != targets.Drop || v.DropReason != targets.DropMalformed {
			t.Fatalf("bad IP version: %v %v", v, err)
		}
		malformed++
	}
	st2, err := tgt.Datapath().ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	if st2.Global["drop-malformed"] != uint64(malformed) {
		t.Fatalf("malformed counter %d, want %d", st2.Global["drop-malformed"], malformed)
	}
	// Still working.
	frame, _ := xdp.BuildPacket(pkts[0])
	if v, _, err := tgt.RunFrame(frame, 0); err != nil || v.Action != targets.Forward {
		t.Fatalf("after malformed frames: %v %v", v, err)
	}
	t.Logf("%d malformed frames dropped and counted", malformed)
}
