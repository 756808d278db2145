package controller_test

import (
	"strings"
	"testing"
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
