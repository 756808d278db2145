package compiler

import (
	"fmt"
	"strings"
	"testing"
)

// TestCheckCapacity: every table a configuration overflows is named with
// its size, what the configuration needs and how to raise it; rings count
// once, plus room for the largest to change.
func TestCheckCapacity(t *testing.T) {
	cfg := loadExample(t, "failover.yaml") // 1 service, ports 80 and 443, 8 endpoints, ringSize auto: 1024
	cfg.Limits.MaxConnections = 100000
	u := Usage(cfg)
	for k, want := range map[string]int{HoldsServices: 1, HoldsVIPs: 2, HoldsVIPPorts: 2, HoldsVIPProtos: 0, HoldsVIPAddrs: 0,
		HoldsRingEntries: 1024 + 1024, HoldsBackends: 8, HoldsIdleTimeout: 1, HoldsConnections: 100000} {
		if u[k] != want {
			t.Errorf("usage %s = %d, want %d", k, u[k], want)
		}
	}
	c := Capacity{Target: "x", Tables: []TableCapacity{
		{Table: "svc", Holds: HoldsServices, Size: 1, Raise: "grow svc"},
		{Table: "vip", Holds: HoldsVIPs, Size: 1, Raise: "grow vip"},
		{Table: "ring", Holds: HoldsRingEntries, Size: 2047, Raise: "grow ring"},
		{Table: "be", Holds: HoldsBackends, Size: 8},
		{Table: "ct", Holds: HoldsConnections, Size: 65536, Raise: "grow ct"},
	}}
	ps := CheckCapacity(cfg, c)
	got := ps.Error()
	for _, want := range []string{
		`--target x: 2 VIP rows, but its vip holds 1; grow vip`,
		// 8 endpoints at 512 slots: one slot is 1.5625 % of a share, shown rounded up.
		`--target x: the rings need 2048 entries (each ring once, and room for the largest to change), 1 more than its ring holds (2047); the largest rings: "web" 1024 slots (auto: 8 endpoints at 1 %); the finest precision that fits is ringPrecision: 0.016 on the 1 service with ringSize auto (every endpoint's share within 1.6 % of its ideal; the rings then take 1024 of 2047 entries); or grow ring`,
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

// manyServices is a configuration of n services of eps endpoints each,
// every ringSize set to ring (0: auto).
func manyServices(n, eps, ring int) string {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nlimits: {maxServices: 100000}\nservices:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: s%d\n    vip: 10.%d.%d.1\n    protocol: TCP\n    ports: [80]\n", i, i/250, i%250)
		if ring != 0 {
			fmt.Fprintf(&b, "    ringSize: %d\n", ring)
		}
		b.WriteString("    backends: [{name: g, endpoints: [")
		for e := range eps {
			if e > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{name: s%d-e%d, ip: 10.200.%d.%d}", i, e, i%250, e+1)
		}
		b.WriteString("]}]\n")
	}
	return b.String()
}

// TestCheckCapacityRings (issue 35): rings that do not fit are one
// problem, whatever the number of services, saying by how much, which
// rings are largest, and the finest ringPrecision that fits; a ringSize
// Tofino cannot take is reported at its line with the size to set.
func TestCheckCapacityRings(t *testing.T) {
	tofino := Capacity{Target: TargetTofino, Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 131072, Raise: "recompile with -DRING_TABLE_SIZE=N"}}}
	for _, tc := range []struct {
		name, yaml string
		c          Capacity
		want       []string // one per problem, in line order
	}{
		{"200 auto services of 8 endpoints: one problem", manyServices(200, 8, 0), tofino, []string{
			`lb.yaml:3: --target tofino: the rings need 205824 entries (each ring once, and room for the largest to change), 74752 more than its LbIngress.ring holds (131072); the largest rings: 200 services of 1024 slots (auto: 8 endpoints at 1 %; "s0", ...); the finest precision that fits is ringPrecision: 0.016 on the 200 services with ringSize auto (every endpoint's share within 1.6 % of its ideal; the rings then take 102912 of 131072 entries); or recompile with -DRING_TABLE_SIZE=N`}},
		{"128 explicit rings of 1024: one problem", manyServices(128, 16, 1024), tofino, []string{
			`lb.yaml:3: --target tofino: the rings need 132096 entries (each ring once, and room for the largest to change), 1024 more than its LbIngress.ring holds (131072); the largest rings: 128 services of 1024 slots (ringSize; "s0", ...); lower ringSize of the largest, or set ringSize: auto; or recompile with -DRING_TABLE_SIZE=N`}},
		{"127 auto rings of 1024 fit exactly", manyServices(127, 8, 0), tofino, nil},
		{"mixed sizes: the largest first, then the rest counted", manyServices(130, 8, 0) + `  - name: big
    vip: 10.99.0.1
    protocol: TCP
    ports: [80]
    ringSize: 8192
    backends: [{name: g, endpoints: [{name: big-e0, ip: 10.201.0.1}]}]
  - name: small
    vip: 10.99.0.2
    protocol: TCP
    ports: [80]
    ringSize: 64
    backends: [{name: g, endpoints: [{name: small-e0, ip: 10.201.0.2}]}]
`, Capacity{Target: TargetTofino, Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 131072}}}, []string{
			`the largest rings: "big" 8192 slots (ringSize), 130 services of 1024 slots (auto: 8 endpoints at 1 %; "s0", ...), "small" 64 slots (ringSize);`}},
		{"a prime that fits gets only the power of two", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: media
    vip: 10.0.0.1
    protocol: TCP
    ports: [53]
    ringSize: 4099
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
`, tofino, []string{`lb.yaml:7: service "media": ringSize: 4099 is not a power of two; --target tofino takes the ring slot from the hash bits and needs a power-of-two ringSize (R-MAGLEV-1); set ringSize: 4096 (or auto)`}},
		{"bmv2 keeps a prime that fits", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    ringSize: 65537
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
`, Capacity{Target: "bmv2", Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 1 << 20}}}, nil},
		{"auto cannot shrink enough beside an explicit ring", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    ringSize: 64
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}]}]
  - name: api
    vip: 10.0.0.2
    protocol: TCP
    ports: [80]
    backends: [{name: g, endpoints: [{name: b, ip: 10.1.0.2}]}]
`, Capacity{Target: TargetTofino, Tables: []TableCapacity{{Table: "LbIngress.ring", Holds: HoldsRingEntries, Size: 128, Raise: "grow it"}}},
			[]string{`lb.yaml:2: --target tofino: the rings need 320 entries (each ring once, and room for the largest to change), 192 more than its LbIngress.ring holds (128); the largest rings: "api" 128 slots (auto: 1 endpoint at 1 %), "web" 64 slots (ringSize); even at ringPrecision 0.25 the 1 service with ringSize auto do not fit beside the 64 entries of the services with an explicit ringSize: lower those, or set them to auto; or grow it`}},
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

// TestRingFitIsFinestThatFits: the precision ringFit proposes fits, and
// the next finer candidate does not (the search is over a monotone total).
func TestRingFitIsFinestThatFits(t *testing.T) {
	for _, tc := range []struct {
		services, eps, entries int
		fits                   bool
	}{
		{100, 8, 131072, true}, {1000, 8, 1 << 20, true}, {300, 3, 80000, true}, {300, 3, 300000, true},
		// The floor (32 slots an endpoint: 8192 slots for 250, 64 in all)
		// does not fit: 10 × 8192 + 8192, 300 × 128 + 128.
		{10, 250, 90111, false}, {300, 3, 38527, false}, {10, 250, 90112, true}, {300, 3, 38528, true},
	} {
		d, err := Load("lb.yaml", []byte(manyServices(tc.services, tc.eps, 0)))
		if err != nil {
			t.Fatal(err)
		}
		p, total, ok := ringFit(d.Config, TargetTofino, tc.entries)
		if !tc.fits {
			if ok {
				t.Errorf("%+v: ringFit = %g, %d entries; want no fit below the floor", tc, p, total)
			}
			continue
		}
		if !ok || total > tc.entries {
			t.Fatalf("%+v: ringFit = %g, %d, %v", tc, p, total, ok)
		}
		m := AutoRingSize(tc.eps, p)
		if PrecisionOf(tc.eps, m) > p {
			t.Errorf("%+v: at ringPrecision %g a ring of %d slots has precision %g", tc, p, m, PrecisionOf(tc.eps, m))
		}
		// Twice the ring (the next finer size) must not fit.
		if finer := 2 * m * 2 * tc.services; finer <= tc.entries && PrecisionOf(tc.eps, 2*m) >= DefaultRingPrecision {
			t.Errorf("%+v: ringPrecision %g gives %d slots, but %d slots would fit too", tc, p, m, 2*m)
		}
	}
}
