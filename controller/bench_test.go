package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/targets"
)

// switchProber fails the probes of the IPs in down; it records when the
// last failing probe of watch finished.
type switchProber struct {
	mu       sync.Mutex
	down     map[netip.Addr]bool
	watch    netip.Addr
	lastFail time.Time
}

func (p *switchProber) Probe(ctx context.Context, ip netip.Addr, sp health.Spec) health.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down[ip] {
		if ip == p.watch {
			p.lastFail = time.Now()
		}
		return health.Result{Err: errors.New("down")}
	}
	return health.Result{OK: true}
}

// timedSim records when each Apply returned.
type timedSim struct {
	*lockedSim
	applied chan time.Time
}

func (s *timedSim) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	st, err := s.lockedSim.Apply(ctx, d)
	select {
	case s.applied <- time.Now():
	default:
	}
	return st, err
}

func benchConfig(services, ring int) string {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n")
	for i := 0; i < services; i++ {
		fmt.Fprintf(&b, `  - name: svc%d
    vip: 203.0.%d.%d
    protocol: TCP
    ports: [80]
    ringSize: %d
    healthCheck: {type: TCP, port: 80, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: g
        endpoints:
`, i, 100+i/250, 1+i%250, ring)
		for j := 0; j < 4; j++ {
			fmt.Fprintf(&b, "          - {name: s%d-b%d, ip: 127.%d.%d.%d}\n", i, j, 1+i/250, i%250, 1+j)
		}
	}
	return b.String()
}

// BenchmarkFailoverLatency measures the time from a backend's last failed
// probe to the datapath (sim) holding the new ring, for 10, 100 and 1000
// services of 4 backends, and reports it next to a bare Reconcile of the
// same configuration (the ideal: the loop cannot beat a recompile).
//
//	go test -run - -bench FailoverLatency -benchtime 20x ./controller/
func BenchmarkFailoverLatency(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, ring := range []int{1021, 65537} {
			if n == 1000 && ring == 65537 && os.Getenv("LBC_BENCH_BIG") == "" {
				continue // ≈1 GB of rings; set LBC_BENCH_BIG=1 to run it
			}
			b.Run(fmt.Sprintf("services=%d/ring=%d", n, ring), func(b *testing.B) { benchFailover(b, n, ring) })
		}
	}
}

func benchFailover(b *testing.B, n, ring int) {
	cfgText := benchConfig(n, ring)
	path := filepath.Join(b.TempDir(), "lb.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		b.Fatal(err)
	}
	watch := netip.MustParseAddr("127.1.0.1") // svc0's first backend
	p := &switchProber{down: map[netip.Addr]bool{}, watch: watch}
	s := &timedSim{lockedSim: newLockedSim("sim"), applied: make(chan time.Time, 1)}
	c, err := controller.New(controller.Options{
		ConfigPath: path, Targets: []targets.Target{s}, Prober: p,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Debounce: -1, WatchInterval: -1, VerifyInterval: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-c.Ready()
	<-s.applied // the first push
	defer func() { cancel(); <-done }()

	// The ideal: one Reconcile of the same configuration and state.
	dec, err := compiler.Load(path, []byte(cfgText))
	if err != nil {
		b.Fatal(err)
	}
	prev := s.IR()
	st := compiler.State{}
	st.SetHealthy("s0-b0", false)
	start := time.Now()
	const reps = 3
	for i := 0; i < reps; i++ {
		if _, err := controller.Reconcile(dec.Config, st, prev, 0); err != nil {
			b.Fatal(err)
		}
	}
	ideal := time.Since(start) / reps

	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.mu.Lock()
		p.down[watch] = i%2 == 0 // fail, then recover
		p.mu.Unlock()
		c.Monitor().ProbeAll(ctx)
		at := <-s.applied
		p.mu.Lock()
		t0 := p.lastFail
		p.mu.Unlock()
		if i%2 == 0 {
			total += at.Sub(t0)
		}
	}
	b.StopTimer()
	fails := (b.N + 1) / 2
	lat := total / time.Duration(fails)
	b.ReportMetric(float64(lat.Microseconds())/1e3, "ms/failure")
	b.ReportMetric(float64(ideal.Microseconds())/1e3, "ms/reconcile")
	b.ReportMetric(float64(lat)/float64(ideal), "x-reconcile")
}
