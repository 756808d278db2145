package live

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/trace"
)

// BenchmarkLiveConntrackLoss measures the conntrack geometry's collision
// loss on BMv2, as sim.LossAt models it: lb.p4 built with CT_BUCKETS=1024
// (4,096 slots, so that 90 % occupancy is a few thousand flows); n
// distinct TCP flows of one service open (a SYN each, one per
// millisecond); then every backend goes down under
// dropTrafficIfUnhealthy, so that a lookup that misses is dropped instead
// of storing a new entry (R-ELIG-3) while a hit still forwards
// (R-PERSIST-LR); then each flow sends an ACK. The fraction of ACKs
// dropped is the fraction of live flows lost to collisions. The switch
// must give exactly the sim's outcomes (it fails otherwise).
func BenchmarkLiveConntrackLoss(b *testing.B) {
	if err := Available(""); err != nil {
		b.Skipf("live BMv2 skipped: %v", err)
	}
	p4c, err := exec.LookPath("p4c")
	if err != nil {
		b.Skipf("p4c not on PATH (%v): it builds lb.p4 with a small CT_BUCKETS", err)
	}
	dir := b.TempDir()
	out, err := exec.Command(p4c, "--target", "bmv2", "--arch", "v1model", "-DCT_BUCKETS=1024", "-o", dir,
		"--p4runtime-files", filepath.Join(dir, "lb.p4info.txtpb"), "../../../p4/lb.p4").CombinedOutput()
	if err != nil {
		b.Fatalf("p4c: %v\n%s", err, out)
	}
	info, err := os.ReadFile(filepath.Join(dir, "lb.p4info.txtpb"))
	if err != nil {
		b.Fatal(err)
	}
	devcfg, err := os.ReadFile(filepath.Join(dir, "lb.json"))
	if err != nil {
		b.Fatal(err)
	}
	buckets, ways, err := Geometry(devcfg)
	if err != nil || buckets != 1024 {
		b.Fatalf("geometry of the small build: %d × %d, %v", buckets, ways, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sw, err := Start(ctx, Options{P4Info: info, DeviceConfig: devcfg, Clock: ClockFree})
	if err != nil {
		b.Fatal(err)
	}
	defer sw.Close()
	cfg := mustLoad(b, "loss.yaml", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: loss
    vip: 203.0.113.70
    protocol: TCP
    ports: [443]
    connectionTrackingPolicy: {idleTimeoutSec: 3600}
    failoverPolicy: {failoverRatio: 0.5, dropTrafficIfUnhealthy: true}
    ringSize: 251
    backends:
      - name: g-loss
        endpoints: [{name: l1, ip: 10.70.0.1}]
      - name: g-loss-f
        failover: true
        endpoints: [{name: l2, ip: 10.70.1.1}]
`)
	for _, occ := range []float64{0.25, 0.5, 0.9} {
		b.Run(fmt.Sprintf("occupancy-%.0f%%", occ*100), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := sw.Reset(ctx); err != nil {
					b.Fatal(err)
				}
				sw.SetClock(ClockFree)
				n := int(occ * float64(buckets*ways))
				rng := rand.New(rand.NewPCG(uint64(i+1), 7))
				var lines []trace.Line
				pk := make([]targets.Packet, n)
				for k := range pk {
					v := rng.Uint32()
					pk[k] = targets.Packet{Src: netip.AddrFrom4([4]byte{10 | byte(v>>24)&0x7f, byte(v >> 16), byte(v >> 8), byte(v)}),
						Dst: netip.MustParseAddr("203.0.113.70"), Proto: compiler.IPProtoTCP, SrcPort: uint16(1024 + rng.IntN(64511)), DstPort: 443}
					p := pk[k]
					p.Flags = targets.FlagSYN
					lines = append(lines, trace.Line{No: len(lines) + 1, T: 0.001 * float64(len(lines)+1), Packet: &p})
				}
				for _, be := range []string{"l1", "l2"} {
					lines = append(lines, trace.Line{No: len(lines) + 1, T: 0.001 * float64(len(lines)+1),
						Event: &trace.Event{Kind: trace.EventHealth, Backend: be, Healthy: false}})
				}
				first := len(lines) + 1
				for k := range pk {
					p := pk[k]
					p.Flags = targets.FlagACK
					lines = append(lines, trace.Line{No: len(lines) + 1, T: 0.001 * float64(len(lines)+1), Packet: &p})
				}
				start := time.Now()
				got, mismatch := replayPair(b, sw, cfg, compiler.State{}, lines)
				if mismatch != "" {
					b.Fatal(mismatch)
				}
				lost := 0
				for l := first; l < first+n; l++ {
					switch {
					case got[l].Verdict.Action == targets.Drop:
						lost++
					case got[l].CT != targets.CTHit:
						b.Fatalf("line %d: %s, want a hit or a drop", l, got[l].Verdict)
					}
				}
				b.ReportMetric(100*float64(lost)/float64(n), "%lost")
				b.ReportMetric(float64(2*n)/time.Since(start).Seconds(), "packets/s")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}
