package health_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/controller/internal/fakeclock"
)

// syncBuffer is a log sink safe for the monitor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// R-HC-1: a bad weight header on a weighted service fails the probe, the
// backend is named in the log, and it keeps no guessed weight.
func TestRHC1_BadWeightLoggedWithBackendName(t *testing.T) {
	f := backendtest.Start(t, "127.0.0.31", "127.0.0.32")
	var logs syncBuffer
	m := health.New(health.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	sp := httpSpec(f.Port, true)
	sp.Unhealthy = 1
	f.Get("127.0.0.31").SetWeight("300")
	f.Get("127.0.0.32").SetWeight("300")
	m.SetTargets(context.Background(), []health.Target{
		{Service: "api", Backend: "api-1", IP: netip.MustParseAddr("127.0.0.31"), Spec: sp},
		{Service: "api", Backend: "api-2", IP: netip.MustParseAddr("127.0.0.32"), Spec: sp},
	})
	if st := m.State(); !st.IsHealthy("api-1") || mustWeight(t, st, "api-1") != 300 {
		t.Fatalf("initial state %v", st)
	}
	for _, bad := range []string{"1001", "-1", "abc", ""} {
		f.Get("127.0.0.31").SetWeight(bad)
		m.ProbeAll(context.Background())
		st := m.State()
		if st.IsHealthy("api-1") {
			t.Errorf("header %q: api-1 still healthy", bad)
		}
		if !st.IsHealthy("api-2") {
			t.Errorf("header %q: api-2 went unhealthy", bad)
		}
		if w := mustWeight(t, st, "api-1"); w != 300 {
			t.Errorf("header %q: api-1 weight %d, want the last good 300", bad, w)
		}
		f.Get("127.0.0.31").SetWeight("300")
		m.ProbeAll(context.Background())
		m.ProbeAll(context.Background()) // healthy threshold 2
		if !m.State().IsHealthy("api-1") {
			t.Fatalf("api-1 did not recover after %q", bad)
		}
	}
	out := logs.String()
	for _, want := range []string{`\"1001\" out of range`, `\"-1\" is not a weight`, `\"abc\" is not a weight`, "no X-Load-Balancing-Endpoint-Weight header"} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, want) && strings.Contains(line, "backend=api-1") && strings.Contains(line, "health probe failed") {
				found = true
			}
		}
		if !found {
			t.Errorf("no log line naming backend=api-1 with %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "backend=api-2 ") && strings.Contains(line, "probe failed") {
			t.Errorf("api-2 logged as failing: %s", line)
		}
	}
}

// A weighted endpoint that never answered a good probe gets weight 0 and
// is unhealthy: never a guessed weight (R-HC-1).
func TestRHC1_NeverGoodIsWeightZero(t *testing.T) {
	f := backendtest.Start(t, "127.0.0.33")
	f.Get("127.0.0.33").SetWeight("")
	m := health.New(health.Options{})
	m.SetTargets(context.Background(), []health.Target{{Service: "api", Backend: "api-1", IP: netip.MustParseAddr("127.0.0.33"), Spec: httpSpec(f.Port, true)}})
	st := m.State()
	if st.IsHealthy("api-1") || mustWeight(t, st, "api-1") != 0 {
		t.Fatalf("state %v; want unhealthy, weight 0", st)
	}
}

func mustWeight(t *testing.T, st interface{ WeightOf(string) (int, bool) }, name string) int {
	t.Helper()
	w, ok := st.WeightOf(name)
	if !ok {
		t.Fatalf("%s has no weight", name)
	}
	return w
}

// gate is a Prober whose probes block until released, counting how many
// run at once.
type gate struct {
	running, peak atomic.Int32
	release       chan struct{}
	fail          sync.Map // IP string → bool
	calls         atomic.Int32
}

func (g *gate) Probe(ctx context.Context, ip netip.Addr, sp health.Spec) health.Result {
	g.calls.Add(1)
	n := g.running.Add(1)
	for {
		p := g.peak.Load()
		if n <= p || g.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if g.release != nil {
		<-g.release
	}
	g.running.Add(-1)
	if v, ok := g.fail.Load(ip.String()); ok && v.(bool) {
		return health.Result{Err: errors.New("down")}
	}
	return health.Result{OK: true}
}

func targets(n int, sp health.Spec) []health.Target {
	var ts []health.Target
	for i := 0; i < n; i++ {
		ts = append(ts, health.Target{Service: "svc", Backend: fmt.Sprintf("b%d", i), IP: netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}), Spec: sp})
	}
	return ts
}

func TestMonitorBoundsProbesInFlight(t *testing.T) {
	g := &gate{release: make(chan struct{})}
	m := health.New(health.Options{Prober: g, MaxInFlight: 3})
	done := make(chan struct{})
	go func() {
		m.SetTargets(context.Background(), targets(20, health.Spec{Type: health.TypeTCP, Interval: time.Second, Healthy: 1, Unhealthy: 1}))
		close(done)
	}()
	// Wait until the bound is reached, give a fourth probe the time to
	// start if the bound were broken, then let them all finish.
	deadline := time.Now().Add(10 * time.Second)
	for g.running.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d probes started; want 3 in flight", g.running.Load())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if r := g.running.Load(); r != 3 {
		t.Fatalf("%d probes in flight, want the bound of 3", r)
	}
	for i := 0; i < 20; i++ {
		g.release <- struct{}{}
	}
	<-done
	if p := g.peak.Load(); p != 3 {
		t.Fatalf("peak probes in flight %d, want 3", p)
	}
}

// Probes run on the clock: the first wait is spread over (0, interval] and
// later ones are interval ± jitter, so a thousand backends never probe in
// lockstep.
func TestMonitorScheduleJitter(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	g := &gate{}
	seq := []float64{0.9, 0.5, 0.1} // first waits 0.1 s, 0.5 s, 0.9 s of a 1 s interval
	var mu sync.Mutex
	i := 0
	rnd := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		v := seq[i%len(seq)]
		i++
		return v
	}
	m := health.New(health.Options{Prober: g, Clock: clk, Rand: rnd, Jitter: 0.2})
	m.SetTargets(context.Background(), targets(1, health.Spec{Type: health.TypeTCP, Interval: time.Second, Healthy: 1, Unhealthy: 1}))
	if g.calls.Load() != 1 {
		t.Fatalf("initial probe: %d calls", g.calls.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	step := func(d time.Duration, wantCalls int32) {
		t.Helper()
		if !clk.WaitPending(1, 5*time.Second) {
			t.Fatal("no probe timer armed")
		}
		clk.Advance(d)
		deadline := time.Now().Add(5 * time.Second)
		for g.calls.Load() != wantCalls && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := g.calls.Load(); got != wantCalls {
			t.Fatalf("after +%v: %d probes, want %d", d, got, wantCalls)
		}
	}
	// rnd: 0.9 → first wait 0.1 s.
	step(99*time.Millisecond, 1)
	step(time.Millisecond, 2)
	// rnd: 0.5 → wait 1 s × (1 + 0.2×0) = 1 s.
	step(999*time.Millisecond, 2)
	step(time.Millisecond, 3)
	// rnd: 0.1 → wait 1 s × (1 + 0.2×(-0.8)) = 840 ms.
	step(839*time.Millisecond, 3)
	step(time.Millisecond, 4)
}

// Thresholds: a backend flapping on every probe signals no change while
// the flaps stay under the threshold.
func TestMonitorFlappingSignalsOnlyAtThreshold(t *testing.T) {
	g := &gate{}
	m := health.New(health.Options{Prober: g})
	ts := targets(1, health.Spec{Type: health.TypeTCP, Interval: time.Second, Healthy: 2, Unhealthy: 2})
	m.SetTargets(context.Background(), ts)
	ip := ts[0].IP.String()
	signals := 0
	drain := func() {
		select {
		case <-m.Changes():
			signals++
		default:
		}
	}
	for i := 0; i < 10; i++ {
		g.fail.Store(ip, i%2 == 0)
		m.ProbeAll(context.Background())
		drain()
	}
	if signals != 0 {
		t.Fatalf("flapping under the threshold signalled %d changes", signals)
	}
	g.fail.Store(ip, true)
	m.ProbeAll(context.Background())
	m.ProbeAll(context.Background())
	drain()
	if signals != 1 || m.State().IsHealthy("b0") {
		t.Fatalf("two failures in a row: %d signals, healthy %v", signals, m.State().IsHealthy("b0"))
	}
}

// The first failed probe of a healthy backend logs failures_in_a_row=1
// with the threshold it counts towards (it logged streak=0 before, the
// tracker's count after the state change).
func TestMonitorFailedProbeLogCounts(t *testing.T) {
	for _, unhealthy := range []int{1, 3} {
		var logs syncBuffer
		g := &gate{}
		m := health.New(health.Options{Prober: g, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ts := targets(1, health.Spec{Type: health.TypeTCP, Interval: time.Second, Healthy: 1, Unhealthy: unhealthy})
		m.SetTargets(context.Background(), ts)
		g.fail.Store(ts[0].IP.String(), true)
		m.ProbeAll(context.Background())
		want := fmt.Sprintf("failures_in_a_row=1 unhealthy_threshold=%d healthy=%v", unhealthy, unhealthy > 1)
		var line string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "health probe failed") {
				line = l
			}
		}
		if !strings.Contains(line, want) || strings.Contains(line, "streak") {
			t.Errorf("unhealthyThreshold %d: %q, want %q", unhealthy, line, want)
		}
	}
}
