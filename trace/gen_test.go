package trace

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
)

// TestGenerate: a seed gives one trace; the trace parses back, spans the
// protocol mix the generator promises, and replays on the reference
// datapath with its events without an error.
func TestGenerate(t *testing.T) {
	cfg, _ := loadConfig(t, "ct.yaml", "")
	o := GenOptions{Seed: 7, Packets: 3000, Clients: 50, Duration: 300, Events: true}
	a, b := Generate(cfg, o), Generate(cfg, o)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	o.Seed = 8
	if reflect.DeepEqual(a, Generate(cfg, o)) {
		t.Fatal("different seeds, same trace")
	}
	var buf bytes.Buffer
	if err := Write(&buf, a); err != nil {
		t.Fatal(err)
	}
	lines, err := Parse(&buf, "gen")
	if err != nil {
		t.Fatalf("generated trace does not parse: %v", err)
	}
	seen := map[string]int{}
	for _, l := range lines {
		switch {
		case l.Event != nil:
			seen["event:"+l.Event.Kind]++
		case l.Packet.Frag != targets.FragNone:
			seen["frag:"+l.Packet.Frag.String()]++
		case l.Packet.Inner != nil:
			seen["icmp-error"]++
		case l.Packet.Src.Is6():
			seen["ipv6"]++
		case l.Packet.Flags&targets.FlagSYN != 0:
			seen["syn"]++
		case l.Packet.Flags&targets.FlagFIN != 0:
			seen["fin"]++
		default:
			seen[ProtoName(l.Packet.Proto)]++
		}
	}
	for _, k := range []string{"event:health", "event:remove", "event:add", "frag:first", "frag:middle", "frag:last", "icmp-error", "ipv6", "syn", "fin", "tcp", "udp", "esp", "gre", "icmp"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the generated trace (%v)", k, seen)
		}
	}
	ctx := context.Background()
	dp := sim.New(sim.Options{})
	rp, err := NewReplayer(ctx, cfg, nil, dp, dp)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if _, err := rp.Step(ctx, l); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	s := rp.Summary()
	if s.Packets != o.Packets || s.CT["hit"] == 0 || s.CT["new"] == 0 || s.CT["untracked"] == 0 || s.NotOurs == 0 {
		t.Errorf("summary %+v", s)
	}
	t.Logf("%s; %+v", Describe(lines), s)
}

// TestGenerateLiveAcrossEvents: the generator puts flows across its
// events, so that on services whose entries stop persisting (NEVER_PERSIST,
// UDP) an entry is re-selected after a health event (a miss citing
// R-PERSIST) and then used again by the same flow (a hit): the sequence
// the BMv2 comparison must see (issue 13 §6). Some packets are tagged
// (R-VLAN) and, with Oversize, some are full-size with DF.
func TestGenerateLiveAcrossEvents(t *testing.T) {
	cfg, _ := loadConfig(t, "persist.yaml", "")
	lines := Generate(cfg, GenOptions{Seed: 3, Packets: 4000, Clients: 40, Duration: 120, Events: true, Oversize: true})
	ctx := context.Background()
	dp := sim.New(sim.Options{})
	rp, err := NewReplayer(ctx, cfg, nil, dp, dp)
	if err != nil {
		t.Fatal(err)
	}
	reselected := map[[2]string]bool{} // flow → re-selected after an event
	var again, tagged, big int
	for _, l := range lines {
		outs, err := rp.Step(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if l.Packet == nil {
			continue
		}
		p := l.Packet
		if p.VLAN != 0 {
			tagged++
		}
		if p.PayloadLen >= 1400 && (p.DF || p.Src.Is6()) {
			big++
		}
		o := outs[len(outs)-1]
		flow := [2]string{FormatPacket(targets.Packet{Src: p.Src, Dst: p.Dst, Proto: p.Proto, SrcPort: p.SrcPort, DstPort: p.DstPort}), o.Service}
		switch {
		case o.CT == targets.CTMiss && slices.Contains(o.Rule, "R-PERSIST"):
			reselected[flow] = true
		case o.CT == targets.CTHit && reselected[flow]:
			again++
			delete(reselected, flow)
		}
	}
	if again < 5 || tagged == 0 || big == 0 {
		t.Fatalf("%d re-selected entries used again (want ≥ 5), %d tagged packets, %d full-size DF packets", again, tagged, big)
	}
	t.Logf("%s; %d re-selected entries used again, %d tagged, %d full-size", Describe(lines), again, tagged, big)
}
