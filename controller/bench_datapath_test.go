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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// Issue 6's benchmark on real datapaths: the time from a backend's last
// failed probe to the datapath holding the new tables, on the XDP program
// attached to a veth in a namespace of its own and on a live BMv2 switch
// (P4Runtime over a unix socket in its namespace), beside the sim and
// beside a bare Reconcile (compile + diff) of the same configuration
// measured in the same run.
//
//	go test -run - -bench 'FailoverLatency(Datapaths)' -benchtime 10x ./controller/

// benchRing is the ring size of the services: rings of 65537 slots for
// 100 services are more than lb.p4's ring table and the XDP ring map hold
// (1 << 20 entries).
const benchRing = 1021

// BenchmarkFailoverLatencyDatapaths runs the failover benchmark on sim,
// XDP (root) and BMv2 (simple_switch_grpc on PATH, root), for 10, 100 and
// 1000 services of 4 backends. A datapath that cannot run here is skipped
// with the reason.
func BenchmarkFailoverLatencyDatapaths(b *testing.B) {
	ctx := context.Background()
	type row struct{ services, ring int }
	std := []row{{10, benchRing}, {100, benchRing}, {1000, benchRing}}
	kinds := []struct {
		name string
		rows []row
		open func(b *testing.B, services, ring int) (targets.Target, func())
	}{
		{"sim", append(std, row{1000, bmv2BigRing}), openSimBench},
		{"xdp", append(std, row{1000, bmv2BigRing}), openXDPBench},
		// lb.p4's ring table holds 1 << 20 entries, both halves of every
		// ring: 1000 services of 1021 slots do not fit, 1000 of 509 do.
		{"bmv2", []row{{10, benchRing}, {100, benchRing}, {1000, bmv2BigRing}}, bmv2Opener(ctx, b)},
	}
	for _, k := range kinds {
		for _, r := range k.rows {
			name := fmt.Sprintf("target=%s/services=%d/ring=%d", k.name, r.services, r.ring)
			var fx *failoverFixture // reused by every run of the sub-benchmark
			b.Run(name, func(b *testing.B) {
				if fx == nil {
					fx = newFailoverFixture(b, r.services, r.ring, k.open)
				}
				fx.run(b)
			})
			if fx != nil {
				fx.close()
			}
		}
	}
}

// bmv2BigRing is the ring size of the 1000-service row on BMv2 (and its
// peers on sim and XDP).
const bmv2BigRing = 509

// failoverFixture is a controller over one datapath, with probes the
// benchmark fails and recovers. Go runs a sub-benchmark more than once
// (b.N = 1 first); the fixture serves every run.
type failoverFixture struct {
	n       int
	tgt     *stampedTarget
	prober  *edgeProber
	round   int
	c       *controller.Controller
	cancel  context.CancelFunc
	done    chan error
	closeTg func()
	ideal   time.Duration // one bare Reconcile of the failure
	closed  bool
}

func newFailoverFixture(b *testing.B, n, ring int, open func(*testing.B, int, int) (targets.Target, func())) *failoverFixture {
	b.Helper()
	inner, closeTg := open(b, n, ring) // skips when the datapath cannot run here
	cfgText := benchConfig(n, ring)
	path := filepath.Join(b.TempDir(), "lb.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		closeTg()
		b.Fatal(err)
	}
	fx := &failoverFixture{n: n, tgt: newStampedTarget(inner), closeTg: closeTg,
		prober: &edgeProber{down: map[netip.Addr]bool{}}}
	var logw io.Writer = io.Discard
	if os.Getenv("LBC_BENCH_LOG") != "" {
		logw = os.Stderr
	}
	c, err := controller.New(controller.Options{
		ConfigPath: path, Targets: []targets.Target{fx.tgt}, Prober: fx.prober,
		Logger:   slog.New(slog.NewTextHandler(logw, nil)),
		Debounce: -1, WatchInterval: -1, VerifyInterval: -1,
	})
	if err != nil {
		closeTg()
		b.Fatal(err)
	}
	fx.c = c
	ctx, cancel := context.WithCancel(context.Background())
	fx.cancel, fx.done = cancel, make(chan error, 1)
	start := time.Now()
	go func() { fx.done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-fx.done:
		closeTg()
		b.Fatalf("controller: %v", err)
	case <-time.After(10 * time.Minute):
		fx.close()
		b.Fatal("first push not done in 10 minutes")
	}
	if fx.tgt.pushes.Load() == 0 {
		fx.close()
		b.Fatal("the first push wrote nothing")
	}
	fx.tgt.settle(b)
	b.Logf("%s: first push of %d services (ring %d) took %s", inner.Name(), n, ring, time.Since(start).Round(time.Millisecond))

	// The ideal, measured now: a bare Reconcile of the same failure from
	// the same tables (compile + diff; no probes, loop or datapath).
	dec, err := compiler.Load(path, []byte(cfgText))
	if err != nil {
		fx.close()
		b.Fatal(err)
	}
	base, err := controller.Reconcile(dec.Config, compiler.State{}, nil, 0)
	if err != nil {
		fx.close()
		b.Fatal(err)
	}
	st := compiler.State{}
	st.SetHealthy("s0-b0", false)
	// At least 5 runs and 200 ms, for a stable mean.
	var reps int
	t0 := time.Now()
	for reps < 5 || time.Since(t0) < 200*time.Millisecond {
		r, err := controller.Reconcile(dec.Config, st, base.IR, 0)
		if err != nil {
			fx.close()
			b.Fatal(err)
		}
		if len(r.Diff.Changes) == 0 {
			fx.close()
			b.Fatal("the failure changes nothing")
		}
		reps++
	}
	fx.ideal = time.Since(t0) / time.Duration(reps)
	return fx
}

// run fails one of svc0's backends and recovers it, b.N times, a
// different backend each time: every failure makes a ring the datapath
// does not hold (the inactive half is rewritten, then flipped), and every
// recovery brings back the ring the other half holds (one flip).
// Each is measured from the probe that decided it to the datapath's Apply
// returning.
func (fx *failoverFixture) run(b *testing.B) {
	ctx := context.Background()
	var fail, recov, apply time.Duration
	var writes int
	step := func(ip netip.Addr, down bool) (lat, took time.Duration, changes int) {
		fx.tgt.drain()
		fx.prober.set(ip, down)
		fx.c.Monitor().ProbeAll(ctx)
		var ev applied
		select {
		case ev = <-fx.tgt.applied:
		case <-time.After(5 * time.Minute):
			b.Fatalf("no push within 5 minutes of the probe (%s down=%v)", ip, down)
		}
		if ev.err != nil {
			b.Fatalf("push: %v", ev.err)
		}
		fx.tgt.settle(b) // the loop's commit: the next probe finds it idle
		return ev.at.Sub(fx.prober.decidedAt()), ev.took, ev.changes
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ip := svc0Backend(fx.round % 4)
		fx.round++
		lat, took, ch := step(ip, true)
		fail += lat
		apply += took
		writes += ch
		lat, _, _ = step(ip, false)
		recov += lat
	}
	b.StopTimer()
	per := fail / time.Duration(b.N)
	b.ReportMetric(ms(per), "ms/failure")
	b.ReportMetric(ms(apply/time.Duration(b.N)), "ms/apply")
	b.ReportMetric(ms(recov/time.Duration(b.N)), "ms/recovery")
	b.ReportMetric(ms(fx.ideal), "ms/reconcile")
	b.ReportMetric(float64(per)/float64(fx.ideal), "x-reconcile")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/failure")
}

// svc0Backend is the address of svc0's backend j in benchConfig.
func svc0Backend(j int) netip.Addr { return netip.AddrFrom4([4]byte{127, 1, 0, byte(1 + j)}) }

// edgeProber answers probes from a table of down addresses, and records
// when the first probe of the address last changed ran: with thresholds
// of 1, the probe that decides the change (the monitor's own schedule may
// probe it again later, so the last probe is not the one).
type edgeProber struct {
	mu      sync.Mutex
	down    map[netip.Addr]bool
	watch   netip.Addr
	armed   bool
	decided time.Time
}

func (p *edgeProber) set(ip netip.Addr, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down[ip] = down
	p.watch, p.armed = ip, true
}

func (p *edgeProber) decidedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.decided
}

func (p *edgeProber) Probe(ctx context.Context, ip netip.Addr, sp health.Spec) health.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ip == p.watch && p.armed {
		p.armed, p.decided = false, time.Now()
	}
	if p.down[ip] {
		return health.Result{Err: errors.New("down")}
	}
	return health.Result{OK: true}
}

func (fx *failoverFixture) close() {
	if fx.closed {
		return
	}
	fx.closed = true
	fx.cancel()
	<-fx.done
	fx.closeTg()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// stampedTarget records when each Apply returned and how long it took,
// and when the controller's commit after it is done.
type stampedTarget struct {
	targets.Target
	applied   chan applied
	committed chan struct{}
	pushes    atomic.Int64
}

type applied struct {
	at      time.Time
	took    time.Duration
	changes int
	err     error
}

func newStampedTarget(t targets.Target) *stampedTarget {
	return &stampedTarget{Target: t, applied: make(chan applied, 16), committed: make(chan struct{}, 16)}
}

// drain forgets the pushes and commits seen so far.
func (s *stampedTarget) drain() {
	for {
		select {
		case <-s.applied:
		case <-s.committed:
		default:
			return
		}
	}
}

func (s *stampedTarget) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	st, err := s.Target.Apply(ctx, d)
	now := time.Now()
	s.pushes.Add(1)
	select {
	case s.applied <- applied{at: now, took: now.Sub(start), changes: len(d.Changes), err: err}:
	default:
	}
	return st, err
}

// Commit forwards to datapaths that store names (XDP, BMv2) and says
// when the loop is done with a change.
func (s *stampedTarget) Commit(ir *compiler.IR) error {
	var err error
	if c, ok := s.Target.(controller.Committer); ok {
		err = c.Commit(ir)
	}
	select {
	case s.committed <- struct{}{}:
	default:
	}
	return err
}

// settle waits for the commit that follows a push (every failure and
// recovery changes svc0's eligible set, so there is one), so that the
// next probe does not wait on the loop.
func (s *stampedTarget) settle(b *testing.B) {
	select {
	case <-s.committed:
	case <-time.After(time.Minute):
		b.Fatal("no commit within a minute of the push")
	}
}

func openSimBench(b *testing.B, _, _ int) (targets.Target, func()) {
	return newLockedSim("sim"), func() {}
}

var benchSeq atomic.Int64

// openXDPBench attaches the production XDP program to a veth in a new
// namespace, its maps pinned in a fresh bpffs directory, all removed at
// the end.
func openXDPBench(b *testing.B, services, ring int) (targets.Target, func()) {
	b.Helper()
	if err := netns.Available(); err != nil {
		b.Skipf("XDP failover benchmark skipped: %v (it attaches the program to a veth in a namespace of its own); the sim rows run without it", err)
	}
	if _, err := os.Stat(xdp.BPFFS); err != nil {
		b.Skipf("XDP failover benchmark skipped: no bpffs at %s: %v", xdp.BPFFS, err)
	}
	seq := benchSeq.Add(1)
	set := netns.NewSet(fmt.Sprintf("lbcfo%d", os.Getpid()))
	ns, err := set.Add(fmt.Sprint(seq))
	if err != nil {
		set.Close()
		b.Skipf("XDP failover benchmark skipped: cannot create a namespace: %v", err)
	}
	for _, args := range [][]string{
		{"link", "add", "lbf0", "type", "veth", "peer", "name", "lbf1"},
		{"link", "set", "lbf0", "up"}, {"link", "set", "lbf1", "up"},
	} {
		if _, err := set.IP(ns, args...); err != nil {
			set.Close()
			b.Fatal(err)
		}
	}
	// Both ring halves of every service fit: a ring change writes the
	// inactive half.
	ringEntries := uint32(1 << 20)
	for uint64(ringEntries) < 2*uint64(services)*uint64(ring) {
		ringEntries <<= 1
	}
	opts := xdp.Options{Iface: "lbf0", PinDir: filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-bench-%d-%d", os.Getpid(), seq)),
		StateDir: b.TempDir(), ConntrackEntries: 1024, RingEntries: ringEntries,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var tgt *xdp.Target
	if err := netns.Do(ns, func() error {
		var err error
		tgt, err = xdp.Attach(context.Background(), opts)
		return err
	}); err != nil {
		os.RemoveAll(opts.PinDir)
		set.Close()
		b.Skipf("XDP failover benchmark skipped: cannot attach the program: %v", err)
	}
	b.Logf("xdp: attached to %s in namespace %s (mode %s), ring map %d entries", opts.Iface, ns, tgt.Mode(), ringEntries)
	return tgt, func() {
		tgt.Close()
		if err := netns.Do(ns, func() error { return xdp.Detach(opts, false) }); err != nil {
			b.Errorf("xdp detach: %v", err)
		}
		os.RemoveAll(opts.PinDir)
		if err := set.Close(); err != nil {
			b.Error(err)
		}
	}
}

// bmv2Opener starts one simple_switch_grpc for every BMv2 row (it starts
// slowly) and resets its tables for each; it is stopped when the
// benchmark ends.
func bmv2Opener(ctx context.Context, parent *testing.B) func(*testing.B, int, int) (targets.Target, func()) {
	var sw *bmv2live.Switch
	var startErr error
	started := false
	return func(b *testing.B, _, _ int) (targets.Target, func()) {
		b.Helper()
		if err := bmv2live.Available(""); err != nil {
			b.Skipf("BMv2 failover benchmark skipped: %v; the sim rows run without it", err)
		}
		if !started {
			started = true
			sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			t0 := time.Now()
			sw, startErr = bmv2live.Start(sctx, bmv2live.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			cancel()
			if startErr == nil {
				b.Logf("simple_switch_grpc up in namespace %s after %s", sw.Namespace(), time.Since(t0).Round(time.Millisecond))
				parent.Cleanup(func() {
					if err := sw.Close(); err != nil {
						parent.Error(err)
					}
				})
			}
		}
		if startErr != nil {
			b.Fatalf("start BMv2: %v", startErr)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err := sw.Reset(rctx); err != nil { // empty tables for each row
			b.Fatal(err)
		}
		// The P4Runtime target itself, as `lbc run --target bmv2` uses it.
		return sw.Target(), func() {}
	}
}
