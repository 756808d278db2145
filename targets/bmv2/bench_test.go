package bmv2

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// benchConfig is one service with a 65,537-slot ring over 10 backends.
func benchConfig(b *testing.B) *compiler.Config {
	var eps strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&eps, "          - {name: vm-%d, ip: 10.0.0.%d}\n", i, i)
	}
	return load(b, `
tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [443]
    ringSize: 65537
    backends:
      - name: ig
        endpoints:
`+eps.String())
}

func report(b *testing.B, entities int, elapsed time.Duration) {
	b.ReportMetric(float64(entities)*float64(b.N)/elapsed.Seconds(), "entities/s")
	b.ReportMetric(float64(elapsed.Milliseconds())/float64(b.N), "ms/push")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPushFullRing: an empty switch gets a service with a full
// 65,537-slot ring (one half at rest: 65,537 ring entries) through Apply, and
// the same entries written raw (prebuilt, batches of 1,000) as the ideal
// of this server and connection; vs-raw is the ratio.
func BenchmarkPushFullRing(b *testing.B) {
	cfg := benchConfig(b)
	ir := compile(b, cfg, nil, nil, 0)
	d := compiler.DiffIR(nil, ir)
	var applied, raw time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bench := newBench(b, true, p4rt.Options{})
		ctx := context.Background()
		tg, err := Open(ctx, Options{Options: runtime.Options{Addr: bench.srv.Addr(), DeviceID: 1, ElectionLow: 1}, P4InfoPath: bench.path})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := tg.Apply(ctx, d); err != nil {
			b.Fatal(err)
		}
		applied += time.Since(start)
		b.StopTimer()
		// The raw ideal: the same updates, built beforehand, on a fresh switch.
		batches := tg.plan(d)
		for i := range batches {
			if err := tg.translate(&batches[i], nil, nil); err != nil {
				b.Fatal(err)
			}
		}
		tg.Close()
		bench2 := newBench(b, true, p4rt.Options{})
		c, err := runtime.Dial(ctx, runtime.Options{Addr: bench2.srv.Addr(), DeviceID: 1, ElectionLow: 1})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.WaitPrimary(ctx); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		for _, bt := range batches {
			if err := c.Write(ctx, bt.updates); err != nil {
				b.Fatal(err)
			}
		}
		raw += time.Since(start)
		c.Close()
		b.StartTimer()
	}
	report(b, len(d.Changes), applied)
	b.ReportMetric(applied.Seconds()/raw.Seconds(), "vs-raw")
}

// BenchmarkFailoverDiff: one of 10 backends fails on a switch that holds
// a 65,537-slot ring: the diff is the slots that move (≈ 1/10 of the ring)
// written on the inactive half, one backend flag and one service flip.
// Each iteration starts from a freshly pushed switch (untimed).
func BenchmarkFailoverDiff(b *testing.B) {
	cfg := benchConfig(b)
	held := compile(b, cfg, nil, nil, 0)
	down := compiler.State{}
	down.SetHealthy("vm-3", false)
	next := compile(b, cfg, down, held, 0)
	d := compiler.DiffIR(held, next)
	var elapsed time.Duration
	writes := 0
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bench := newBench(b, true, p4rt.Options{})
		tg, err := Open(ctx, Options{Options: runtime.Options{Addr: bench.srv.Addr(), DeviceID: 1, ElectionLow: 1}, P4InfoPath: bench.path})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tg.Apply(ctx, compiler.DiffIR(nil, held)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		s, err := tg.Apply(ctx, d)
		if err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		writes += s.Writes
		b.StopTimer()
		tg.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/push")
	b.ReportMetric(float64(writes)/elapsed.Seconds(), "entities/s")
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/push")
	b.ReportMetric(0, "ns/op")
}
