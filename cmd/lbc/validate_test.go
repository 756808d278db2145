package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/tofino"
)

// manyServices writes a configuration of n one-port services with small
// rings.
func manyServices(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	// limits.maxServices lifts R-LIMIT's default so the target's own
	// table size is what gets checked.
	fmt.Fprintf(&b, "tunnel: {sourceIPv4: 192.0.2.1}\nlimits: {maxServices: %d}\nservices:\n", max(n, 1))
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - {name: s%d, vip: 10.%d.%d.%d, protocol: TCP, ports: [80], ringSize: 31, backends: [{name: g, endpoints: [{name: e%d, ip: 172.16.%d.%d}]}]}\n",
			i, 100+i/62500, i/250%250, i%250+1, i, i/250, i%250+1)
	}
	f := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestValidateTargetCapacity: 17,000 services do not fit the XDP program's
// services map at its default size; the error names the map, its size and
// the flag that raises it. The same file fits no P4 switch
// either, and a small one fits all three.
func TestValidateTargetCapacity(t *testing.T) {
	f := manyServices(t, 17000)
	_, _, err := runLBC(t, "validate", "-c", f, "--target", "xdp")
	want := fmt.Sprintf("--target xdp: 17000 services, but its services map holds %d; ", fallback.DefaultServiceEntries)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "raise it with --service-entries 17000 or more") {
		t.Fatalf("17000 services on xdp: %v\nwant %q and the flag", err, want)
	}
	_, _, err = runLBC(t, "validate", "-c", f, "--target", "bmv2")
	if err == nil || !strings.Contains(err.Error(), "--target bmv2: 17000 services, but its LbIngress.service holds") || !strings.Contains(err.Error(), "P4FLAGS=-DSERVICE_TABLE_SIZE=N") {
		t.Fatalf("17000 services on bmv2: %v", err)
	}
	_, _, err = runLBC(t, "validate", "-c", f, "--target", "tofino")
	if err == nil || !strings.Contains(err.Error(), "ringSize: 31 is not a power of two") || !strings.Contains(err.Error(), "--target tofino: 17000 services, but its LbIngress.service holds") {
		t.Fatalf("17000 services on tofino: %v", err)
	}
	small := manyServices(t, 3)
	for _, tgt := range []string{"xdp", "bmv2"} {
		out, _, err := runLBC(t, "validate", "-c", small, "--target", tgt)
		if err != nil || !strings.Contains(out, "ok for --target "+tgt) || !strings.Contains(out, "124 of") {
			t.Errorf("3 services on %s: %v\n%s", tgt, err, out)
		}
	}
	if _, _, err := runLBC(t, "validate", "-c", small, "--target", "sim"); err == nil || !strings.Contains(err.Error(), "known targets are bmv2, tofino, xdp") {
		t.Errorf("unknown target: %v", err)
	}
}

// TestValidateTargetConnections (R-CT-CAP): limits.maxConnections is
// checked against the flows the target's conntrack holds at ≤ 1 % loss in
// steady state, as the model of its geometry measures them, not against
// its slots: on bmv2, 1,000,000 connections fit the 1,048,576 slots but
// not the 225,280 flows the 4-way buckets hold.
func TestValidateTargetConnections(t *testing.T) {
	data, err := os.ReadFile("../../examples/failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		capOf  func() (compiler.Capacity, error)
		loses  string
	}{
		// The conntrack line is the committed program's (Capacity reads
		// its geometry from the P4Info).
		{"tofino", tofino.Capacity, "of new flows are refused an entry (steady state"},
		{"bmv2", bmv2.Capacity, "of new flows evict a live flow's entry (steady state"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			cfg := strings.Replace(string(data), "services:\n", "limits: {maxConnections: 1000000}\nservices:\n", 1)
			cfg = strings.Replace(cfg, "    protocol: TCP\n", "    protocol: TCP\n    ringSize: 65536\n", 1)
			f := filepath.Join(t.TempDir(), "lb.yaml")
			if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			capa, err := tc.capOf()
			if err != nil {
				t.Fatal(err)
			}
			var ct compiler.TableCapacity
			for _, tb := range capa.Tables {
				if tb.Holds == compiler.HoldsConnections {
					ct = tb
				}
			}
			if ct.Size == 0 || ct.Size >= 1000000 {
				t.Fatalf("Capacity's conntrack holds %d (want a steady-state figure under 1,000,000): %+v", ct.Size, capa.Tables)
			}
			_, _, err = runLBC(t, "validate", "-c", f, "--target", tc.target)
			want := fmt.Sprintf("--target %s: limits.maxConnections 1000000, but its %s holds %d connections; %s", tc.target, ct.Table, ct.Size, ct.Raise)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%v\nwant %s", err, want)
			}
			fits := ct.Size * 3 / 4
			cfg = strings.Replace(cfg, "maxConnections: 1000000", fmt.Sprintf("maxConnections: %d", fits), 1)
			if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _, err := runLBC(t, "validate", "-c", f, "--target", tc.target)
			if err != nil || !strings.Contains(out, fmt.Sprintf("%d connections (limits.maxConnections %d); at that occupancy 0.", ct.Size, fits)) ||
				!strings.Contains(out, tc.loses) {
				t.Fatalf("at %d: %v\n%s", fits, err, out)
			}
		})
	}
}

// TestValidatePrintsSteadyStateRCTCAP (issue 32, item 3): the conntrack
// line of each P4 target gives R-CT-CAP's steady-state figure, the one the
// model measures (sim.CommittedTNAHeld, sim.CommittedRegisterHeld), with
// the fill from empty beside it, labelled; on tofino the steady-state
// figure is the capacity limits.maxConnections is checked against on both.
func TestValidatePrintsSteadyStateRCTCAP(t *testing.T) {
	t1, ok := sim.CommittedTNAHeld(sim.TNATofino1)
	bm, ok2 := sim.CommittedRegisterHeld(262144, sim.P4Ways)
	if !ok || !ok2 {
		t.Fatal("no committed figures for Tofino 1 or the BMv2 build")
	}
	if t1.Steady >= t1.Fill || bm.Steady >= bm.Fill {
		t.Fatalf("steady state %+v, %+v: not below the fill", t1, bm)
	}
	for _, tc := range []struct{ target, want string }{
		{"tofino", fmt.Sprintf("flows held at ≤ 1 %% steady-state refusal; %d by a fill from empty) %d connections", t1.Fill, t1.Steady)},
		{"bmv2", fmt.Sprintf("= 1048576 slots, flows held at ≤ 1 %% steady-state loss; %d by a fill from empty) %d connections", bm.Fill, bm.Steady)},
	} {
		out, _, err := runLBC(t, "validate", "-c", "../../examples/failover.yaml", "--target", tc.target)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("--target %s: %v\n%s\nwant %q", tc.target, err, out, tc.want)
		}
	}
}

// TestValidateNamesFileMixups (issue 24, item 10): a health file given as
// the configuration, or a configuration given as --health, is named as
// such with the fix, in one problem, where it was one "unknown field" per
// endpoint and "no services".
func TestValidateNamesFileMixups(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"health file as -c", []string{"validate", "-c", "../../examples/failover-health.yaml"},
			"examples/failover-health.yaml: 1 problem:\n../../examples/failover-health.yaml:3: this looks like a health file (endpoint: {healthy, weight}), not a load-balancer configuration: pass it with --health, and the configuration with -c lb.yaml"},
		{"weights file as -c", []string{"compile", "-c", td + "weighted-health.yaml"},
			"weighted-health.yaml:2: this looks like a health file"},
		{"configuration as --health", []string{"validate", "-c", "../../examples/failover.yaml", "--health", "../../examples/failover.yaml"},
			"examples/failover.yaml:8: this looks like a load-balancer configuration (it has services), not a health file: pass it with -c, and the health state (endpoint: {healthy, weight}) with --health"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runLBC(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "unknown field") || strings.Contains(err.Error(), "no services") {
				t.Errorf("error still lists the fields:\n%v", err)
			}
		})
	}
}

// TestValidateSyntaxErrorLine (issue 24, item 10): a YAML syntax error is
// reported on its line: an unclosed bracket on line 9 is syn.yaml:9, where
// it was syn.yaml:8.
func TestValidateSyntaxErrorLine(t *testing.T) {
	syn := filepath.Join(t.TempDir(), "syn.yaml")
	data := "tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n  - name: web\n    vip: 203.0.113.10\n    protocol: TCP\n    ports: [80]\n    backends:\n      - name: ig-a\n        endpoints: [{name: vm-a1, ip: 10.0.1.1}\n      - name: ig-b\n"
	if err := os.WriteFile(syn, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runLBC(t, "validate", "-c", syn)
	if want := syn + ":9: did not find expected ',' or ']'"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}

// setRingSizeRe is a problem of validate --target that says which
// ringSize to set, at which line.
var setRingSizeRe = regexp.MustCompile(`(?m)^(\S+?):(\d+): service "([^"]+)": ringSize: .*; set ringSize: (\d+) `)

// TestValidateTofinoExamples (issue 21): every shipped load-balancer
// example either passes `lbc validate --target tofino` or fails saying, at
// file:line, the ringSize to set; made as it says (the value replaced on
// that line, or a ringSize line added to the service there), the file
// passes. The passing listing names each table once (it printed
// LbIngress.ct_sig twice), and examples/tofino.yaml passes as shipped.
func TestValidateTofinoExamples(t *testing.T) {
	notLB := map[string]bool{"failover-health.yaml": true, "weighted-health.yaml": true, "gslb.yaml": true, "bgp.yaml": true, "fleet.yaml": true}
	names, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(names) == 0 {
		t.Fatalf("examples: %v", err)
	}
	for _, f := range names {
		if notLB[filepath.Base(f)] {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, _, err := runLBC(t, "validate", "-c", f, "--target", "tofino")
			if filepath.Base(f) == "tofino.yaml" && err != nil {
				t.Fatalf("examples/tofino.yaml is sized for Tofino 1 but: %v", err)
			}
			if err != nil {
				fixes := setRingSizeRe.FindAllStringSubmatch(err.Error(), -1)
				if len(fixes) == 0 || len(fixes) != strings.Count(strings.TrimSpace(err.Error()), "\n") {
					t.Fatalf("validate --target tofino fails without a ringSize to set at file:line for every problem:\n%v", err)
				}
				b, rerr := os.ReadFile(f)
				if rerr != nil {
					t.Fatal(rerr)
				}
				lines := strings.Split(string(b), "\n")
				// From the last line up, so that an added line moves none
				// of the lines still to edit.
				for i := len(fixes) - 1; i >= 0; i-- {
					fx := fixes[i]
					if fx[1] != f {
						t.Fatalf("problem names file %s, want %s", fx[1], f)
					}
					n, _ := strconv.Atoi(fx[2])
					line := lines[n-1]
					if k := strings.Index(line, "ringSize:"); k >= 0 {
						lines[n-1] = line[:k] + "ringSize: " + fx[4]
						continue
					}
					if !strings.Contains(line, "- name: "+fx[3]) {
						t.Fatalf("line %d is neither a ringSize nor service %s: %q", n, fx[3], line)
					}
					indent := strings.Repeat(" ", strings.Index(line, "name:"))
					lines = append(lines[:n], append([]string{indent + "ringSize: " + fx[4]}, lines[n:]...)...)
				}
				fixed := filepath.Join(t.TempDir(), filepath.Base(f))
				if err := os.WriteFile(fixed, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
				f = fixed
			}
			out, _, err := runLBC(t, "validate", "-c", f, "--target", "tofino")
			if err != nil {
				t.Fatalf("with the ringSize validate named set: %v", err)
			}
			seen := map[string]bool{}
			for _, l := range strings.Split(out, "\n")[1:] {
				if fs := strings.Fields(l); len(fs) > 0 {
					if seen[fs[0]] {
						t.Errorf("listing names %s twice:\n%s", fs[0], out)
					}
					seen[fs[0]] = true
				}
			}
			if !seen["LbIngress.ring"] || !strings.Contains(out, "LbIngress conntrack") {
				t.Errorf("listing lacks the ring or conntrack:\n%s", out)
			}
		})
	}
}

// TestValidateTofino2P4Info: --p4info checks --target tofino against
// another build of the TNA program. 300 services of 8 endpoints (1,024
// slots each under auto) fit Tofino 1's 2^20 ring entries but not Tofino
// 2's 2^18, and the problem says the ceiling is Tofino 2's; the conntrack
// line is the Tofino 2 geometry's. --p4info with another target, a file
// that is not there and a P4Info of another program are refused, each
// naming what to fix.
func TestValidateTofino2P4Info(t *testing.T) {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n")
	for i := range 300 {
		fmt.Fprintf(&b, "  - name: s%d\n    vip: 10.%d.%d.1\n    protocol: TCP\n    ports: [80]\n    backends:\n      - name: g\n        endpoints:\n", i, i/250, i%250)
		for e := range 8 {
			fmt.Fprintf(&b, "          - {name: s%de%d, ip: 10.200.%d.%d}\n", i, e, i%250, e+1)
		}
	}
	cfg := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const t2 = "../../p4/tna/build/tofino2/lb.p4info.txtpb"
	out, _, err := runLBC(t, "validate", "-c", cfg, "--target", "tofino")
	if err != nil || !strings.Contains(out, "of 1048576 ring entries") {
		t.Fatalf("Tofino 1: %v\n%s", err, out)
	}
	_, _, err = runLBC(t, "validate", "-c", cfg, "--target", "tofino", "--p4info", t2)
	for _, want := range []string{"--target tofino: the rings need 308224 entries", "46080 more than its LbIngress.ring holds (262144)", "cannot grow past 262144 entries, the most this program places on Tofino 2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Tofino 2: error %v, want it to contain %q", err, want)
		}
	}
	out, _, err = runLBC(t, "validate", "--target", "tofino", "--p4info", t2)
	if err != nil || !strings.Contains(out, "of 262144 ring entries") || !strings.Contains(out, "4 ways × 131072 slots") {
		t.Errorf("Tofino 2, the embedded example: %v\n%s", err, out)
	}
	// limits.maxConnections beyond Tofino 1's 131,072 slots: the steady-state
	// loss at that occupancy is the Tofino 2 geometry's.
	lim := filepath.Join(t.TempDir(), "lim.yaml")
	if err := os.WriteFile(lim, []byte("limits: {maxConnections: 150000}\ntunnel: {sourceIPv4: 192.0.2.1}\nservices:\n  - name: web\n    vip: 203.0.113.10\n    protocol: TCP\n    ports: [80]\n    backends:\n      - name: g\n        endpoints: [{name: a, ip: 10.0.0.1}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runLBC(t, "validate", "-c", lim, "--target", "tofino", "--p4info", t2)
	if err != nil || !strings.Contains(out, "(limits.maxConnections 150000); at that occupancy ") || !strings.Contains(out, "of new flows are refused an entry") {
		t.Errorf("Tofino 2 at 150,000 connections: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "xdp", "--p4info", t2}, "--p4info names the build of --target tofino"},
		{[]string{"--target", "tofino", "--p4info", filepath.Join(t.TempDir(), "none.txtpb")}, "--p4info: open "},
		{[]string{"--target", "tofino", "--p4info", "../../p4/build/lb.p4info.txtpb"}, "not a build of p4/tna/lb.p4"},
	} {
		_, _, err := runLBC(t, append([]string{"validate"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate %v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
