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

// BenchmarkSync measures R-FLEET's sharing at 10k and 100k exceptions on
// three nodes over loopback (mutual TLS, sim datapaths): from the push
// that takes r3 out of the ring (n1's trigger) to n1's snapshot
// installed on n2 and n3 (both acked; the larger of the two sync lags).
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

// r3Flows returns count conntrack entries of flows that the rings of v1
// and v3 (r3 in) give to r3: none is an exception while r3 is in the
// ring, every one is while it is out.
func r3Flows(b *testing.B, count int, v1, v3 *compiler.IR) []targets.ConntrackEntry {
	b.Helper()
	x := v1.Index()
	svc := x.ServiceByName("web")
	r3 := x.BackendOf(svc.ID, "r3")
	es := make([]targets.ConntrackEntry, 0, count)
	for i := 0; len(es) < count; i++ {
		if i >= 1<<24 {
			b.Fatalf("only %d flows of r3 among 2^24 sources", len(es))
		}
		e := targets.ConntrackEntry{ServiceID: svc.ID, Kind: compiler.Tuple5, BackendID: r3.ID, Epoch: svc.Epoch, Idle: time.Second,
			Tuple: compiler.Tuple{Src: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6, SrcPort: uint16(1024 + i%60000), DstPort: 80}}
		one := []targets.ConntrackEntry{e}
		if len(exception.Compute(v1, one)) == 0 && len(exception.Compute(v3, one)) == 0 {
			es = append(es, e)
		}
	}
	return es
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

func benchSync(b *testing.B, count int) {
	f := newTestFleet(b, 3, func(i int, c *Config) { c.refresh = time.Hour; c.MaxSnapshotsPerSecond = 1000 })
	v1 := compileLB(b, testLB, nil)
	v2 := compileLB(b, testLB, v1, "r3")
	v3 := compileLB(b, testLB, v2)
	f.push(b, &compiler.IR{}, v1)
	if k, err := f.dps[0].WriteConntrack(context.Background(), r3Flows(b, count, v1, v3)); k != count {
		b.Fatalf("n1 holds %d of %d entries: %v", k, count, err)
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
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(syncT)/1e6/n, "ms/sync")
	b.ReportMetric(float64(cpuT)/1e6/n/(float64(count)/10_000), "cpu-ms/10k")
	b.ReportMetric(float64(syncT)/float64(codecT), "x-codec")
	b.ReportMetric(float64(syncT)/float64(localT), "x-local")
}
