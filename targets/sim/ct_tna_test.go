package sim

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/targets"
)

// tnaDatapath compiles the failover example (idleTimeoutSec 60) with a
// power-of-two ring, as --target tofino requires, onto the TNA geometry.
func tnaDatapath(t testing.TB, slots int, origin uint64) (*Datapath, *TNA) {
	t.Helper()
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	for i := range dec.Config.Services {
		dec.Config.Services[i].RingSize = 65536
	}
	if ps := compiler.CheckTarget(dec.Config, compiler.TargetTofino); len(ps) > 0 {
		t.Fatal(ps)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewTNA(slots, origin)
	if err != nil {
		t.Fatal(err)
	}
	d := New(Options{Conntrack: g, Fallback: true})
	if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	return d, g
}

const wrapNS = uint64(1) << tick.TNATimestampBits

// TestRAGE_TNAIdleAcrossWrap: the 48-bit timestamp (and the 32-bit tick
// taken from it) wraps 30 s after the flow starts; an idle flow is still
// aged by its true idle time, on either side of the timeout.
func TestRAGE_TNAIdleAcrossWrap(t *testing.T) {
	origin := wrapNS - uint64(30*time.Second)
	for _, tc := range []struct {
		idle   time.Duration // since the SYN at t=0
		wantCT string
	}{
		{59 * time.Second, targets.CTHit},
		{59*time.Second + 999*time.Millisecond, targets.CTHit},
		{60*time.Second + 100*time.Microsecond, targets.CTMiss}, // just past the 60 s timeout (2 ticks)
		{61 * time.Second, targets.CTMiss},
		{10 * time.Hour, targets.CTMiss},
	} {
		t.Run(tc.idle.String(), func(t *testing.T) {
			d, g := tnaDatapath(t, 1<<16, origin)
			ctx := context.Background()
			syn, err := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
			if err != nil || syn.CT != targets.CTNew {
				t.Fatalf("SYN: %v %v", syn, err)
			}
			if g.Tick(tc.idle) >= g.Tick(0) {
				t.Fatalf("tick %#x at %v is not past the wrap (start %#x)", g.Tick(tc.idle), tc.idle, g.Tick(0))
			}
			v, det, err := d.ProcessDetail(tcp("198.51.100.7", 4242, targets.FlagACK), tc.idle)
			if err != nil {
				t.Fatal(err)
			}
			if v.CT != tc.wantCT {
				t.Fatalf("ACK after %v idle across the wrap: CT %v (invalid %q), want %v", tc.idle, v.CT, det.Invalid, tc.wantCT)
			}
			if tc.wantCT == targets.CTMiss && det.Invalid != "R-AGE" {
				t.Fatalf("miss for %q, want R-AGE", det.Invalid)
			}
		})
	}
}

// TestRAGE_TNATickResolution: the switch measures age in whole ticks of
// 2^16 ns, with an idle timeout of ceil(60 s / tick) = 915528 ticks. With
// the flow started on a tick boundary, 60 s of idle is 915527.3 ticks:
// still alive on the switch (the exact reference has expired it); tick
// 915528 (60.0000102 s) expires it. The geometry predicts both.
func TestRAGE_TNATickResolution(t *testing.T) {
	if got := tick.TNAIdleTicks(60); got != 915528 {
		t.Fatalf("tick.TNAIdleTicks(60) = %d, want 915528", got)
	}
	if got := tick.TNAIdleTicks(86400); got != 1318359375 || got >= 1<<31 {
		t.Fatalf("tick.TNAIdleTicks(86400) = %d, want 1318359375 (< 2^31)", got)
	}
	d, _ := tnaDatapath(t, 1<<16, 0)
	ctx := context.Background()
	if v, _ := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0); v.CT != targets.CTNew {
		t.Fatalf("SYN: %v", v)
	}
	if v, _ := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagACK), 60*time.Second); v.CT != targets.CTHit {
		t.Fatalf("ACK at 60 s (915527 ticks): %v, want a hit at tick resolution", v.CT)
	}
	// The hit refreshed the entry at 60 s (tick 915527); 915528 ticks later it expires.
	expire := time.Duration(915527+915528) * tick.TNA
	if v, _ := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagACK), expire-time.Nanosecond); v.CT != targets.CTHit {
		t.Fatalf("ACK one ns before tick %d: %v, want hit", 915527+915528, v.CT)
	}
	d2, _ := tnaDatapath(t, 1<<16, 0)
	d2.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
	if v, det, _ := d2.ProcessDetail(tcp("198.51.100.7", 4242, targets.FlagACK), 915528*tick.TNA); v.CT != targets.CTMiss || det.Invalid != "R-AGE" {
		t.Fatalf("ACK at tick 915528: %v %q, want an R-AGE miss", v.CT, det.Invalid)
	}
}

// TestRAGE_TNAAliasAfterHalfPeriod states the one thing the switch's
// R-AGE check cannot tell: it reads (seen − (now − idle_ticks)) mod 2^32 by
// its sign, so an entry idle for more than its timeout plus 2^31 ticks
// (39.1 h) and less than the 2^32-tick wrap (78.2 h) looks fresh on the
// switch, and the geometry says so; the exact reference expires it.
func TestRAGE_TNAAliasAfterHalfPeriod(t *testing.T) {
	idleTicks := time.Duration(tick.TNAIdleTicks(60))
	for _, tc := range []struct {
		name  string
		ticks time.Duration // idle, in ticks
		want  string
	}{
		{"timeout", idleTicks, targets.CTMiss},
		{"timeout+2^31", idleTicks + 1<<31, targets.CTMiss},
		{"timeout+2^31+1", idleTicks + 1<<31 + 1, targets.CTHit},
		{"2^32-1", 1<<32 - 1, targets.CTHit},
		{"2^32 (a whole period)", 1 << 32, targets.CTHit},
		{"2^32+timeout", 1<<32 + idleTicks, targets.CTMiss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := tnaDatapath(t, 1<<16, 12345*uint64(tick.TNA))
			ctx := context.Background()
			d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
			if v, _ := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagACK), tc.ticks*tick.TNA); v.CT != tc.want {
				t.Fatalf("after %d ticks idle: %v, want %v", tc.ticks, v.CT, tc.want)
			}
			exact := New(Options{})
			exact.Apply(ctx, compiler.DiffIR(nil, d.IR()))
			exact.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), 0)
			if v, _ := exact.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagACK), tc.ticks*tick.TNA); v.CT != targets.CTMiss {
				t.Fatalf("exact reference after %d ticks: %v, want miss", tc.ticks, v.CT)
			}
		})
	}
}

// TestTNAGeometryDirectMapped: one slot per index; a second flow with the
// same index overwrites the first, which then misses (never a wrong hit:
// the signatures differ).
func TestTNAGeometryDirectMapped(t *testing.T) {
	if _, err := NewTNA(1000, 0); err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Fatalf("NewTNA(1000): %v, want a power-of-two error", err)
	}
	g, err := NewTNA(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	byIndex := map[uint32]Key{}
	var a, b Key
	for i := uint64(0); ; i++ {
		k := syntheticKey(3, i)
		idx, _ := TNASlot(k, 16)
		if prev, ok := byIndex[idx]; ok {
			a, b = prev, k
			break
		}
		byIndex[idx] = k
	}
	g.Store(a, Entry{BackendID: 1})
	if e, ok := g.Lookup(a); !ok || e.BackendID != 1 {
		t.Fatalf("a: %v %v", e, ok)
	}
	if _, ok := g.Lookup(b); ok {
		t.Fatal("b hits a's slot")
	}
	g.Store(b, Entry{BackendID: 2})
	if _, ok := g.Lookup(a); ok {
		t.Fatal("a survives b's store in its slot")
	}
	if e, ok := g.Lookup(b); !ok || e.BackendID != 2 || g.Len() != 1 {
		t.Fatalf("b: %v %v len %d", e, ok, g.Len())
	}
}

// TestRMAGLEV1_TNASlotIsHashBits: the ring-size rule. With a power-of-two
// ring the TNA program's slot, the low bits of the CRC32, is the slot the
// reference takes (hash mod M) for every packet; the default prime ring is
// rejected for --target tofino, naming the service.
func TestRMAGLEV1_TNASlotIsHashBits(t *testing.T) {
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	ps := compiler.CheckTarget(dec.Config, compiler.TargetTofino)
	if len(ps) != 1 || !strings.Contains(ps.Error(), `service "web"`) || !strings.Contains(ps.Error(), "ringSize: 65536") {
		t.Fatalf("default ring on tofino: %v, want one error naming service web and 65536", ps)
	}
	d, _ := tnaDatapath(t, 1<<16, 0)
	for i := 0; i < 2000; i++ {
		p := tcp(fmt.Sprintf("198.51.%d.%d", i/250, i%250+1), uint16(1024+i), targets.FlagSYN)
		if i%2 == 1 {
			p.Src = netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i))
			p.Dst = netip.MustParseAddr("2001:db8:ffff::10")
		}
		_, det, err := d.ProcessDetail(p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if det.RingSize == 0 {
			continue // IPv6 packets hit no service in this example
		}
		if det.Slot != det.Hash&(det.RingSize-1) {
			t.Fatalf("packet %d: slot %d, hash %#x & (%d-1) = %d", i, det.Slot, det.Hash, det.RingSize, det.Hash&(det.RingSize-1))
		}
	}
}

// R-CT on Tofino: the signature is the v1model program's cut to 31 bits,
// and an empty slot (TNAEmpty, the register's initial value) matches no
// key, so no key's first packet finds an entry it did not create.
func TestRCT_TNASignature31Bits(t *testing.T) {
	g, err := NewTNA(64, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 20000; i++ {
		k := syntheticKey(7, i)
		idx, sig := TNASlot(k, g.Slots)
		bucket, full := RegisterSlot(k, g.Slots)
		if idx != bucket {
			t.Fatalf("key %d: TNA slot %d, v1model bucket %d: the program indexes both alike", i, idx, bucket)
		}
		if sig&TNAEmpty != 0 {
			t.Fatalf("key %d: signature %#x has bit 31, which marks an empty slot", i, sig)
		}
		if full != 1 && sig != full&^TNAEmpty {
			t.Fatalf("key %d: signature %#x, want the v1model one %#x without bit 31", i, sig, full&^TNAEmpty)
		}
		if _, ok := g.Lookup(k); ok {
			t.Fatalf("key %d: hit in an empty geometry", i)
		}
	}
	if g.Len() != 0 {
		t.Fatalf("Len of an empty geometry = %d", g.Len())
	}
	k := syntheticKey(7, 1)
	g.Store(k, Entry{BackendID: 5})
	g.Store(k, Entry{BackendID: 6})
	if e, ok := g.Lookup(k); !ok || e.BackendID != 6 || g.Len() != 1 {
		t.Fatalf("after two stores: %+v %v, Len %d; want backend 6, one slot", e, ok, g.Len())
	}
}
