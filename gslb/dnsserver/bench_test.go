package dnsserver

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/gslb"
	"github.com/miekg/dns"
)

const staticConfig = `
zones: [{name: example.com}]
sites: [{name: only}]
names:
  - name: www.example.com
    sites: [{site: only, addresses: [203.0.113.10]}]
policy: {mode: dns}
`

func startStatic(b *testing.B) string {
	cfg, err := gslb.Load("static.yaml", []byte(staticConfig))
	if err != nil {
		b.Fatal(err)
	}
	eng, err := gslb.New(cfg, gslb.Options{})
	if err != nil {
		b.Fatal(err)
	}
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = New(eng, nil).Serve(ctx, pc, ln); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return pc.LocalAddr().String()
}

// load sends n A queries over UDP from workers concurrent clients (each
// waits for its answer) and returns queries/s. ECS alternates between two
// continents so the chain's geography runs. It is bounded by n.
func load(b *testing.B, addr string, n, workers int) float64 {
	ecs := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/24")}
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
			conn, err := c.Dial(addr)
			if err != nil {
				failed.Add(1)
				return
			}
			defer conn.Close()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				m := new(dns.Msg)
				m.SetQuestion("www.example.com.", dns.TypeA)
				m.SetEdns0(1232, false)
				p := ecs[i%2]
				m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: p.Addr().AsSlice()}}
				r, _, err := c.ExchangeWithConn(m, conn)
				if err != nil || len(r.Answer) != 1 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d queries failed", f, n)
	}
	return float64(n) / el
}

const benchWorkers = 8

// BenchmarkQueriesStatic: the same server answering a static record
// (mode dns, one site): the ideal the chain is compared with.
func BenchmarkQueriesStatic(b *testing.B) {
	addr := startStatic(b)
	b.ResetTimer()
	b.ReportMetric(load(b, addr, b.N, benchWorkers), "queries/s")
}

// BenchmarkQueriesFullChain: every step (G-1..G-7) with live metrics from
// three site servers, RTTs from the sites (cached per resolver prefix after
// the first query) and a geolocation lookup per query.
func BenchmarkQueriesFullChain(b *testing.B) {
	h := start(b, opts{})
	load(b, h.addr, 10, 1) // fill the RTT cache
	b.ResetTimer()
	b.ReportMetric(load(b, h.addr, b.N, benchWorkers), "queries/s")
}

// BenchmarkChainVsStatic runs both in the same run, interleaved in five
// rounds so that a noisy neighbour hits both alike, and reports the full
// chain's throughput as a fraction of the static server's.
func BenchmarkChainVsStatic(b *testing.B) {
	h := start(b, opts{})
	static := startStatic(b)
	load(b, h.addr, 10, 1)
	n := max(b.N/5, 1000)
	b.ResetTimer()
	var ts, tc float64 // seconds
	for round := 0; round < 5; round++ {
		ts += float64(n) / load(b, static, n, benchWorkers)
		tc += float64(n) / load(b, h.addr, n, benchWorkers)
	}
	b.ReportMetric(5*float64(n)/ts, "static-queries/s")
	b.ReportMetric(5*float64(n)/tc, "chain-queries/s")
	b.ReportMetric(ts/tc, "chain/static")
}
