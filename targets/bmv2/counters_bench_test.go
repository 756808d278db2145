package bmv2

import (
	"context"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// BenchmarkLiveBMv2CounterRead (issue 31, item 2): one read of lb.p4's
// counters as lbc run's counter reader makes it, one wildcard
// CounterEntry read per array (CounterRead's steps), against a live
// simple_switch_grpc holding benchConfig (a 65,537-slot ring). cells/s
// is the read's rate; ms/read a whole read; max-ms/step the longest step,
// the longest a push waits behind the reader.
//
//	go test -run - -bench LiveBMv2CounterRead -benchtime 10x ./targets/bmv2/
func BenchmarkLiveBMv2CounterRead(b *testing.B) {
	ctx := context.Background()
	tg, ir := benchTarget(b)
	cells := counterCells(b, tg, ir)
	var total, longest time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := tg.CounterRead(ir)
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
		total += time.Since(start)
		if got := r.Counters(); len(got.Services) != 1 {
			b.Fatalf("counters of %d services, want web's", len(got.Services))
		}
	}
	b.ReportMetric(float64(cells)*float64(b.N)/total.Seconds(), "cells/s")
	b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/read")
	b.ReportMetric(float64(longest.Microseconds())/1e3, "max-ms/step")
	b.ReportMetric(float64(cells), "cells")
	b.ReportMetric(0, "ns/op")
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

// counterCells is how many cells one read of ir's counters reads.
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
