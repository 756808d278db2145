package bmv2

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"

	"github.com/lbc-dev/lbc/runtime"
)

// BenchmarkLiveBMv2PacketIO (issue 33, item 3) prices a conntrack read
// through the program itself, the one way left on BMv2, whose P4Runtime
// server answers register reads and writes with UNIMPLEMENTED and which is
// built without Thrift (docs/fleet.md). An op that reads one bucket would
// take the clock probe's path: a packet-out on the stream, the pipeline,
// a packet-in back. Against a live simple_switch_grpc holding benchConfig,
// ms/rt is one probe at a time (a bucket's latency), pkts/s is 32 probes
// in flight (the client's subscription holds 64), s/full-read is the
// committed build's conntrack buckets at that rate, and x-counter is the
// packet path's cost per bucket over a wildcard counter read's cost per
// cell, the same switch in the same run (how fast P4Runtime reads cells
// where it can).
//
//	go test -run - -bench LiveBMv2PacketIO -benchtime 3x ./targets/bmv2/
func BenchmarkLiveBMv2PacketIO(b *testing.B) {
	ctx := context.Background()
	tg, ir := benchTarget(b)
	cells := counterCells(b, tg, ir)
	buckets, err := ConntrackBuckets()
	if err != nil {
		b.Fatal(err)
	}
	const seq, piped, window = 50, 2000, 32
	var rtTotal, pipeTotal, counterTotal time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for range seq {
			if _, err := tg.probeOnce(ctx); err != nil {
				b.Fatal(err)
			}
		}
		rtTotal += time.Since(start)

		d, l, err := probeWindow(ctx, tg, uint32(i), piped, window)
		if err != nil {
			b.Fatal(err)
		}
		if l > 0 {
			// The window never overflows the subscription, so a probe
			// without an answer is lost on the switch's path.
			b.Fatalf("%d of %d probes unanswered: the wait for the next answer timed out after 5 s", l, piped)
		}
		pipeTotal += d

		w := tg.CounterRead(ir).(*counterRead)
		w.whole = true
		d, _ = readCounters(b, w)
		counterTotal += d
	}
	rate := float64(piped*b.N) / pipeTotal.Seconds()
	cellRate := float64(cells*b.N) / counterTotal.Seconds()
	b.ReportMetric(float64(rtTotal.Microseconds())/1e3/float64(seq*b.N), "ms/rt")
	b.ReportMetric(rate, "pkts/s")
	b.ReportMetric(float64(buckets)/rate, "s/full-read")
	b.ReportMetric(cellRate/rate, "x-counter")
	b.ReportMetric(0, "ns/op")
}

// probeWindow sends n clock probes with up to window of them unanswered
// and returns how long all the answers took and how many never came (a
// wait of 5 s for the next one ends the run).
func probeWindow(ctx context.Context, t *Target, run uint32, n, window int) (time.Duration, int, error) {
	md, err := func() ([]*p4v1.PacketMetadata, error) {
		out, err := t.tr.Schema().PacketMetadata("packet_out")
		if err != nil {
			return nil, err
		}
		return out.Encode(runtime.U("op", opClockProbe))
	}()
	if err != nil {
		return 0, 0, err
	}
	pins, stop := t.c.SubscribePackets()
	defer stop()
	const magic = 0x6c6263 // "lbc": tells this run's answers from others
	start := time.Now()
	sent, got := 0, 0
	for got < n {
		for sent < n && sent-got < window {
			payload := make([]byte, 60)
			binary.BigEndian.PutUint32(payload, magic<<8|run&0xff)
			binary.BigEndian.PutUint32(payload[4:], uint32(sent))
			if err := t.c.SendPacket(ctx, &p4v1.PacketOut{Payload: payload, Metadata: md}); err != nil {
				return 0, 0, err
			}
			sent++
		}
		select {
		case p := <-pins:
			if pl := p.GetPayload(); len(pl) >= 8 && binary.BigEndian.Uint32(pl) == magic<<8|run&0xff {
				got++
			}
		case <-time.After(5 * time.Second):
			return time.Since(start), n - got, nil
		}
	}
	return time.Since(start), 0, nil
}
