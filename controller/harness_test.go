package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/controller/internal/fakeclock"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
)

// seedIPs are the seed-001 backends on loopback (127.0.0.0/8 is all
// loopback on Linux).
var seedIPs = map[string]string{
	"vm-a1": "127.0.0.101", "vm-a2": "127.0.0.102",
	"vm-d1": "127.0.0.111", "vm-d2": "127.0.0.112",
	"vm-b1": "127.0.0.121", "vm-b2": "127.0.0.122",
	"vm-c1": "127.0.0.131", "vm-c2": "127.0.0.132",
}

// seedConfig is examples/failover.yaml (R-ELIG-5) with the backends on
// loopback and the health check on port.
func seedConfig(port int, disableDrain bool, drainSec, healthy, unhealthy int) string {
	return fmt.Sprintf(`tunnel:
  sourceIPv4: 192.0.2.1
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    failoverPolicy:
      failoverRatio: 0.5
      disableConnectionDrainOnFailover: %v
    connectionDraining:
      drainingTimeoutSec: %d
    ringSize: 1021
    healthCheck:
      type: HTTP
      port: %d
      requestPath: /healthz
      checkIntervalSec: 5
      timeoutSec: 2
      healthyThreshold: %d
      unhealthyThreshold: %d
    backends:
      - name: ig-a
        endpoints:
          - {name: vm-a1, ip: 127.0.0.101}
          - {name: vm-a2, ip: 127.0.0.102}
      - name: ig-d
        endpoints:
          - {name: vm-d1, ip: 127.0.0.111}
          - {name: vm-d2, ip: 127.0.0.112}
      - name: ig-b
        failover: true
        endpoints:
          - {name: vm-b1, ip: 127.0.0.121}
          - {name: vm-b2, ip: 127.0.0.122}
      - name: ig-c
        failover: true
        endpoints:
          - {name: vm-c1, ip: 127.0.0.131}
          - {name: vm-c2, ip: 127.0.0.132}
`, disableDrain, drainSec, port, healthy, unhealthy)
}

// patientProbes gives seedConfig's health checks a timeout (300 s) that a
// loopback answer never reaches, however starved the test machine is: with
// the 2 s of seedConfig, a healthy backend whose answer is scheduled late
// reads as unhealthy (unhealthyThreshold 1), and a test that asserts a
// restart writes nothing sees a write. The interval moves with it (a probe
// must end before the next): only for tests that never advance the fake
// clock, where every probe is a ProbeAll the test asks for.
func patientProbes(cfg string) string {
	const from, to = "checkIntervalSec: 5\n      timeoutSec: 2\n", "checkIntervalSec: 300\n      timeoutSec: 300\n"
	if !strings.Contains(cfg, from) {
		panic("patientProbes: seedConfig's health check changed")
	}
	return strings.Replace(cfg, from, to, 1)
}

// waitBudget is how long a test waits for progress that takes
// milliseconds on an idle machine (a controller's first push, a P4Runtime
// session): until shortly before the test's own deadline, so that a
// starved machine slows the test down instead of failing it, and a real
// hang still fails with the test's logs rather than at go test's panic.
func waitBudget(t *testing.T) time.Duration {
	if dl, ok := t.Deadline(); ok {
		return max(time.Until(dl)-30*time.Second, 10*time.Second)
	}
	return 5 * time.Minute
}

func allSeedIPs() []string {
	var ips []string
	for _, ip := range seedIPs {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	return ips
}

// syncBuffer is a log sink safe for concurrent writers.
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

// lockedSim is a sim datapath safe to read from the test while the
// controller writes (the reference datapath itself is single-threaded).
type lockedSim struct {
	mu   sync.Mutex
	d    *sim.Datapath
	name string
	// applies counts Apply calls; writes sums their changes.
	applies, writes, commits int
	failNext                 error
	lastDiff                 compiler.Diff
}

func newLockedSim(name string) *lockedSim {
	return &lockedSim{d: sim.New(sim.Options{}), name: name}
}

func (s *lockedSim) Name() string { return s.name }
func (s *lockedSim) Read(ctx context.Context) (*compiler.IR, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.Read(ctx)
}
func (s *lockedSim) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext != nil {
		err := s.failNext
		s.failNext = nil
		return targets.ApplyStats{}, err
	}
	s.applies++
	s.writes += len(d.Changes)
	s.lastDiff = d
	return s.d.Apply(ctx, d)
}
func (s *lockedSim) Close() error { return nil }

// Commit forwards to the datapath when it stores informational fields.
func (s *lockedSim) Commit(ir *compiler.IR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits++
	if c, ok := any(s.d).(interface{ Commit(*compiler.IR) error }); ok {
		return c.Commit(ir)
	}
	return nil
}

// IR returns a copy of what the datapath holds.
func (s *lockedSim) IR() *compiler.IR {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.IR().Clone()
}

func (s *lockedSim) counts() (applies, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applies, s.writes
}

// rig is a controller on a fake clock over sim targets, with real HTTP
// backends. Probes happen only when the test asks (ProbeAll), so every
// step is deterministic.
type rig struct {
	t      *testing.T
	ctx    context.Context
	clk    *fakeclock.Clock
	c      *controller.Controller
	cfg    string
	fleet  *backendtest.Fleet
	sims   []*lockedSim
	logs   *syncBuffer
	done   chan error
	cancel context.CancelFunc
}

type rigOptions struct {
	config   func(port int) string
	sims     []*lockedSim
	fleet    *backendtest.Fleet
	cfgPath  string
	debounce time.Duration
	metrics  *controller.Metrics
}

func startRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	return startRigOpts(t, o, nil)
}

func startRigOpts(t *testing.T, o rigOptions, tweak func(*controller.Options)) *rig {
	t.Helper()
	if o.fleet == nil {
		o.fleet = backendtest.Start(t, allSeedIPs()...)
	}
	if o.sims == nil {
		o.sims = []*lockedSim{newLockedSim("sim")}
	}
	if o.cfgPath == "" {
		o.cfgPath = filepath.Join(t.TempDir(), "lb.yaml")
		if err := os.WriteFile(o.cfgPath, []byte(o.config(o.fleet.Port)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if o.debounce == 0 {
		o.debounce = -1
	}
	r := &rig{t: t, clk: fakeclock.New(time.Unix(1_800_000_000, 0)), cfg: o.cfgPath, fleet: o.fleet, sims: o.sims, logs: &syncBuffer{}, done: make(chan error, 1)}
	var ts []targets.Target
	for _, s := range o.sims {
		ts = append(ts, s)
	}
	opts := controller.Options{
		ConfigPath:     o.cfgPath,
		Targets:        ts,
		Logger:         slog.New(slog.NewTextHandler(r.logs, nil)),
		Clock:          r.clk,
		Debounce:       o.debounce,
		WatchInterval:  -1,
		VerifyInterval: -1,
		Metrics:        o.metrics,
	}
	if tweak != nil {
		tweak(&opts)
	}
	c, err := controller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = ctx, cancel
	go func() { r.done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-r.done:
		t.Fatalf("controller stopped: %v\n%s", err, r.logs)
	case <-time.After(waitBudget(t)):
		t.Fatalf("controller not ready\n%s", r.logs)
	}
	t.Cleanup(r.stop)
	return r
}

func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil {
		r.t.Errorf("controller Run: %v", err)
	}
	r.cancel = nil
}

// probe runs n rounds of probes against the real backends, then makes the
// controller push.
func (r *rig) probe(n int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		r.c.Monitor().ProbeAll(r.ctx)
	}
	if err := r.c.Sync(r.ctx); err != nil {
		r.t.Fatalf("sync: %v\n%s", err, r.logs)
	}
}

func (r *rig) setHealthy(name string, ok bool) {
	code := 200
	if !ok {
		code = 503
	}
	r.fleet.Get(seedIPs[name]).SetStatus(code)
}

// pushed returns the service row and the names of the backends on its
// active ring, as the datapath holds them.
func pushed(t *testing.T, ir *compiler.IR, svc string) (*compiler.ServiceRow, []string) {
	t.Helper()
	s := ir.ServiceByName(svc)
	if s == nil {
		t.Fatalf("service %q not on the datapath", svc)
	}
	seen := map[string]bool{}
	for _, id := range ir.ActiveRing(s) {
		if id == 0 {
			continue
		}
		b := ir.Backend(id)
		if b == nil {
			t.Fatalf("ring slot points at backend %d, which has no row", id)
		}
		seen[b.Name] = true
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return s, names
}

func join(s []string) string { return "{" + strings.Join(s, ",") + "}" }

// recordingTarget counts what is written to any target.
type recordingTarget struct {
	targets.Target
	mu              sync.Mutex
	applies, writes int
}

func (r *recordingTarget) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	r.mu.Lock()
	r.applies++
	r.writes += len(d.Changes)
	r.mu.Unlock()
	return r.Target.Apply(ctx, d)
}

// Commit forwards to targets that store names.
func (r *recordingTarget) Commit(ir *compiler.IR) error {
	if c, ok := r.Target.(interface{ Commit(*compiler.IR) error }); ok {
		return c.Commit(ir)
	}
	return nil
}

// startRigTargets runs the rig over arbitrary targets (no sims).
func startRigTargets(t *testing.T, cfg string, f *backendtest.Fleet, ts ...targets.Target) *rig {
	t.Helper()
	r := &rig{t: t, clk: fakeclock.New(time.Unix(1_800_000_000, 0)), cfg: cfg, fleet: f, logs: &syncBuffer{}, done: make(chan error, 1)}
	c, err := controller.New(controller.Options{ConfigPath: cfg, Targets: ts, Logger: slog.New(slog.NewTextHandler(r.logs, nil)),
		Clock: r.clk, Debounce: -1, WatchInterval: -1, VerifyInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go func() { r.done <- c.Run(r.ctx) }()
	select {
	case <-c.Ready():
	case err := <-r.done:
		t.Fatalf("controller stopped: %v\n%s", err, r.logs)
	case <-time.After(waitBudget(t)):
		t.Fatalf("controller not ready\n%s", r.logs)
	}
	t.Cleanup(r.stop)
	return r
}

// oneHalfAtRest fails the test unless every service of ir holds its ring
// in the half its row points at only: at rest the other half is empty
// (issue 35), so that the ring table's spare room is shared.
func oneHalfAtRest(t *testing.T, ir *compiler.IR, logs fmt.Stringer) {
	t.Helper()
	for i := range ir.Services {
		s := &ir.Services[i]
		r := ir.Ring(s.ID)
		if r == nil {
			continue
		}
		for slot, b := range r.Halves[1-s.ActiveHalf&1] {
			if b != 0 {
				t.Fatalf("service %q holds slot %d of half %d, which its row (half %d) does not look up: want one half at rest\n%s", s.Name, slot, 1-s.ActiveHalf&1, s.ActiveHalf, logs)
			}
		}
	}
}
