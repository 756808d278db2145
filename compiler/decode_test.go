package compiler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const goodConfig = `tunnel:
  sourceIPv4: 192.0.2.1
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, "8000-8002"]
    backends:
      - name: ig-a
        endpoints:
          - {name: vm-a1, ip: 10.0.1.1}
          - {name: vm-a2, ip: 10.0.1.2}
`

func TestLoadGood(t *testing.T) {
	d, err := Load("lb.yaml", []byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	s := d.Config.Services[0]
	if got := s.Ports.List; len(got) != 4 || got[0] != 80 || got[3] != 8002 {
		t.Fatalf("ports %v, want [80 8000 8001 8002]", got)
	}
	// ringSize auto: 2 endpoints at 1 % need 200 slots, a power of two: 256.
	if s.Ring() != 256 || !s.RingAuto() || s.IdleTimeout() != 60 || s.Affinity() != AffinityNone || s.TrackingMode() != TrackPerConnection {
		t.Fatalf("defaults not applied: ring %d idle %d affinity %s mode %s", s.Ring(), s.IdleTimeout(), s.Affinity(), s.TrackingMode())
	}
}

func TestLoadExamples(t *testing.T) {
	for _, f := range []string{"failover.yaml", "weighted.yaml", "udp-fragments.yaml"} {
		b, err := os.ReadFile("../examples/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Load(f, b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestLoadErrors checks that each bad value is reported with its line, its
// field path and what is allowed.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    []string // substrings, each must appear in one problem
		wantLen int
	}{
		{"unknown field with line", `services:
  - name: web
    vip: 203.0.113.10
    protocl: TCP
`, []string{
			`lb.yaml:4: service "web": protocl: unknown field (did you mean "protocol"?); known fields of a service: backends, connectionDraining,`,
			// The unknown field hides no other check.
			`lb.yaml:2: service "web": protocol: missing; one of TCP, UDP, L3_DEFAULT`,
			`lb.yaml:2: service "web": ports: missing`,
			`lb.yaml:2: service "web": backends: no backend groups`,
		}, 4},
		{"wrong type", `services:
  - name: web
    ringSize: big
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}]}]
`, []string{
			`lb.yaml:1: tunnel: sourceIPv4: missing; 1 IPv4 endpoint uses IP-in-IP (service "web": group "g": endpoint "x"), which needs an outer source address: set tunnel.sourceIPv4 at the top level`,
			`lb.yaml:3: service "web": ringSize: "big" is text, but this field wants auto or a whole number`,
		}, 2},
		{"every problem at once", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.300
    protocol: tcp
    ports: [80]
    sessionAffinity: CLIENT_IPS
    connectionTrackingPolicy:
      trackingMode: PER_SESSION
      connectionPersistenceOnUnhealthyBackends: ALWAYS_PERSIST
      idleTimeoutSec: 0
    failoverPolicy: {failoverRatio: 1.5}
    ringSize: 1000
    backends:
      - name: ig-a
        endpoints:
          - {name: vm-a1, ip: 10.0.1}
          - {name: vm-a1, ip: 10.0.1.2}
`, []string{
			`lb.yaml:4: service "web": vip: "203.0.113.300" is not an IP address`,
			`lb.yaml:5: service "web": protocol: "tcp" is not one of TCP, UDP, L3_DEFAULT (values are upper case: TCP)`,
			`lb.yaml:7: service "web": sessionAffinity: "CLIENT_IPS" is not one of`,
			`lb.yaml:10: service "web": connectionTrackingPolicy: connectionPersistenceOnUnhealthyBackends: ALWAYS_PERSIST is invalid with trackingMode PER_SESSION`,
			`lb.yaml:11: service "web": connectionTrackingPolicy: idleTimeoutSec: 0 out of range 1..86400`,
			`lb.yaml:12: service "web": failoverPolicy: failoverRatio: 1.5 out of range 0..1`,
			`lb.yaml:13: service "web": ringSize: 1000 is neither prime nor a power of two (R-MAGLEV-1); nearest usable: 1009 or 1024`,
			`lb.yaml:17: service "web": group "ig-a": endpoint "vm-a1": ip: "10.0.1" is not an IP address`,
			`lb.yaml:18: service "web": group "ig-a": endpoint "vm-a1": name: duplicate endpoint name in this service`,
		}, 9},
		{"weights and failover need their parts", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: api
    vip: 203.0.113.20
    protocol: TCP
    ports: ALL
    localityLbPolicy: WEIGHTED_MAGLEV
    backends:
      - name: pool
        failover: true
        endpoints: [{name: b1, ip: 10.1.0.1}]
`, []string{
			`healthCheck: missing; WEIGHTED_MAGLEV takes weights from an HTTP health check`,
			`lb.yaml:10: service "api": group "pool": failover: failover groups need a failoverPolicy`,
		}, 2},
		{"overlap", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: a
    vip: 203.0.113.1
    protocol: TCP
    ports: [80, 443]
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}]}]
  - name: b
    vip: 203.0.113.1
    protocol: TCP
    ports: [443]
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}]}]
  - name: c
    vip: 203.0.113.1
    protocol: UDP
    ports: [443]
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}]}]
`, []string{`lb.yaml:9: service "b": vip: 203.0.113.1 TCP 443 is also claimed by service "a"`}, 1},
		{"ring too small for backends", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: a
    vip: 203.0.113.1
    protocol: TCP
    ports: [80]
    ringSize: 13
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}, {name: y, ip: 10.0.0.2}]}]
`, []string{`ringSize: 13 is too small for 2 endpoints (need at least 10 slots each); use ringSize 23 or more`}, 1},
		{"tunnel source needed: once, with the count", `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: a
    vip: 2001:db8::1
    protocol: UDP
    ports: ALL
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {trackingMode: PER_SESSION}
    backends:
      - name: g
        endpoints: [{name: x, ip: 2001:db8:1::1}, {name: y, ip: 2001:db8:1::2}, {name: z, ip: 10.0.0.3}]
      - name: h
        endpoints: [{name: u, ip: 2001:db8:1::4}]
`, []string{`lb.yaml:1: tunnel: sourceIPv6: missing; 3 IPv6 endpoints use IP-in-IP (the first: service "a": group "g": endpoint "x"), which needs an outer source address: set tunnel.sourceIPv6 at the top level`}, 1},
		{"L2 DSR needs MACs", `services:
  - name: a
    vip: 203.0.113.1
    protocol: TCP
    ports: [80]
    encapsulation: L2_DSR
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}, {name: y, ip: 10.0.0.2, mac: "02:00:00:00:00:zz"}]}]
`, []string{`endpoint "x": mac: missing; L2_DSR rewrites the destination MAC`, `endpoint "y": mac: "02:00:00:00:00:zz" is not a 48-bit MAC`}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("lb.yaml", []byte(tt.yaml))
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("want Problems, got %v", err)
			}
			for _, w := range tt.want {
				found := false
				for _, p := range ps {
					if strings.Contains(p.String(), w) {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem contains %q; got:\n%s", w, ps.Error())
				}
			}
			if len(ps) != tt.wantLen {
				t.Errorf("%d problems, want %d:\n%s", len(ps), tt.wantLen, ps.Error())
			}
		})
	}
}

// TestRLIMIT: each R-LIMIT bound (250 endpoints, 50 primary and 50
// failover groups per service; 4096 services per file) holds at its
// default, refuses one more with the error naming the limit, and moves with
// limits:.
func TestRLIMIT(t *testing.T) {
	// service writes one service with the given groups of one endpoint
	// each (endpoints: one group of that many).
	service := func(b *strings.Builder, name string, vip, endpoints, primary, failover int) {
		fmt.Fprintf(b, "  - name: %s\n    vip: 203.0.%d.%d\n    protocol: TCP\n    ports: [80]\n", name, vip>>8, vip&255)
		if failover > 0 {
			b.WriteString("    failoverPolicy: {failoverRatio: 0.5}\n")
		}
		b.WriteString("    backends:\n")
		ip := 0
		endpoint := func() string {
			ip++
			return fmt.Sprintf("{name: e%d, ip: 10.%d.%d.%d}", ip, vip>>8, ip>>8, ip&255)
		}
		if endpoints > 0 {
			b.WriteString("      - name: g\n        endpoints:\n")
			for i := 0; i < endpoints; i++ {
				fmt.Fprintf(b, "          - %s\n", endpoint())
			}
		}
		for i := 0; i < primary; i++ {
			fmt.Fprintf(b, "      - {name: p%d, endpoints: [%s]}\n", i, endpoint())
		}
		for i := 0; i < failover; i++ {
			fmt.Fprintf(b, "      - {name: f%d, failover: true, endpoints: [%s]}\n", i, endpoint())
		}
	}
	one := func(endpoints, primary, failover int) func(*strings.Builder) {
		return func(b *strings.Builder) { service(b, "big", 1, endpoints, primary, failover) }
	}
	many := func(n int) func(*strings.Builder) {
		return func(b *strings.Builder) {
			for i := 0; i < n; i++ {
				service(b, fmt.Sprintf("s%d", i), i, 1, 0, 0)
			}
		}
	}
	for _, tt := range []struct {
		name          string
		atLimit, over func(*strings.Builder)
		raise, want   string
	}{
		{"endpoints", one(250, 0, 0), one(251, 0, 0), "maxEndpoints: 300", "service \"big\": backends: 251 endpoints, over the limit of 250 (R-LIMIT); raise limits.maxEndpoints"},
		{"primary groups", one(0, 50, 0), one(0, 51, 0), "maxPrimaryGroups: 60", "service \"big\": backends: 51 primary groups, over the limit of 50 (R-LIMIT); raise limits.maxPrimaryGroups"},
		{"failover groups", one(0, 1, 50), one(0, 1, 51), "maxFailoverGroups: 60", "service \"big\": backends: 51 failover groups, over the limit of 50 (R-LIMIT); raise limits.maxFailoverGroups"},
		{"services", many(4096), many(4097), "maxServices: 5000", "services: 4097 services, over the limit of 4096 (R-LIMIT); raise limits.maxServices"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := func(limits string, body func(*strings.Builder)) []byte {
				var b strings.Builder
				b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\n" + limits + "services:\n")
				body(&b)
				return []byte(b.String())
			}
			if _, err := Load("lb.yaml", cfg("", tt.atLimit)); err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			_, err := Load("lb.yaml", cfg("", tt.over))
			var ps Problems
			if !errors.As(err, &ps) || len(ps) != 1 || !strings.Contains(ps[0].String(), tt.want) {
				t.Fatalf("one over the limit: want one problem %q, got %v", tt.want, err)
			}
			if _, err := Load("lb.yaml", cfg("limits: {"+tt.raise+"}\n", tt.over)); err != nil {
				t.Fatalf("raised limit still refused: %v", err)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRFRAGCFG_Warning(t *testing.T) {
	cfg := `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: u
    vip: 203.0.113.1
    protocol: UDP
    ports: [53]
    backends: [{name: g, endpoints: [{name: x, ip: 10.0.0.1}]}]
`
	d, err := Load("lb.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0].String(), "R-FRAG-CFG") {
		t.Fatalf("want one R-FRAG-CFG warning, got %v", d.Warnings)
	}
	b, _ := os.ReadFile("../examples/udp-fragments.yaml")
	if d, err := Load("x", b); err != nil || len(d.Warnings) != 0 {
		t.Fatalf("the recommended configuration warns: %v %v", err, d.Warnings)
	}
}

func TestLoadState(t *testing.T) {
	d, _ := Load("lb.yaml", []byte(goodConfig))
	st, err := LoadState("h.yaml", []byte("vm-a1: {healthy: false}\nvm-a2: {weight: 7}\n"), d.Config)
	if err != nil {
		t.Fatal(err)
	}
	if st.IsHealthy("vm-a1") || !st.IsHealthy("vm-a2") || !st.IsHealthy("absent") {
		t.Fatal("health read wrong")
	}
	if w, ok := st.WeightOf("vm-a2"); !ok || w != 7 {
		t.Fatal("weight read wrong")
	}
	// Every problem at once: an unknown field or a bad value hides no
	// other check.
	_, err = LoadState("h.yaml", []byte("vm-a1: {weight: 1200}\nvm-zz: {healthy: true}\nvm-a2: {helthy: true, weight: heavy}\n"), d.Config)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want Problems, got %v", err)
	}
	want := []string{
		"h.yaml:1: vm-a1: weight: 1200 out of range 0..1000",
		"h.yaml:2: vm-zz: no endpoint of that name",
		`h.yaml:3: vm-a2: helthy: unknown field (did you mean "healthy"?); known fields of an endpoint's state`,
		`h.yaml:3: vm-a2: weight: "heavy" is text, but this field wants a whole number`,
	}
	if len(ps) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(ps), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(ps[i].String(), w) {
			t.Errorf("problem %d: %q, want %q…", i, ps[i], w)
		}
	}
}

// FuzzLoad: no input makes the decoder panic; bad input is Problems.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(goodConfig))
	for _, n := range []string{"failover.yaml", "weighted.yaml", "udp-fragments.yaml"} {
		if b, err := os.ReadFile("../examples/" + n); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("services: [{ports: ALL}]"))
	f.Add([]byte("services:\n - ports: [\"9-1\"]\n"))
	// Every bad-input case of testdata/problems, and shapes the lenient
	// decoder walks itself: aliases, merges, duplicate keys, tags, numbers
	// beyond 64 bits, wrong kinds at each level.
	if files, _ := filepath.Glob("testdata/problems/*.yaml"); len(files) > 0 {
		for _, n := range files {
			if b, err := os.ReadFile(n); err == nil {
				f.Add(b)
			}
		}
	}
	for _, s := range []string{
		"services: [{ports: !!binary, name: a, name: b}]",
		"tunnel: &t {sourceIPv4: 192.0.2.1}\nlimits: *t\nservices: [{<<: *t, vip: 0.0.0.0}]",
		"services: [{connectionTrackingPolicy: {idleTimeoutSec: 9223372036854775808, sessionAffinity: NONE}}]",
		"services: [{ringSize: -1e400, ports: [-80, 1e3, 0x50]}]",
		"services: {a: 1}\n---\nservices: []",
		"services: [[[]]]\ntunnel: 5\nlimits: {maxServices: -1}",
		"? [a]\n: 1\nservices: [{backends: [{endpoints: [7, {ip: 255.255.255.255}]}]}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Load("fuzz.yaml", data)
		if err != nil {
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error is not Problems: %v", err)
			}
			return
		}
		// A configuration that validates must compile.
		st := State{}
		for _, s := range d.Config.Services {
			for _, g := range s.Backends {
				for _, e := range g.Endpoints {
					st.SetWeight(e.Name, 1)
				}
			}
		}
		if _, err := Compile(Input{Config: d.Config, State: st}); err != nil {
			t.Fatalf("valid configuration does not compile: %v", err)
		}
	})
}

// A huge value is echoed by its start and size, never whole: a 4 MB name
// (or field name, or VIP) in every message would bury the problems.
func TestLoadClipsEchoedValues(t *testing.T) {
	huge := strings.Repeat("a", 4<<20)
	cfg := fmt.Sprintf(`services:
  - name: %s
    vip: %s
    protocol: %s
    ports: [%s]
    ? %s
    : 1
    backends: [{name: g, endpoints: [{name: %s, ip: 10.0.0.1}, {name: %s, ip: 10.0.0.2}]}]
`, huge, huge, huge, huge, huge, huge, huge)
	_, err := Load("lb.yaml", []byte(cfg))
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want Problems, got %v", err)
	}
	if len(ps) < 7 {
		t.Errorf("%d problems, want every one (name, vip, protocol, ports, unknown field, endpoint names, tunnel):\n%.3000s", len(ps), ps.Error())
	}
	for _, p := range ps {
		if s := p.String(); len(s) > 600 || !strings.Contains(s, fmt.Sprintf("(%d bytes)", len(huge))) && strings.Contains(s, "aaaa") {
			t.Errorf("problem of %d bytes: %.300s", len(s), s)
		}
	}
}

// Summary: one warning per service becomes one line naming how many more
// have it; the lines are capped.
func TestProblemsSummary(t *testing.T) {
	var ps Problems
	for i := 0; i < 300; i++ {
		ps = append(ps, Problem{File: "lb.yaml", Line: 10 + i, Path: fmt.Sprintf("service %q", fmt.Sprint("u", i)), Msg: "same"})
	}
	for i := 0; i < 30; i++ {
		ps = append(ps, Problem{File: "lb.yaml", Line: 400 + i, Path: "x", Msg: fmt.Sprint("different ", i)})
	}
	got := ps.Summary(5)
	want := []string{
		`lb.yaml:10: service "u0": same [the same for 299 more: service "u1" (line 11), service "u2" (line 12), service "u3" (line 13), …]`,
		"lb.yaml:400: x: different 0",
		"lb.yaml:401: x: different 1",
		"lb.yaml:402: x: different 2",
		"lb.yaml:403: x: different 3",
		"… 26 more not shown (330 in all)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
