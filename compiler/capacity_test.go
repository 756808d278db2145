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
		`service "web": ringSize: 65537 (the default): the rings need 131074 entries (2 × ringSize per service: both halves) and --target x's ring holds 131073; set ringSize: 65536 (the rings then take 131072 of 131073 entries); or grow ring`,
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

// TestCheckCapacityRingSizesToSet (issue 21): on --target tofino, a
// configuration whose rings do not fit gets, at the line of each ringSize
// to change (the service's line when it takes the default), the power of
// two to set so that every ring is one Tofino takes and all fit the ring
// table; a ring that cannot shrink below its endpoints' need is reported
// for the table as a whole.
func TestCheckCapacityRingSizesToSet(t *testing.T) {
	tofino := Capacity{Target: TargetTofino, Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 131072, Raise: "recompile with -DRING_TABLE_SIZE=N"}}}
	for _, tc := range []struct {
		name, yaml string
		c          Capacity
		want       []string // one per problem, in line order
	}{
		{"default ring, one service", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::9"}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
`, tofino, []string{`lb.yaml:3: service "web": ringSize: 65537 (the default) is not a power of two: --target tofino takes the ring slot from the hash bits (R-MAGLEV-1), and the rings need 131074 entries (2 × ringSize per service: both halves) and --target tofino's LbIngress.ring holds 131072; set ringSize: 65536 (the rings then take 131072 of 131072 entries); or recompile with -DRING_TABLE_SIZE=N`}},
		{"two services: the larger halves", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::9"}
services:
  - name: api
    vip: 10.0.0.1
    protocol: TCP
    ports: [443]
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
  - name: api6
    vip: "2001:db8::1"
    protocol: TCP
    ports: [443]
    ringSize: 16384
    backends: [{name: g, endpoints: [{name: a, ip: "2001:db8:1::1"}]}]
`, tofino, []string{`lb.yaml:3: service "api": ringSize: 65537 (the default) is not a power of two: --target tofino takes the ring slot from the hash bits (R-MAGLEV-1), and the rings need 163842 entries (2 × ringSize per service: both halves) and --target tofino's LbIngress.ring holds 131072; set ringSize: 32768 (the rings then take 98304 of 131072 entries)`}},
		{"a prime that fits gets only the power of two", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::9"}
services:
  - name: media
    vip: 10.0.0.1
    protocol: TCP
    ports: [53]
    ringSize: 4099
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
`, tofino, []string{`lb.yaml:7: service "media": ringSize: 4099 is not a power of two: --target tofino takes the ring slot from the hash bits (R-MAGLEV-1); set ringSize: 4096 (the rings then take 8192 of 131072 entries)`}},
		{"fits as it is", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::9"}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    ringSize: 32768
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
`, tofino, nil},
		{"bmv2 keeps a prime that fits", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::9"}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
`, Capacity{Target: "bmv2", Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 1 << 20}}}, nil},
		{"no size fits the endpoints", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::9"}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    ringSize: 64
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}, {name: b, ip: 10.1.0.2}, {name: c, ip: 10.1.0.3}, {name: d, ip: 10.1.0.4}]}]
`, Capacity{Target: TargetTofino, Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 64, Raise: "grow it"}}},
			[]string{`lb.yaml:2: --target tofino: 128 ring entries, but its LbIngress.ring holds 64 (the largest rings: "web" ringSize 64; no ringSize of at least 10 slots per endpoint fits); grow it`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Load("lb.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			ps := d.CheckCapacity(tc.c)
			if len(ps) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(ps), len(tc.want), ps)
			}
			for i, w := range tc.want {
				if got := ps[i].String(); !strings.Contains(got, w) {
					t.Errorf("problem %d:\n %s\nlacks\n %s", i, got, w)
				}
			}
		})
	}
}
