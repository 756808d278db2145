package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
)

// TestRELIG5_SeedFailoverWithRealProbes drives the seed-001 walk-through
// with real HTTP backends failing and recovering, and checks what the
// datapath holds at every step: the eligible set, the backends on the
// active ring, and the epoch, which moves at failover and failback only
// with disableConnectionDrainOnFailover (R-EPOCH).
func TestRELIG5_SeedFailoverWithRealProbes(t *testing.T) {
	for _, disable := range []bool{false, true} {
		name := "drain-on-failover"
		if disable {
			name = "disableConnectionDrainOnFailover"
		}
		t.Run(name, func(t *testing.T) {
			r := startRig(t, rigOptions{config: func(port int) string { return seedConfig(port, disable, 0, 2, 2) }})
			sim := r.sims[0]
			bump := uint32(0)
			if disable {
				bump = 1
			}
			steps := []struct {
				what     string
				fail     []string
				recover  []string
				eligible string
				decision string
				epoch    uint32
				event    string
			}{
				{"all healthy", nil, nil, "{vm-a1,vm-a2,vm-d1,vm-d2}", "primary", 0, ""},
				{"a1, d1 fail", []string{"vm-a1", "vm-d1"}, nil, "{vm-a2,vm-d2}", "primary", 0, ""},
				{"a2 fails: failover", []string{"vm-a2"}, nil, "{vm-b1,vm-b2,vm-c1,vm-c2}", "failover", bump, "failover"},
				{"a2 recovers: failback", nil, []string{"vm-a2"}, "{vm-a2,vm-d2}", "primary", 2 * bump, "failback"},
				{"a1 recovers", nil, []string{"vm-a1"}, "{vm-a1,vm-a2,vm-d2}", "primary", 2 * bump, ""},
			}
			down := map[string]bool{}
			for i, st := range steps {
				for _, n := range st.fail {
					r.setHealthy(n, false)
					down[n] = true
				}
				for _, n := range st.recover {
					r.setHealthy(n, true)
					delete(down, n)
				}
				if i > 0 {
					r.probe(1)
					// One probe is under the thresholds (2): nothing moves yet.
					_, ring := pushed(t, sim.IR(), "web")
					if join(ring) != steps[i-1].eligible {
						t.Fatalf("%s: after one probe the ring holds %s; thresholds should keep %s", st.what, join(ring), steps[i-1].eligible)
					}
					r.probe(1)
				}
				svc, ring := pushed(t, sim.IR(), "web")
				if got := join(svc.Eligible); got != st.eligible {
					t.Errorf("%s: eligible %s, want %s", st.what, got, st.eligible)
				}
				if join(ring) != st.eligible {
					t.Errorf("%s: active ring holds %s, want %s", st.what, join(ring), st.eligible)
				}
				if svc.Decision != st.decision {
					t.Errorf("%s: decision %s (%s), want %s", st.what, svc.Decision, svc.Rule, st.decision)
				}
				if svc.Epoch != st.epoch {
					t.Errorf("%s: epoch %d, want %d", st.what, svc.Epoch, st.epoch)
				}
				for _, b := range sim.IR().Backends {
					if b.Healthy == down[b.Name] {
						t.Errorf("%s: backend row %s healthy=%v, want %v", st.what, b.Name, b.Healthy, !down[b.Name])
					}
				}
			}
			logs := r.logs.String()
			for _, ev := range []string{"msg=failover service=web", "msg=failback service=web"} {
				if !strings.Contains(logs, ev) {
					t.Errorf("log has no %q:\n%s", ev, logs)
				}
			}
			if got := strings.Contains(logs, "msg=epoch service=web"); got != disable {
				t.Errorf("epoch event logged: %v, want %v", got, disable)
			}
			if testing.Verbose() {
				t.Log(logs)
			}
			st := r.c.Status(r.ctx)
			if len(st.Events) == 0 {
				t.Error("status has no events")
			}
		})
	}
}

// TestRELIG5_LastResortIsNoSideRealProbes: with real probes, the service
// fails over, then every backend fails (last resort: all primaries), then
// a failover backend recovers, then a primary: `lbc run` reports one
// failover and one failback, in its log and its metrics, and the epoch
// moves only with them (R-ELIG-5, R-EPOCH, R-PERSIST-LR).
func TestRELIG5_LastResortIsNoSideRealProbes(t *testing.T) {
	m := controller.NewMetrics()
	r := startRig(t, rigOptions{metrics: m, config: func(port int) string { return seedConfig(port, true, 0, 1, 1) }})
	sim := r.sims[0]
	steps := []struct {
		what               string
		fail, recover      []string
		decision           string
		epoch              uint32
		failover, failback float64
	}{
		{"every primary fails: failover", []string{"vm-a1", "vm-a2", "vm-d1", "vm-d2"}, nil, "failover", 1, 1, 0},
		{"every failover backend fails: last resort, no failback", []string{"vm-b1", "vm-b2", "vm-c1", "vm-c2"}, nil, "last-resort", 1, 1, 0},
		{"b1 recovers: still the failover side, no event", nil, []string{"vm-b1"}, "failover", 1, 1, 0},
		{"b1 fails again: last resort", []string{"vm-b1"}, nil, "last-resort", 1, 1, 0},
		{"a1 recovers: one failback", nil, []string{"vm-a1"}, "primary", 2, 1, 1},
	}
	for _, st := range steps {
		for _, n := range st.fail {
			r.setHealthy(n, false)
		}
		for _, n := range st.recover {
			r.setHealthy(n, true)
		}
		r.probe(1)
		svc, _ := pushed(t, sim.IR(), "web")
		if svc.Decision != st.decision || svc.Epoch != st.epoch {
			t.Errorf("%s: decision %s (%s) epoch %d, want %s epoch %d", st.what, svc.Decision, svc.Rule, svc.Epoch, st.decision, st.epoch)
		}
		if got := counter(t, m, "lbc_failovers_total"); got != st.failover {
			t.Errorf("%s: lbc_failovers_total %v, want %v", st.what, got, st.failover)
		}
		if got := counter(t, m, "lbc_failbacks_total"); got != st.failback {
			t.Errorf("%s: lbc_failbacks_total %v, want %v", st.what, got, st.failback)
		}
	}
	logs := r.logs.String()
	if n := strings.Count(logs, "msg=failover service=web"); n != 1 {
		t.Errorf("%d failover events logged, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs, "msg=failback service=web"); n != 1 {
		t.Errorf("%d failback events logged, want 1:\n%s", n, logs)
	}
}

// counter sums a counter family of the controller's metrics.
func counter(t *testing.T, m *controller.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			sum += mt.GetCounter().GetValue()
		}
	}
	return sum
}

// TestRPERSISTCAP_DeadlineFromProbeTime: under loadBalancingScheme
// INTERNAL the controller dates a failed backend's cap from the probe that
// found it unhealthy (health.Status.Since), not from when it pushed, and
// keeps it across later pushes.
func TestRPERSISTCAP_DeadlineFromProbeTime(t *testing.T) {
	r := startRig(t, rigOptions{debounce: time.Hour, config: func(port int) string {
		return strings.Replace(seedConfig(port, false, 0, 1, 1), "    ringSize: 1021\n", "    ringSize: 1021\n    loadBalancingScheme: INTERNAL\n", 1)
	}})
	sim := r.sims[0]
	r.setHealthy("vm-a1", false)
	probed := r.clk.Now()
	r.c.Monitor().ProbeAll(r.ctx)
	r.clk.Advance(7 * time.Second) // the push comes later than the probe
	if err := r.c.Sync(r.ctx); err != nil {
		t.Fatal(err)
	}
	want := time.Duration(probed.UnixNano()) + compiler.PersistCap
	a1 := findBackend(sim.IR(), "vm-a1")
	if a1 == nil || a1.Deadline != want || a1.DeadlineRule != compiler.RulePersistCap {
		t.Fatalf("vm-a1 row %+v, want deadline %v (probe time + 300 s)", a1, want)
	}
	// Background probes run whenever the clock moves: vm-d1's failure is
	// dated by whichever probe saw it first, between the failure and now.
	failed := r.clk.Now()
	r.setHealthy("vm-d1", false)
	r.clk.Advance(time.Minute)
	r.probe(1)
	if a1 := findBackend(sim.IR(), "vm-a1"); a1.Deadline != want {
		t.Fatalf("a later push moved vm-a1's deadline to %v, want %v", a1.Deadline, want)
	}
	lo, hi := time.Duration(failed.UnixNano())+compiler.PersistCap, time.Duration(r.clk.Now().UnixNano())+compiler.PersistCap
	if d1 := findBackend(sim.IR(), "vm-d1"); d1.Deadline < lo || d1.Deadline > hi {
		t.Fatalf("vm-d1 deadline %v, want within [%v, %v]", d1.Deadline, lo, hi)
	}
}
