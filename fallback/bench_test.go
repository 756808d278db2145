package fallback_test

import (
	"encoding/binary"
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
// timing the loop), beside two floors measured in the same run:
//
//   - XDP_PASS: a program that does nothing;
//   - the minimal reference program (lbc_min in bpf/lbbench.c): parse, one
//     inlined array lookup, IPv4-in-IPv4 encapsulation, XDP_TX. It is the
//     physical floor of this design: what any XDP load balancer that
//     encapsulates must do.
//
// With Repeat > 1 the kernel runs an XDP_TX program on its own output, so
// every program is run through a wrapper in the lbbench object that
// restores the input after each run (the same wrapper for all three, so
// its cost is in every number). The new-connection case uses a wrapper
// that also writes a new source address into the input before each run:
// every run is a SYN of a new flow, a conntrack insert. Reported per case,
// trimmed means (middle half) over b.N calls, interleaved, one pinned core:
//
//	ns/pkt       the load balancer
//	min-ns/pkt   the minimal reference program (IPv4 cases)
//	pass-ns/pkt  XDP_PASS
//	x-min        ns/pkt ÷ min-ns/pkt
//	x-pass       ns/pkt ÷ pass-ns/pkt
//
// Absolute numbers are one sample of a shared machine; the ratios are
// what carries from run to run.
//
// Run: go test ./fallback -run '^$' -bench XDP -benchtime 200x
func BenchmarkXDP(b *testing.B) {
	dp, err := fallback.Load(fallback.LoadOptions{Bench: true})
	if err != nil {
		b.Fatalf("load (needs root): %v", err)
	}
	defer dp.Close()
	if _, err := dp.Apply(compiler.DiffIR(nil, benchIR()).Changes, nil); err != nil {
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
		prog *ebpf.Program
		in   []byte
		want uint32
		v4   bool
	}{
		// A warm flow: conntrack hit, refresh, encapsulation.
		{"ct-hit", dp.Bench, frame(ack), 3, true},
		// A SYN of a new flow every run: ring lookup, conntrack insert.
		{"new-conn", dp.BenchNewFlow, frame(syn), 3, true},
		// The same SYN every run: ring lookup, conntrack update of an
		// existing key (R-CT-1 skips the lookup).
		{"syn-same", dp.Bench, frame(syn), 3, true},
		{"fragment", dp.Bench, frame(targets.Packet{Src: client4, Dst: vip4, Proto: compiler.IPProtoUDP, Frag: targets.FragMiddle, FragID: 9, PayloadLen: 64}), 3, true},
		{"ipv6-hit", dp.Bench, frame(ack6), 3, false},
		{"not-ours", dp.Bench, frame(other), 2, true},
	}
	const repeat = 1000
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var one unix.CPUSet
			one.Set(0)
			unix.SchedSetaffinity(0, &one) // one pinned core, as the peers were measured
			if ret, _, err := c.prog.Benchmark(c.in, 1, nil); err != nil || ret != c.want {
				b.Fatalf("XDP action %d (%v), want %d", ret, err, c.want)
			}
			progs := []*ebpf.Program{c.prog, dp.BenchPass}
			if c.v4 {
				progs = append(progs, dp.BenchMin)
			}
			times := make([][]time.Duration, len(progs))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k, p := range progs {
					_, d, err := p.Benchmark(c.in, repeat, nil)
					if err != nil {
						b.Fatal(err)
					}
					times[k] = append(times[k], d)
				}
			}
			lb, pass := trimmed(times[0]), trimmed(times[1])
			b.ReportMetric(lb, "ns/pkt")
			b.ReportMetric(pass, "pass-ns/pkt")
			b.ReportMetric(lb/pass, "x-pass")
			if c.v4 {
				m := trimmed(times[2])
				b.ReportMetric(m, "min-ns/pkt")
				b.ReportMetric(lb/m, "x-min")
			}
		})
	}
}

// trimmed is the mean of the middle half of d, in ns: the kernel reports
// whole nanoseconds per run, and a median would round to them.
func trimmed(d []time.Duration) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) >= 4 {
		s = s[len(s)/4 : len(s)*3/4]
	}
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return sum / float64(len(s))
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
		var ips []netip.Addr
		for k := uint32(0); k < 10; k++ {
			ip := netip.AddrFrom4([4]byte{10, 0, byte(id), byte(k + 1)})
			if v6 {
				ip = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, byte(id), 14: 0, 15: byte(k + 1)})
			}
			ips = append(ips, ip)
		}
		benchService(ir, id, compiler.VIPKey{VIP: vip, Proto: compiler.IPProto(proto), Port: port, Kind: kind}, 65537, backendBase, ips)
	}
	add(1, netip.MustParseAddr("203.0.113.10"), compiler.IPProtoTCP, compiler.MatchPort, 80, 100, false)
	add(2, netip.MustParseAddr("2001:db8:100::10"), compiler.IPProtoTCP, compiler.MatchPort, 80, 200, true)
	add(3, netip.MustParseAddr("203.0.113.10"), compiler.IPProtoUDP, compiler.MatchAllPorts, 0, 300, false)
	return ir
}

// benchService adds service id, reached at key, to ir: every class
// tracked per connection, one healthy backend per address of ips (IDs
// base, base+1, …), and a ring of ringSize slots taking them in turn.
func benchService(ir *compiler.IR, id uint32, key compiler.VIPKey, ringSize uint32, base uint32, ips []netip.Addr) {
	ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: key, ServiceID: id})
	s := compiler.ServiceRow{ID: id, Name: fmt.Sprint("s", id), RingSize: ringSize, IdleTimeoutSec: 60, SynNew: true}
	for c := range s.Classes {
		s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
	}
	ir.Services = append(ir.Services, s)
	ring := make([]uint32, ringSize)
	for i := range ring {
		ring[i] = base + uint32(i%len(ips))
	}
	ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: id, Halves: [2][]uint32{ring, nil}})
	for k, ip := range ips {
		ir.Backends = append(ir.Backends, compiler.BackendRow{ID: base + uint32(k), ServiceID: id, Name: fmt.Sprint("b", base+uint32(k)), IP: ip, Healthy: true})
	}
}

// BenchmarkSessionsFullTable times Datapath.Sessions (the walk `lbc run`
// does at each scrape to count live conntrack entries) over a 262,144-entry
// conntrack4 holding 196,608 IPv4 flows (three quarters: an LRU map evicts
// a little before it is full).
//
// Run: go test ./fallback -run '^$' -bench SessionsFullTable -benchtime 10x
func BenchmarkSessionsFullTable(b *testing.B) {
	dp, err := fallback.Load(fallback.LoadOptions{Test: true})
	if err != nil {
		b.Fatalf("load (needs root): %v", err)
	}
	defer dp.Close()
	if _, err := dp.Apply(compiler.DiffIR(nil, benchIR()).Changes, nil); err != nil {
		b.Fatal(err)
	}
	// IPv4 flows: conntrack4's 20-byte keys.
	n := int(dp.Conntrack4.MaxEntries()) * 3 / 4
	keys := make([][20]byte, n)
	vals := make([][24]byte, n)
	for i := range keys {
		binary.LittleEndian.PutUint32(keys[i][0:], 1) // service 1
		keys[i][4], keys[i][5] = 5, compiler.IPProtoTCP
		binary.LittleEndian.PutUint32(keys[i][16:], uint32(i)) // dst: distinct keys
		binary.LittleEndian.PutUint32(vals[i][0:], 100)        // backend 100 ...
		binary.LittleEndian.PutUint32(vals[i][16:], 100)       // ... in slot 100
	}
	if _, err := dp.Conntrack4.BatchUpdate(keys, vals, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := dp.Sessions()
		if err != nil {
			b.Fatal(err)
		}
		if s[1] != uint64(n) {
			b.Fatalf("counted %d sessions, want %d", s[1], n)
		}
	}
}

// BenchmarkReadStats times Datapath.ReadStats, what `lbc run --target xdp`
// reads every --counter-interval, with 4,096 services of 8 backends each
// (1,024-slot rings), as it reads them (the per-CPU counter arrays whole,
// in batches, at this many rows) beside a lookup per row, alternating in
// the same run: ms/read and µs/row are ReadStats's, x-rows the lookups per
// row's time over it.
//
// Run: go test ./fallback -run '^$' -bench ReadStats -benchtime 10x
func BenchmarkReadStats(b *testing.B) {
	dp, err := fallback.Load(fallback.LoadOptions{Test: true, RingEntries: 1 << 23})
	if err != nil {
		b.Fatalf("load (needs root): %v", err)
	}
	defer dp.Close()
	const services, per = 4096, 8
	ir := &compiler.IR{}
	for id := uint32(1); id <= services; id++ {
		base := id * per
		var ips []netip.Addr
		for k := uint32(0); k < per; k++ {
			ips = append(ips, netip.AddrFrom4([4]byte{10, 2, byte(base >> 8), byte(base + k)}))
		}
		benchService(ir, id, compiler.VIPKey{VIP: netip.AddrFrom4([4]byte{10, 1, byte(id >> 8), byte(id)}), Proto: compiler.IPProtoTCP, Port: 80, Kind: compiler.MatchPort}, 1024, base, ips)
	}
	if _, err := dp.Apply(compiler.DiffIR(nil, ir).Changes, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var took, rows time.Duration
	read := func() time.Duration {
		start := time.Now()
		s, err := dp.ReadStats()
		if err != nil {
			b.Fatal(err)
		}
		if len(s.Services) != services || len(s.Backends) != services*per {
			b.Fatalf("read %d services and %d backends, want %d and %d", len(s.Services), len(s.Backends), services, services*per)
		}
		return time.Since(start)
	}
	for i := 0; i < b.N; i++ {
		took += read()
		restore := fallback.ReadCountersBy("rows")
		rows += read()
		restore()
	}
	b.ReportMetric(float64(took.Microseconds())/1e3/float64(b.N), "ms/read")
	b.ReportMetric(float64(took.Nanoseconds())/1e3/float64(b.N*services*(per+1)), "µs/row")
	b.ReportMetric(rows.Seconds()/took.Seconds(), "x-rows")
	b.ReportMetric(0, "ns/op")
}
