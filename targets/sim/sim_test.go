package sim

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/targets"
)

func loadExample(t testing.TB, st compiler.State) *Datapath {
	t.Helper()
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config, State: st})
	if err != nil {
		t.Fatal(err)
	}
	d := New(Options{})
	if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	return d
}

func tcp(src string, sport uint16, flags uint8) targets.Packet {
	return targets.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("203.0.113.10"), Proto: compiler.IPProtoTCP, SrcPort: sport, DstPort: 80, Flags: flags}
}

// The smoke test of the contract: a SYN selects and creates (R-CT-1), the
// ACK hits the entry (R-AGE), a non-VIP packet is not ours.
func TestRCT1_SynThenAckHits(t *testing.T) {
	d := loadExample(t, nil)
	ctx := context.Background()
	v, err := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
	if err != nil || v.Action != targets.Forward || v.CT != targets.CTNew || v.Backend == "" {
		t.Fatalf("SYN: %v %v", v, err)
	}
	a, err := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagACK), time.Second)
	if err != nil || a.CT != targets.CTHit || a.BackendID != v.BackendID {
		t.Fatalf("ACK: %v %v, want hit on %d", a, err, v.BackendID)
	}
	if d.Conntrack().Len() != 1 {
		t.Fatalf("conntrack holds %d entries, want 1", d.Conntrack().Len())
	}
	p := tcp("198.51.100.7", 4242, targets.FlagACK)
	p.Dst = netip.MustParseAddr("203.0.113.99")
	if n, _ := d.Process(ctx, p, time.Second); n.Action != targets.NotOurs {
		t.Fatalf("non-VIP: %v", n)
	}
}

func TestMalformedPacketDrops(t *testing.T) {
	d := loadExample(t, nil)
	p := tcp("2001:db8::1", 1, targets.FlagSYN)
	v, err := d.Process(context.Background(), p, 0)
	if err != nil || v.Action != targets.Drop || v.DropReason != targets.DropMalformed {
		t.Fatalf("mixed families: %v %v", v, err)
	}
}
