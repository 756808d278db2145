package xdp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestCountersForTheController: the program's counters reach `lbc run`
// through targets.CounterTarget: packets and bytes per service, new
// connections per service and backend, drops by reason.
func TestCountersForTheController(t *testing.T) {
	needBPF(t)
	tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.Apply(t.Context(), compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	syn := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: compiler.IPProtoTCP, SrcPort: 4242, DstPort: 80, Flags: targets.FlagSYN}
	ack := syn
	ack.Flags = targets.FlagACK
	var backend uint32
	for _, p := range []targets.Packet{syn, ack} {
		v, err := tgt.Process(t.Context(), p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if v.Action != targets.Forward {
			t.Fatalf("%v: %s", p.Flags, v)
		}
		backend = v.BackendID
	}
	frame, err := xdp.BuildPacket(syn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tgt.RunFrame(frame[:40], 0); err != nil { // cut inside the TCP header
		t.Fatal(err)
	}
	var ct targets.CounterTarget = tgt
	c, err := ct.Counters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	svc := c.Services[res.IR.Services[0].ID]
	if svc.Packets < 2 || svc.Bytes == 0 || svc.NewConnections != 1 {
		t.Errorf("service counters %+v, want ≥ 2 packets, bytes, 1 new connection", svc)
	}
	if b := c.Backends[backend]; b.NewConnections != 1 {
		t.Errorf("backend %d counters %+v, want 1 new connection", backend, b)
	}
	if c.Drops[targets.DropMalformed] != 1 {
		t.Errorf("drops %v, want one %s", c.Drops, targets.DropMalformed)
	}
}

// TestSessionsCountLiveEntries (issue 13 §5): the XDP target reports live
// conntrack entries per service, never a false 0: entries count while a
// packet would find them valid, and stop counting once they age out
// (R-AGE), their service's epoch moves on (R-EPOCH) or their backend's
// deadline passes (R-DRAIN); a service with no entry reports a real 0.
func TestSessionsCountLiveEntries(t *testing.T) {
	needBPF(t)
	ctx := t.Context()
	tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	vip := netip.MustParseAddr("203.0.113.10")
	ir := mtuIR(vip, netip.MustParseAddr("10.0.0.1")) // services 1 (port 80) and 2 (8080), idle 60 s
	if _, err := tgt.Apply(ctx, compiler.DiffIR(nil, ir)); err != nil {
		t.Fatal(err)
	}
	sessions := func(at time.Duration) map[uint32]uint64 {
		t.Helper()
		// A packet that is not ours moves the virtual clock to at.
		if _, err := tgt.Process(ctx, targets.Packet{Src: netip.MustParseAddr("198.51.100.1"), Dst: netip.MustParseAddr("203.0.113.99"), Proto: compiler.IPProtoUDP, SrcPort: 1, DstPort: 2}, at); err != nil {
			t.Fatal(err)
		}
		c, err := tgt.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint32]uint64{}
		for id, s := range c.Services {
			if !s.HasSessions {
				t.Fatalf("service %d: sessions not counted", id)
			}
			out[id] = s.Sessions
		}
		return out
	}
	for i := 0; i < 5; i++ {
		p := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: uint16(5000 + i), DstPort: 80, Flags: targets.FlagSYN}
		if _, err := tgt.Process(ctx, p, time.Duration(i)*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if got := sessions(10 * time.Second); got[1] != 5 || got[2] != 0 || len(got) != 2 {
		t.Fatalf("sessions %v, want 5 on service 1 and a counted 0 on service 2", got)
	}
	// The first two were last seen at 0 s and 1 s: at 61 s they are idle 60 s or more.
	if got := sessions(61 * time.Second); got[1] != 3 {
		t.Fatalf("at 61 s: sessions %v, want 3 (two aged out)", got)
	}
	// A new epoch (a failover flush) ends the rest.
	next := ir.Clone()
	next.Services[0].Epoch++
	if _, err := tgt.Apply(ctx, compiler.DiffIR(ir, next)); err != nil {
		t.Fatal(err)
	}
	if got := sessions(62 * time.Second); got[1] != 0 {
		t.Fatalf("after an epoch bump: sessions %v, want 0", got)
	}
	// A deadline on the backend ends entries made since, once it passes.
	p := targets.Packet{Src: netip.MustParseAddr("198.51.100.8"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: 6000, DstPort: 80, Flags: targets.FlagSYN}
	if _, err := tgt.Process(ctx, p, 63*time.Second); err != nil {
		t.Fatal(err)
	}
	last := next.Clone()
	last.Backends[0].Deadline = 70 * time.Second
	if _, err := tgt.Apply(ctx, compiler.DiffIR(next, last)); err != nil {
		t.Fatal(err)
	}
	if got := sessions(69 * time.Second); got[1] != 1 {
		t.Fatalf("before the deadline: sessions %v, want 1", got)
	}
	if got := sessions(70 * time.Second); got[1] != 0 {
		t.Fatalf("at the deadline: sessions %v, want 0", got)
	}
}
