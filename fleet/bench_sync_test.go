package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
	"github.com/lbc-dev/lbc/targets"
)

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSync measures R-FLEET's sharing at 1k, 10k and 100k
// exceptions on three nodes over loopback (mutual TLS, sim datapaths):
// from the push that takes r3 out of the ring (n1's trigger) to n1's
// snapshot installed on n2 and n3 (both acked; the larger of the two sync
// lags). n1's flows are opened as the product opens them, by their
// packets through n1's datapath (a SYN, then an ACK): its own entries,
// which it publishes once they are exceptions. (Entries written with
// WriteConntrack would be copies of a peer's, which a node never
// publishes.)
// Reported per sync:
//   - ms/sync: that time;
//   - cpu-ms/10k: the process's CPU per 10k exceptions (all three nodes
//     share this process, so it is the fleet's CPU for one sync);
//   - x-codec: the sync's time over the cost of the wire alone, measured
//     in the same run: encoding the snapshot into batches, marshalling,
//     unmarshalling and decoding them once (a sync does this twice, once
//     a peer, on two cores);
//   - x-local: the sync's time over n1's local work (reading its
//     conntrack and computing its exceptions), the part every design
//     pays before anything is sent.
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{1000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("exceptions=%d", n), func(b *testing.B) { benchSync(b, n) })
	}
}

// r3Flows returns the SYNs of count TCP connections that the rings of
// v1 and v3 (r3 in) give to r3: none is an exception while r3 is in the
// ring, every one is while it is out.
func r3Flows(b *testing.B, count int, v1, v3 *compiler.IR) []targets.Packet {
	b.Helper()
	x := v1.Index()
	svc := x.ServiceByName("web")
	r3 := x.BackendOf(svc.ID, "r3")
	ps := make([]targets.Packet, 0, count)
	for i := 0; len(ps) < count; i++ {
		if i >= 1<<24 {
			b.Fatalf("only %d flows of r3 among 2^24 sources", len(ps))
		}
		p := targets.Packet{Src: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6,
			SrcPort: uint16(1024 + i%60000), DstPort: 80, Flags: targets.FlagSYN}
		one := []targets.ConntrackEntry{{ServiceID: svc.ID, Kind: compiler.Tuple5, Tuple: p.Tuple(), BackendID: r3.ID, Epoch: svc.Epoch}}
		if len(exception.Compute(v1, one)) == 0 && len(exception.Compute(v3, one)) == 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

// openFlows makes n1's entries as the product does, from the flows'
// packets through its datapath: a SYN each (a new connection, on r3) and,
// with ack, the ACK that follows (a hit that refreshes the entry, as the
// clients' traffic keeps it from aging out). The entries are n1's own,
// not copies, so n1 publishes them once they are exceptions.
func openFlows(b *testing.B, dp *lockedSim, ps []targets.Packet, r3 uint32, ack bool) {
	b.Helper()
	for _, p := range ps {
		want := targets.CTNew
		if ack {
			p.Flags, want = targets.FlagACK, targets.CTHit
		}
		if v := dp.process(b, p); v.Action != targets.Forward || v.BackendID != r3 || v.CT != want {
			b.Fatalf("flow %v:%d on n1: %v, want forwarded to r3 (backend %d), conntrack %s", p.Src, p.SrcPort, v, r3, want)
		}
	}
}

// codecCost is the wire's share of a sync of exc: encoded into batches,
// marshalled, unmarshalled and decoded, once.
func codecCost(b *testing.B, exc []exception.Exception) time.Duration {
	b.Helper()
	t0 := time.Now()
	for rest := exc; len(rest) > 0; {
		k := min(len(rest), MaxBatch)
		bt := &fleetpb.Batch{Snapshot: 1, Last: k == len(rest), Exceptions: make([]*fleetpb.Exception, k)}
		for i := range k {
			bt.Exceptions[i] = encodeException(rest[i])
		}
		data, err := proto.Marshal(bt)
		if err != nil {
			b.Fatal(err)
		}
		if d, err := unmarshalBatch(data); err != nil || len(d.Exceptions) != k {
			b.Fatalf("decoded %d of %d: %v", len(d.Exceptions), k, err)
		}
		rest = rest[k:]
	}
	return time.Since(t0)
}

// countCopies returns how many of es are copies of a peer's entries.
func countCopies(es []targets.ConntrackEntry) int {
	n := 0
	for _, e := range es {
		if e.Copy {
			n++
		}
	}
	return n
}

func benchSync(b *testing.B, count int) {
	f := newTestFleet(b, 3, func(i int, c *Config) { c.refresh = time.Hour; c.MaxSnapshotsPerSecond = 1000 })
	v1 := compileLB(b, testLB, nil)
	v2 := compileLB(b, testLB, v1, "r3")
	v3 := compileLB(b, testLB, v2)
	f.push(b, &compiler.IR{}, v1)
	flows := r3Flows(b, count, v1, v3)
	r3 := v1.Index().BackendOf(v1.Index().ServiceByName("web").ID, "r3").ID
	openFlows(b, f.dps[0], flows, r3, false)
	openFlows(b, f.dps[0], flows, r3, true)
	opened := time.Now()
	live, err := f.dps[0].ReadConntrack(context.Background())
	if own := len(live) - countCopies(live); own != count || err != nil {
		b.Fatalf("n1 holds %d entries, %d of them its own, want %d own: %v", len(live), own, count, err)
	}
	// synced waits until n1 published want exceptions and both peers
	// acked that snapshot holding them installed; it returns the larger
	// sync lag.
	synced := func(want int) time.Duration {
		b.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			st := f.nodes[0].FleetStatus()
			done, lag := st.Published == want, time.Duration(0)
			for _, j := range []int{1, 2} {
				p := peerStatus(st, fmt.Sprintf("n%d", j+1))
				in := peerStatus(f.nodes[j].FleetStatus(), "n1")
				done = done && p.Acked == st.Snapshot && in.Installed == want && in.Received == want
				lag = max(lag, p.SyncLag)
			}
			if done {
				return lag
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d exceptions not synced within 2 min: n1 %+v; n2 %+v; n3 %+v", want, st, f.nodes[1].FleetStatus(), f.nodes[2].FleetStatus())
			}
			time.Sleep(time.Millisecond)
		}
	}
	synced(0)
	prev := v1
	var syncT, cpuT, localT, codecT time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		l0 := time.Now()
		live, _ := f.dps[0].ReadConntrack(context.Background())
		exc := exception.Compute(v2, live)
		if len(exc) != count {
			b.Fatalf("%d exceptions of %d entries, want %d", len(exc), len(live), count)
		}
		localT += time.Since(l0)
		codecT += codecCost(b, exc)
		b.StartTimer()
		c0 := cpuTime()
		f.push(b, prev, v2)
		syncT += synced(count)
		cpuT += cpuTime() - c0
		b.StopTimer()
		f.push(b, v2, v3) // r3 back: nothing to share, all withdrawn
		synced(0)
		prev = v3
		// The clients' traffic keeps the flows from aging out (idle
		// timeout 60 s) however many iterations run.
		if time.Since(opened) > 15*time.Second {
			openFlows(b, f.dps[0], flows, r3, true)
			opened = time.Now()
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(syncT)/1e6/n, "ms/sync")
	b.ReportMetric(float64(cpuT)/1e6/n/(float64(count)/10_000), "cpu-ms/10k")
	b.ReportMetric(float64(syncT)/float64(codecT), "x-codec")
	b.ReportMetric(float64(syncT)/float64(localT), "x-local")
}
