package compiler

import (
	"strings"
	"testing"
)

// TestCheckCapacity: every table a configuration overflows is named with
// its size, what the configuration needs and how to raise it; rings count
// both halves.
func TestCheckCapacity(t *testing.T) {
	cfg := loadExample(t, "failover.yaml") // 1 service, ports 80 and 443, 8 endpoints, ring 65537
	cfg.Limits.MaxConnections = 100000
	u := Usage(cfg)
	for k, want := range map[string]int{HoldsServices: 1, HoldsVIPs: 2, HoldsVIPPorts: 2, HoldsVIPProtos: 0, HoldsVIPAddrs: 0,
		HoldsRingEntries: 2 * 65537, HoldsBackends: 8, HoldsIdleTimeout: 1, HoldsConnections: 100000} {
		if u[k] != want {
			t.Errorf("usage %s = %d, want %d", k, u[k], want)
		}
	}
	c := Capacity{Target: "x", Tables: []TableCapacity{
		{Table: "svc", Holds: HoldsServices, Size: 1, Raise: "grow svc"},
		{Table: "vip", Holds: HoldsVIPs, Size: 1, Raise: "grow vip"},
		{Table: "ring", Holds: HoldsRingEntries, Size: 131073, Raise: "grow ring"},
		{Table: "be", Holds: HoldsBackends, Size: 8},
		{Table: "ct", Holds: HoldsConnections, Size: 65536, Raise: "grow ct"},
	}}
	ps := CheckCapacity(cfg, c)
	got := ps.Error()
	for _, want := range []string{
		`--target x: 2 VIP rows, but its vip holds 1; grow vip`,
		`--target x: 131074 ring entries, but its ring holds 131073 (the largest rings: "web" ringSize 65537); grow ring`,
		`--target x: limits.maxConnections 100000, but its ct holds 65536 connections; grow ct`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	if len(ps) != 3 {
		t.Errorf("%d problems, want 3 (services and backends fit):\n%s", len(ps), got)
	}
}
