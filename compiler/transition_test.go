package compiler

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// renamed is manyServices with its services named prefix+i and, when
// moveVIPs, their VIPs under 11.0.0.0/8: another configuration of as
// many services.
func renamed(n int, prefix string, moveVIPs bool) string {
	y := strings.ReplaceAll(manyServices(n, 4, 61), "name: s", "name: "+prefix)
	if moveVIPs {
		y = strings.ReplaceAll(y, "vip: 10.", "vip: 11.")
	}
	return y
}

func loadOK(t *testing.T, yaml string) *Config {
	t.Helper()
	d, err := Load("lb.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return d.Config
}

// TestDiffRemovalsFirst (issue 31, item 1): a diff deletes what goes
// before it inserts what comes, so that X → Y never holds more rows than
// the larger of X and Y when nothing of X is needed meanwhile: services
// that go, their VIPs, rings and backends go first. A service that a VIP
// moves away from stays until the VIP has moved (hitless), and only it
// counts beside what comes. Each diff is applied change by change by
// checkDiffSteps (no torn ring, no VIP to a missing service).
func TestDiffRemovalsFirst(t *testing.T) {
	const n = 50
	x := compileOK(t, Input{Config: loadOK(t, renamed(n, "x", false))}).IR
	for _, tc := range []struct {
		name          string
		yaml          string
		wantServices  int // at the diff's peak
		wantVIPs      int
		wantEntries   int
		wantBackends  int
		transitionErr bool // with tables the size of the larger configuration
	}{
		{"other services, other VIPs", renamed(n, "y", true), n, n, n * 61, n * 4, false},
		{"half the services go", renamed(n/2, "x", false), n, n, n * 61, n * 4, false},
		// The same VIPs under other names: each VIP moves from its old
		// service to a new one, which must exist first (hitless).
		{"same VIPs, other services", renamed(n, "y", false), 2 * n, n, 2 * n * 61, 2 * n * 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := compileOK(t, Input{Config: loadOK(t, tc.yaml), Prev: x}).IR
			for _, pair := range []struct {
				name     string
				old, new *IR
			}{{"X→Y", x, y}, {"Y→X", y, compileOK(t, Input{Config: loadOK(t, renamed(n, "x", false)), Prev: y}).IR}} {
				d := DiffIR(pair.old, pair.new)
				checkDiffSteps(t, pair.old, pair.new, d, 0)
				checkWrittenOnce(t, d)
				p := d.Peak(pair.old)
				larger := func(f func(*IR) int) int { return max(f(pair.old), f(pair.new)) }
				if pair.name == "X→Y" {
					for k, want := range map[string]int{HoldsServices: tc.wantServices, HoldsVIPs: tc.wantVIPs, HoldsRingEntries: tc.wantEntries, HoldsBackends: tc.wantBackends} {
						if p[k] != want {
							t.Errorf("%s: peak %s %d, want %d", pair.name, k, p[k], want)
						}
					}
				}
				c := Capacity{Target: "bmv2", Tables: []TableCapacity{
					{Table: "LbIngress.service", Holds: HoldsServices, Size: larger(func(ir *IR) int { return len(ir.Services) })},
					{Table: "LbIngress.vip_port", Holds: HoldsVIPPorts, Size: larger(func(ir *IR) int { return len(ir.VIPs) })},
				}}
				err := CheckTransition(pair.old, d, c)
				var te *TransitionError
				switch {
				case !tc.transitionErr && err != nil:
					t.Errorf("%s: %v, want none: removals come first", pair.name, err)
				case tc.transitionErr && !errors.As(err, &te):
					t.Errorf("%s: %v, want a TransitionError", pair.name, err)
				case tc.transitionErr && !strings.Contains(err.Error(), "LbIngress.service holds 50 services, 100 at once are needed") ||
					tc.transitionErr && !strings.Contains(err.Error(), "make it in two steps"):
					t.Errorf("%s: %v: does not say which table and how to proceed", pair.name, err)
				}
			}
		})
	}
}

// TestDiffRemovesStrayRingOnce: a ring with no service row on either
// side (a push cut short between a new service's ring and its row) is
// deleted once, among the removals that come first.
func TestDiffRemovesStrayRingOnce(t *testing.T) {
	x := compileOK(t, Input{Config: loadOK(t, renamed(2, "x", false))}).IR
	held := x.Clone()
	held.Services = held.Services[:1] // the second service's row never written
	held.VIPs = held.VIPs[:1]
	want := compileOK(t, Input{Config: loadOK(t, renamed(1, "x", false)), Prev: x}).IR
	d := DiffIR(held, want)
	checkWrittenOnce(t, d)
	if !DiffIR(d.Apply(held), want).Empty() {
		t.Fatal("applying the diff does not give the new IR")
	}
	first := -1
	for i, c := range d.Changes {
		if c.Ring != nil && c.Op == Delete {
			first = i
			break
		}
	}
	for i, c := range d.Changes[:max(first, 0)] {
		if c.Op == Insert {
			t.Fatalf("change %d inserts before the stray ring is deleted: %s", i, c)
		}
	}
}

// checkWrittenOnce: no diff writes one key twice (a second delete of a
// deleted entry fails on a switch: NOT_FOUND).
func checkWrittenOnce(t *testing.T, d Diff) {
	t.Helper()
	seen := map[string]int{}
	for i, c := range d.Changes {
		var k string
		switch {
		case c.Ring != nil:
			k = fmt.Sprintf("ring %d/%d/%d", c.Ring.ServiceID, c.Ring.Half, c.Ring.Slot)
		case c.Service != nil:
			k = fmt.Sprintf("service %d", c.Service.ID)
		case c.VIP != nil:
			k = fmt.Sprintf("vip %v", c.VIP.Key)
		case c.Backend != nil:
			k = fmt.Sprintf("backend %d", c.Backend.ID)
		}
		if j, ok := seen[k]; ok {
			t.Fatalf("changes %d and %d both write %s", j, i, k)
		}
		seen[k] = i
	}
}
