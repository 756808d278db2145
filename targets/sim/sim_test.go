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

// A VIP row whose service has no row (a state lbc never writes: it writes
// a service before its VIPs and deletes VIPs first) drops the packet as
// no-service, as p4/lb.p4, p4/tna and the XDP program do: the most specific
// row that matches decides, and a less specific one is not tried.
func TestVIPWithoutServiceDrops(t *testing.T) {
	d := loadExample(t, nil)
	ctx := context.Background()
	base, err := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
	if err != nil || base.Action != targets.Forward {
		t.Fatalf("port 80: %v %v", base, err)
	}
	vip := netip.MustParseAddr("203.0.113.10")
	rows := []compiler.VIPRow{
		// A row lbc could write (all ports of TCP → the example's service),
		// and beneath it a more specific one naming no service.
		{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProto(compiler.IPProtoTCP), Kind: compiler.MatchAllPorts}, ServiceID: base.ServiceID},
		{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProto(compiler.IPProtoTCP), Port: 8080, Kind: compiler.MatchPort}, ServiceID: 999},
	}
	for i := range rows {
		if _, err := d.Apply(ctx, compiler.Diff{Changes: []compiler.Change{{Table: compiler.TableVIP, Op: compiler.Insert, VIP: &rows[i]}}}); err != nil {
			t.Fatal(err)
		}
	}
	p := tcp("198.51.100.7", 4243, targets.FlagSYN)
	p.DstPort = 8080
	v, err := d.Process(ctx, p, time.Second)
	if err != nil || v.Action != targets.Drop || v.DropReason != targets.DropNoService {
		t.Fatalf("port 8080 (VIP row → service 999, no such row): %v %v; want a drop, reason %s, not the all-ports row's service", v, err, targets.DropNoService)
	}
	p.DstPort = 8081
	if v, err := d.Process(ctx, p, time.Second); err != nil || v.Action != targets.Forward || v.ServiceID != base.ServiceID {
		t.Fatalf("port 8081 (the all-ports row): %v %v", v, err)
	}
}

// A frame that is neither IPv4 nor IPv6 is not ours on every datapath.
func TestNotIPIsNotOurs(t *testing.T) {
	d := loadExample(t, nil)
	v, err := d.Process(context.Background(), targets.Packet{NotIP: true}, 0)
	if err != nil || v.Action != targets.NotOurs {
		t.Fatalf("non-IP frame: %v %v, want not ours", v, err)
	}
}

// R-DRAIN: an entry whose backend ID now names a backend of another
// service (the ID freed and written again for that service) is not valid:
// the flow is placed afresh on its own service's ring, never sent to the
// other service's backend. Every datapath checks the row's service
// (lb.p4's be_service, p4/tna's be_svc_diff, XDP's service ID).
func TestRDRAIN_BackendIDOfAnotherServiceInvalidates(t *testing.T) {
	d := loadExample(t, nil)
	ctx := context.Background()
	syn, err := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
	if err != nil || syn.Action != targets.Forward {
		t.Fatalf("SYN: %v %v", syn, err)
	}
	ir, _ := d.Read(ctx)
	old := *ir.Backend(syn.BackendID)
	reused := old
	reused.ServiceID, reused.Name = old.ServiceID+1000, "other-service-backend"
	reused.IP = netip.MustParseAddr("192.0.2.250")
	diff := compiler.Diff{Changes: []compiler.Change{{Table: compiler.TableBackend, Op: compiler.Modify, Backend: &reused}}}
	if _, err := d.Apply(ctx, diff); err != nil {
		t.Fatal(err)
	}
	// The ring still names the ID (only the row changed), so the flow is
	// placed afresh on it; what matters is that the entry was not used.
	v, det, err := d.ProcessDetail(tcp("198.51.100.7", 4242, targets.FlagACK), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v.CT == targets.CTHit || det.Invalid != compiler.RuleDrain {
		t.Fatalf("ACK after backend %d was rewritten for service %d: %v (entry invalid by %q); want the entry invalid by %s and the flow placed afresh on service %d's ring", syn.BackendID, reused.ServiceID, v, det.Invalid, compiler.RuleDrain, old.ServiceID)
	}
}
