package xdp_test

import (
	"net/netip"
	"testing"

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
