package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/fallback"
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
// services map, whose size comes from the program itself; the error names
// the map, its size and how to raise it. The same file fits no P4 switch
// either, and a small one fits all three.
func TestValidateTargetCapacity(t *testing.T) {
	sizes, err := fallback.MapSizes()
	if err != nil {
		t.Fatal(err)
	}
	f := manyServices(t, 17000)
	_, _, err = runLBC(t, "validate", "-c", f, "--target", "xdp")
	want := fmt.Sprintf("--target xdp: 17000 services, but its services map holds %d; raise max_entries of the services map in fallback/bpf/lb.c", sizes["services"])
	if sizes["services"] >= 17000 || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("17000 services on xdp: %v\nwant %q", err, want)
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
		if err != nil || !strings.Contains(out, "ok for --target "+tgt) || !strings.Contains(out, "186 of") {
			t.Errorf("3 services on %s: %v\n%s", tgt, err, out)
		}
	}
	if _, _, err := runLBC(t, "validate", "-c", small, "--target", "sim"); err == nil || !strings.Contains(err.Error(), "known targets are bmv2, tofino, xdp") {
		t.Errorf("unknown target: %v", err)
	}
}

// TestValidateTargetConnections: limits.maxConnections is checked against
// the conntrack of the target (the TNA program's 2^CT_INDEX_BITS slots).
func TestValidateTargetConnections(t *testing.T) {
	data, err := os.ReadFile("../../examples/failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(data), "services:\n", "limits: {maxConnections: 1000000}\nservices:\n", 1)
	cfg = strings.Replace(cfg, "    protocol: TCP\n", "    protocol: TCP\n    ringSize: 65536\n", 1)
	f := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runLBC(t, "validate", "-c", f, "--target", "tofino")
	if err == nil || !strings.Contains(err.Error(), "--target tofino: limits.maxConnections 1000000, but its LbIngress.ct_sig holds 65536 connections; recompile p4/tna/lb.p4 with -DCT_INDEX_BITS=N") {
		t.Fatalf("tofino: %v", err)
	}
	cfg = strings.Replace(cfg, "maxConnections: 1000000", "maxConnections: 6000", 1)
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLBC(t, "validate", "-c", f, "--target", "bmv2")
	if err != nil || !strings.Contains(out, "LbIngress.ct_sig       65536 connections (limits.maxConnections 6000); at that occupancy") {
		t.Fatalf("bmv2: %v\n%s", err, out)
	}
}
