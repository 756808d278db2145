package fallback_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// TestRAGE_TickPrecisionInBPF runs the program on a test clock with
// production's tick (4 ms, HZ=250): the virtual time is cut to whole
// ticks as jiffies are. A flow created at a random phase and seen again
// after Δ must hit while Δ < idleTimeoutSec (never early) and miss once
// Δ ≥ idleTimeoutSec + 4 ms (at most a tick late) — R-AGE at tick
// precision, in the program itself rather than in the arithmetic.
func TestRAGE_TickPrecisionInBPF(t *testing.T) {
	needBPF(t)
	const tick = 4 * time.Millisecond
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, TestTick: tick})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer dp.Close()
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("203.0.113.10")
	ir := oneService(vip, 10, 0)
	if _, err := dp.Apply(compiler.DiffIR(nil, ir).Changes, nil); err != nil {
		t.Fatal(err)
	}
	idle := 10 * time.Second
	rnd := rand.New(rand.NewPCG(7, 7))
	hits, misses := 0, 0
	for i := 0; i < 600; i++ {
		port := uint16(10000 + i)
		pkt := func(flags uint8) []byte {
			f, err := xdp.BuildPacket(targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: port, DstPort: 80, Flags: flags})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		t0 := time.Hour + time.Duration(rnd.Int64N(int64(time.Second)))
		if r, err := dp.Run(pkt(targets.FlagSYN), t0); err != nil || r.Verdict.Ct != fallback.CTNew {
			t.Fatalf("SYN: %+v %v", r.Verdict, err)
		}
		d := idle - 2*tick + time.Duration(rnd.Int64N(int64(4*tick)))
		r, err := dp.Run(pkt(targets.FlagACK), t0+d)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case d < idle && r.Verdict.Ct != fallback.CTHit:
			t.Fatalf("flow idle for %v < %v: ct %d, want a hit (expired early)", d, idle, r.Verdict.Ct)
		case d >= idle+tick && r.Verdict.Ct != fallback.CTMiss:
			t.Fatalf("flow idle for %v ≥ %v + a tick: ct %d, want a miss (more than a tick late)", d, idle, r.Verdict.Ct)
		}
		// Exactly as the ticks say: valid while whole ticks apart < limit.
		n := uint64((t0+d)/tick - t0/tick)
		want := uint8(fallback.CTMiss)
		if n < fallback.IdleTicks(idle, tick) {
			want = fallback.CTHit
		}
		if r.Verdict.Ct != want {
			t.Fatalf("flow idle for %v (%d ticks): ct %d, want %d", d, n, r.Verdict.Ct, want)
		}
		if want == fallback.CTHit {
			hits++
		} else {
			misses++
		}
	}
	if hits < 100 || misses < 100 {
		t.Fatalf("%d hits and %d misses: the boundary was not exercised", hits, misses)
	}
}

// TestRDRAIN_DeadlineTickInBPF: a backend's deadline on a 4 ms test tick
// ends its entries at the first tick at or after it: a hit just before
// the deadline, a miss from the tick that starts at or after it.
func TestRDRAIN_DeadlineTickInBPF(t *testing.T) {
	needBPF(t)
	const tick = 4 * time.Millisecond
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, TestTick: tick})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer dp.Close()
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1")}); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("203.0.113.10")
	rnd := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < 200; i++ {
		deadline := 2*time.Hour + time.Duration(i)*time.Minute + time.Duration(rnd.Int64N(int64(time.Second)))
		ir := oneService(vip, 60, deadline)
		// From nothing: every row is written, the backend with its deadline.
		if _, err := dp.Apply(compiler.DiffIR(nil, ir).Changes, nil); err != nil {
			t.Fatal(err)
		}
		port := uint16(20000 + i)
		pkt := func(flags uint8) []byte {
			f, err := xdp.BuildPacket(targets.Packet{Src: netip.MustParseAddr("198.51.100.8"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: port, DstPort: 80, Flags: flags})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		if r, err := dp.Run(pkt(targets.FlagSYN), deadline-30*time.Second); err != nil || r.Verdict.Ct != fallback.CTNew {
			t.Fatalf("SYN: %+v %v", r.Verdict, err)
		}
		if r, _ := dp.Run(pkt(targets.FlagACK), deadline-time.Nanosecond); r.Verdict.Ct != fallback.CTHit {
			t.Fatalf("1 ns before the deadline %v: ct %d, want a hit (expired early)", deadline, r.Verdict.Ct)
		}
		expiry := (deadline + tick - 1) / tick * tick // the first tick at or after it
		if r, _ := dp.Run(pkt(targets.FlagACK), expiry-time.Nanosecond); expiry > deadline && r.Verdict.Ct != fallback.CTHit {
			t.Fatalf("deadline %v, just before its tick %v: ct %d, want a hit", deadline, expiry, r.Verdict.Ct)
		}
		if r, _ := dp.Run(pkt(targets.FlagACK), expiry); r.Verdict.Ct != fallback.CTMiss {
			t.Fatalf("deadline %v, at its tick %v: ct %d, want a miss", deadline, expiry, r.Verdict.Ct)
		}
	}
}

// oneService is a TCP service on vip:80 with idle timeout idleSec and one
// backend (ID 5) whose deadline is deadline (0: none).
func oneService(vip netip.Addr, idleSec uint32, deadline time.Duration) *compiler.IR {
	ir := &compiler.IR{VIPs: []compiler.VIPRow{{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoTCP, Port: 80, Kind: compiler.MatchPort}, ServiceID: 1}}}
	s := compiler.ServiceRow{ID: 1, Name: "web", RingSize: 7, IdleTimeoutSec: idleSec, SynNew: true}
	for c := range s.Classes {
		s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
	}
	ir.Services = []compiler.ServiceRow{s}
	ring := []uint32{5, 5, 5, 5, 5, 5, 5}
	ir.Rings = []compiler.RingRows{{ServiceID: 1, Halves: [2][]uint32{ring, nil}}}
	ir.Backends = []compiler.BackendRow{{ID: 5, ServiceID: 1, Name: "b", IP: netip.MustParseAddr("10.0.0.5"), Healthy: true, Deadline: deadline}}
	return ir
}
