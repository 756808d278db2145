package sim

import (
	"context"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/targets"
)

// The reference datapath is the oracle, not the fast path: these report
// packets/s for the two conntrack paths, with no target to meet.
//
//	go test ./targets/sim -run XXX -bench . -benchtime 200000x

func reportPPS(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkts/s")
}

// BenchmarkProcessHit: an established flow's ACKs (lookup, validity
// checks, refresh).
func BenchmarkProcessHit(b *testing.B) {
	d := loadExample(b, nil)
	ctx := context.Background()
	p := tcp("198.51.100.7", 4242, targets.FlagSYN)
	if _, err := d.Process(ctx, p, 0); err != nil {
		b.Fatal(err)
	}
	p.Flags = targets.FlagACK
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v, _ := d.Process(ctx, p, time.Duration(i)); v.CT != targets.CTHit {
			b.Fatal(v)
		}
	}
	reportPPS(b)
}

// BenchmarkProcessMiss: every packet a flow without an entry (lookup,
// miss, ring selection, insert); the table grows to b.N entries.
func BenchmarkProcessMiss(b *testing.B) {
	d := loadExample(b, nil)
	ctx := context.Background()
	p := tcp("198.51.100.7", 0, targets.FlagACK)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.SrcPort = uint16(i)
		p.Src = p.Src.Next()
		if v, _ := d.Process(ctx, p, 0); v.CT != targets.CTMiss {
			b.Fatal(v)
		}
	}
	reportPPS(b)
}
