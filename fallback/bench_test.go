package fallback_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// BenchmarkXDP times the production program per packet with
// BPF_PROG_TEST_RUN (Program.Benchmark, Repeat 1000 per call, the kernel
// timing the loop). With Repeat > 1 the kernel runs an XDP_TX program on
// its own output, so the program is run through lbc_bench, a wrapper in
// the lbbench object that restores the input after each run (same code as
// production otherwise, real clock). Reported per case, medians over b.N
// calls, all measured interleaved in the same run on one pinned core:
//
//	ns/pkt       the load balancer through the wrapper
//	wrap-ns/pkt  the wrapper around nothing (its own cost, plus the floor)
//	pass-ns/pkt  a trivial XDP_PASS program (the floor)
//	x-pass       ns/pkt ÷ pass-ns/pkt
//
// Run: go test ./fallback -run '^$' -bench XDP -benchtime 200x
func BenchmarkXDP(b *testing.B) {
	dp, err := fallback.Load(fallback.LoadOptions{Bench: true})
	if err != nil {
		b.Fatalf("load (needs root): %v", err)
	}
	defer dp.Close()
	if _, err := dp.Apply(compiler.DiffIR(nil, benchIR()).Changes); err != nil {
		b.Fatal(err)
	}
	if err := dp.SetConfig(fallback.Config{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")}); err != nil {
		b.Fatal(err)
	}
	client4, client6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:c::7")
	vip4, vip6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:100::10")
	frame := func(p targets.Packet) []byte {
		f, err := xdp.BuildPacket(p)
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	ack := targets.Packet{Src: client4, Dst: vip4, Proto: compiler.IPProtoTCP, SrcPort: 40000, DstPort: 80, Flags: targets.FlagACK, PayloadLen: 64}
	syn := ack
	syn.Flags = targets.FlagSYN
	ack6 := ack
	ack6.Src, ack6.Dst = client6, vip6
	other := ack
	other.Dst = netip.MustParseAddr("203.0.113.99")
	cases := []struct {
		name string
		in   []byte
		want uint32
	}{
		{"ct-hit", frame(ack), 3},
		// A SYN skips the lookup (R-CT-1), picks from the ring and writes
		// the entry: a new connection.
		{"new-conn", frame(syn), 3},
		{"fragment", frame(targets.Packet{Src: client4, Dst: vip4, Proto: compiler.IPProtoUDP, Frag: targets.FragMiddle, FragID: 9, PayloadLen: 64}), 3},
		{"ipv6-hit", frame(ack6), 3},
		{"not-ours", frame(other), 2},
	}
	const repeat = 1000
	pass := frame(ack)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var one unix.CPUSet
			one.Set(0)
			unix.SchedSetaffinity(0, &one) // one pinned core, as the peers were measured
			if ret, _, err := dp.Bench.Benchmark(c.in, 1, nil); err != nil || ret != c.want {
				b.Fatalf("XDP action %d (%v), want %d", ret, err, c.want)
			}
			var lb, wrap, floor []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, m := range []struct {
					p   *ebpf.Program
					in  []byte
					out *[]time.Duration
				}{{dp.Bench, c.in, &lb}, {dp.BenchPass, c.in, &wrap}, {dp.Pass, pass, &floor}} {
					_, d, err := m.p.Benchmark(m.in, repeat, nil)
					if err != nil {
						b.Fatal(err)
					}
					*m.out = append(*m.out, d)
				}
			}
			m, w, f := median(lb), median(wrap), median(floor)
			b.ReportMetric(float64(m.Nanoseconds()), "ns/pkt")
			b.ReportMetric(float64(w.Nanoseconds()), "wrap-ns/pkt")
			b.ReportMetric(float64(f.Nanoseconds()), "pass-ns/pkt")
			if f > 0 {
				b.ReportMetric(float64(m)/float64(f), "x-pass")
			}
		})
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// benchIR is one TCP service (v4 and v6 VIPs) with a default-size ring and
// a UDP all-ports service for fragments, 10 backends each.
func benchIR() *compiler.IR {
	ir := &compiler.IR{}
	add := func(id uint32, vip netip.Addr, proto uint8, kind compiler.MatchKind, port uint16, backendBase uint32, v6 bool) {
		ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: vip, Proto: proto, Port: port, Kind: kind}, ServiceID: id})
		s := compiler.ServiceRow{ID: id, Name: fmt.Sprint("s", id), RingSize: 65537, IdleTimeoutSec: 60, SynNew: true}
		for c := range s.Classes {
			s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
		}
		ir.Services = append(ir.Services, s)
		ring := make([]uint32, 65537)
		for i := range ring {
			ring[i] = backendBase + uint32(i%10)
		}
		ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: id, Halves: [2][]uint32{ring, nil}})
		for k := uint32(0); k < 10; k++ {
			ip := netip.AddrFrom4([4]byte{10, 0, byte(id), byte(k + 1)})
			if v6 {
				ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, byte(id), 14: 0, 15: byte(k + 1)})
			}
			ir.Backends = append(ir.Backends, compiler.BackendRow{ID: backendBase + k, ServiceID: id, Name: fmt.Sprint("b", backendBase+k), IP: ip, Healthy: true})
		}
	}
	add(1, netip.MustParseAddr("203.0.113.10"), compiler.IPProtoTCP, compiler.MatchPort, 80, 100, false)
	add(2, netip.MustParseAddr("2001:db8:100::10"), compiler.IPProtoTCP, compiler.MatchPort, 80, 200, true)
	add(3, netip.MustParseAddr("203.0.113.10"), compiler.IPProtoUDP, compiler.MatchAllPorts, 0, 300, false)
	return ir
}
