package bmv2

import (
	"context"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// BenchmarkLiveBMv2CounterRead (issue 31, item 2): one read of lb.p4's
// counters as lbc run's counter reader makes it (CounterRead's steps: one
// request per array, for the cells of the IR's services and backends),
// beside a read of every cell of every array (a wildcard CounterEntry read
// per array, what the reader did before), alternating in the same run,
// against a live simple_switch_grpc holding benchConfig (a 65,537-slot
// ring). ms/read is the reader's whole read; max-ms/step its longest step,
// the longest a push waits behind it; x-whole the whole read's time over
// the reader's; cells/s the whole read's rate.
//
//	go test -run - -bench LiveBMv2CounterRead -benchtime 10x ./targets/bmv2/
func BenchmarkLiveBMv2CounterRead(b *testing.B) {
	tg, ir := benchTarget(b)
	cells := counterCells(b, tg, ir)
	var total, longest, whole time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, l := readCounters(b, tg.CounterRead(ir).(*counterRead))
		total += d
		longest = max(longest, l)
		w := tg.CounterRead(ir).(*counterRead)
		w.whole = true
		d, _ = readCounters(b, w)
		whole += d
	}
	b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/read")
	b.ReportMetric(float64(longest.Microseconds())/1e3, "max-ms/step")
	b.ReportMetric(whole.Seconds()/total.Seconds(), "x-whole")
	b.ReportMetric(float64(cells)*float64(b.N)/whole.Seconds(), "cells/s")
	b.ReportMetric(0, "ns/op")
}

// readCounters takes r's steps to the end and checks it read web's
// counters; it returns the time taken and the longest step.
func readCounters(b *testing.B, r *counterRead) (took, longest time.Duration) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for {
		s := time.Now()
		done, err := r.Step(ctx)
		if err != nil {
			b.Fatal(err)
		}
		longest = max(longest, time.Since(s))
		if done {
			break
		}
	}
	took = time.Since(start)
	if got := r.Counters(); len(got.Services) != 1 {
		b.Fatalf("counters of %d services, want web's", len(got.Services))
	}
	return took, longest
}

// benchTarget is a live simple_switch_grpc (closed when b ends) opened as
// a Target and holding benchConfig, and the IR it holds.
func benchTarget(b *testing.B) (*Target, *compiler.IR) {
	b.Helper()
	_, opts := liveSwitch(b)
	tg, err := Open(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tg.Close() })
	ir := compile(b, benchConfig(b), nil, nil, 0)
	if _, err := tg.Apply(context.Background(), compiler.DiffIR(nil, ir)); err != nil {
		b.Fatal(err)
	}
	return tg, ir
}

// counterCells is how many cells one read of every cell of the arrays
// CounterRead takes holds.
func counterCells(b *testing.B, tg *Target, ir *compiler.IR) int {
	b.Helper()
	cells := 0
	for _, name := range tg.CounterRead(ir).(*counterRead).names {
		c, err := tg.tr.Schema().Counter(name)
		if err != nil {
			b.Fatal(err)
		}
		cells += int(c.Size)
	}
	return cells
}
