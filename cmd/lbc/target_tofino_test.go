package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	"google.golang.org/protobuf/encoding/prototext"
)

// lbc push --target tofino against the in-process P4Runtime server loaded
// through Open with the TNA P4Info and a packed device config: a prime
// ring is refused naming the service, the default (auto) ring is pushed
// with its idle_ticks row, a second push writes nothing, status reads back.
func TestPushTofino(t *testing.T) {
	srv := startP4RT(t)
	args := []string{"--target", "tofino", "--addr", srv.Addr(), "--p4info", "../../p4/tna/build/lb.p4info.txtpb",
		"--device-config", "../../targets/tofino/testdata/bfp4c/lb.conf", "--device-config-format", "stratum"}

	data, err := os.ReadFile("../../examples/failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	prime := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(prime, []byte(strings.Replace(string(data), "    sessionAffinity: NONE\n", "    sessionAffinity: NONE\n    ringSize: 65537\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runLBC(t, append([]string{"push", "-c", prime}, args...)...)
	if err == nil || !strings.Contains(err.Error(), `service "web"`) || !strings.Contains(err.Error(), "ringSize: 65536") {
		t.Fatalf("push of a 65537-slot ring: %v, want the power-of-two error naming web", err)
	}
	// The example as it is: ringSize auto picks 1024 slots, a power of two.
	cfg := "../../examples/failover.yaml"
	push := func() string {
		t.Helper()
		out, errw, err := runLBC(t, append([]string{"push", "-c", cfg, "--fallback-port", "3"}, args...)...)
		if err != nil {
			t.Fatalf("push: %v\n%s", err, errw)
		}
		return out
	}
	out := push()
	// 2059 table rows of the diff plus the idle_ticks row of 60 s.
	if !strings.Contains(out, "ring: 1024 insert") || !strings.Contains(out, "1036 writes") {
		t.Fatalf("first push output:\n%s", out)
	}
	if out := push(); !strings.Contains(out, "up to date (0 writes)") {
		t.Fatalf("second push output:\n%s", out)
	}
	st, errw, err := runLBC(t, append([]string{"status"}, args[:4]...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, errw)
	}
	if !strings.Contains(st, "web") || !strings.Contains(st, "vm-a1") || !strings.Contains(st, "counters:") {
		t.Fatalf("status output:\n%s", st)
	}
}

// tofinoPushTwo starts the in-process P4Runtime server and pushes two
// services with power-of-two rings through `lbc push --target tofino` with
// the given P4Info (and the packed test device config); it returns the
// server and the flags that reach it.
func tofinoPushTwo(t *testing.T, p4info string) (*p4rt.Server, []string) {
	t.Helper()
	srv := startP4RT(t)
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(`tunnel:
  sourceIPv4: 192.0.2.1
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    ringSize: 1024
    backends:
      - name: pool
        endpoints:
          - {name: web-1, ip: 10.0.1.1}
          - {name: web-2, ip: 10.0.1.2}
  - name: api
    vip: 203.0.113.20
    protocol: TCP
    ports: [8443]
    ringSize: 1024
    backends:
      - name: pool
        endpoints:
          - {name: api-1, ip: 10.0.2.1}
          - {name: api-2, ip: 10.0.2.2}
          - {name: api-3, ip: 10.0.2.3}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	target := []string{"--target", "tofino", "--addr", srv.Addr()}
	if _, errw, err := runLBC(t, append(append([]string{"push", "-c", cfg, "--fallback-port", "3"}, target...),
		"--p4info", p4info, "--device-config", "../../targets/tofino/testdata/bfp4c/lb.conf", "--device-config-format", "stratum")...); err != nil {
		t.Fatalf("push with %s: %v\n%s", p4info, err, errw)
	}
	return srv, target
}

// lbc status --target tofino reads the TNA program's counters from a switch
// running the committed Tofino 1 P4Info (p4c-barefoot with
// --p4runtime-force-std-externs: the Counter externs are P4Runtime
// counters): per service its packets, bytes, new connections and the ICMP
// errors that quoted no tracked flow (R-CT-3), per backend its new
// connections, and the fallback punts and drops by reason, each equal to
// the cell the switch holds at the ID's index; cells of IDs the switch does
// not hold are not reported. Read twice, so that a second status sees the
// cells move. The P4Info with ct_refused is the committed one with that
// counter added, as the program declares it since issue 22 (R-CT-CAP): its
// one cell is printed as ct_refused; without it there is no such line.
func TestStatusTofinoCounters(t *testing.T) {
	info, err := runtime.LoadP4Info("../../p4/tna/build/lb.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	withRefused := "../../p4/tna/build/lb.p4info.txtpb"
	if _, err := info.Counter("ct_refused"); err != nil {
		info.Info.Counters = append(info.Info.Counters, &p4configv1.Counter{
			Preamble: &p4configv1.Preamble{Id: 0x12ffff01, Name: "LbIngress.ct_refused", Alias: "ct_refused"},
			Spec:     &p4configv1.CounterSpec{Unit: p4configv1.CounterSpec_PACKETS}, Size: 1})
		b, err := prototext.Marshal(info.Info)
		if err != nil {
			t.Fatal(err)
		}
		withRefused = filepath.Join(t.TempDir(), "ct-refused.p4info.txtpb")
		if err := os.WriteFile(withRefused, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p4info := range []string{"../../p4/tna/build/lb.p4info.txtpb", withRefused} {
		t.Run(filepath.Base(p4info), func(t *testing.T) { statusTofinoCounters(t, p4info) })
	}
}

func statusTofinoCounters(t *testing.T, p4info string) {
	srv, target := tofinoPushTwo(t, p4info)
	info, err := runtime.LoadP4Info(p4info)
	if err != nil {
		t.Fatal(err)
	}
	_, refuses := info.Counter("ct_refused")
	status := func(format string) (string, error) {
		t.Helper()
		out, errw, err := runLBC(t, append([]string{"status", "--format", format}, target...)...)
		if err != nil {
			return "", fmt.Errorf("%w\n%s", err, errw)
		}
		return out, nil
	}
	out, err := status("json")
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var st struct {
		IR       *compiler.IR `json:"ir"`
		Counters *counters    `json:"counters"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --format json: %v\n%s", err, out)
	}
	if len(st.IR.Services) != 2 || len(st.IR.Backends) != 5 {
		t.Fatalf("status reads %d services, %d backends; pushed 2 and 5", len(st.IR.Services), len(st.IR.Backends))
	}
	if c := st.Counters; c == nil || c.Global["fallback"] != 0 || len(c.Services) != 2 || c.Services[st.IR.Services[0].ID]["packets"] != 0 {
		t.Fatalf("counters of an idle switch: %+v", c)
	}

	for round := int64(1); round <= 2; round++ {
		want := &counters{Global: map[string]uint64{}, Services: map[uint32]map[string]uint64{}, Backends: map[uint32]map[string]uint64{}}
		set := func(name string, index, packets, bytes int64) {
			t.Helper()
			if err := srv.SetCounter(name, index, packets, bytes); err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range st.IR.Services {
			n := round*1000 + int64(i)*100
			set("service_packets", int64(s.ID), n+1, (n+1)*1500)
			set("service_new_conns", int64(s.ID), n+2, 0)
			set("service_icmp_error_misses", int64(s.ID), n+3, 0)
			want.Services[s.ID] = map[string]uint64{"packets": uint64(n + 1), "bytes": uint64((n + 1) * 1500), "new": uint64(n + 2), "icmp_error_misses": uint64(n + 3)}
		}
		for i, b := range st.IR.Backends {
			n := round*1000 + 500 + int64(i)
			set("backend_new_conns", int64(b.ID), n, 0)
			want.Backends[b.ID] = map[string]uint64{"new": uint64(n)}
		}
		// Cells no service or backend of the switch indexes.
		set("service_packets", 900, 77, 7700)
		set("service_icmp_error_misses", 901, 78, 0)
		set("backend_new_conns", 9000, 79, 0)
		set("fallback_packets", 0, round*40+2, round*4200)
		want.Global["fallback"] = uint64(round*40 + 2)
		for idx, reason := range map[int64]string{0: "drop:no-backends", 1: "drop:malformed", 2: "drop:no-route", 3: "drop:no-service", 4: "drop:no-fallback-port", 7: "drop:reason-7"} {
			set("drops", idx, round*10+idx, 0)
			want.Global[reason] = uint64(round*10 + idx)
		}
		if refuses == nil {
			set("ct_refused", 0, round*30+5, 0)
			want.Global["ct_refused"] = uint64(round*30 + 5)
		}

		out, err := status("json")
		if err != nil {
			t.Fatalf("round %d: status: %v", round, err)
		}
		st.Counters = nil
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("round %d: status --format json: %v\n%s", round, err, out)
		}
		if !reflect.DeepEqual(st.Counters, want) {
			t.Errorf("round %d: status --format json counters\n%+v\nwant what the switch holds\n%+v", round, st.Counters, want)
		}

		text, err := status("text")
		if err != nil {
			t.Fatalf("round %d: status: %v", round, err)
		}
		var lines []string
		for _, s := range st.IR.Services {
			c := want.Services[s.ID]
			lines = append(lines, fmt.Sprintf("service %s (id %d)", s.Name, s.ID),
				fmt.Sprintf("  packets %d, bytes %d, new connections %d, ICMP errors without a connection %d\n", c["packets"], c["bytes"], c["new"], c["icmp_error_misses"]))
		}
		for k, v := range want.Global {
			lines = append(lines, fmt.Sprintf("  %-22s %d\n", k, v))
		}
		for _, l := range lines {
			if !strings.Contains(text, l) {
				t.Errorf("round %d: status lacks %q:\n%s", round, l, text)
			}
		}
		for _, b := range st.IR.Backends {
			var row []string
			for _, l := range strings.Split(text, "\n") {
				if f := strings.Fields(l); len(f) > 0 && f[0] == b.Name {
					row = f
				}
			}
			if len(row) == 0 || row[len(row)-1] != fmt.Sprint(want.Backends[b.ID]["new"]) {
				t.Errorf("round %d: backend %s row %q, want %d new connections last:\n%s", round, b.Name, row, want.Backends[b.ID]["new"], text)
			}
		}
	}
}

// A switch whose P4Info lists no P4Runtime counters: lbc status --target
// tofino fails saying so and what to do, in text and JSON, instead of
// printing empty counters. The P4Info p4c-barefoot writes without
// --p4runtime-force-std-externs (runtime/testdata) names its Counter
// externs; one with neither asks whether it is the TNA program's.
func TestStatusTofinoNoStdCounters(t *testing.T) {
	info, err := runtime.LoadP4Info("../../p4/tna/build/lb.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	info.Info.Counters = nil
	b, err := prototext.Marshal(info.Info)
	if err != nil {
		t.Fatal(err)
	}
	stripped := filepath.Join(t.TempDir(), "no-counters.p4info.txtpb")
	if err := os.WriteFile(stripped, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, p4info string
		want         []string
	}{
		{"barefoot.Counter externs", "../../runtime/testdata/tofino-barefoot-externs.p4info.txtpb", []string{
			"lists no P4Runtime counters",
			"service_packets, service_new_conns, service_icmp_error_misses, backend_new_conns, fallback_packets, drops, ct_refused as barefoot.Counter externs",
			"without --p4runtime-force-std-externs", "make p4-tna"}},
		{"no counters at all", stripped, []string{"lists no P4Runtime counters", "--p4runtime-force-std-externs", "make p4-tna"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, target := tofinoPushTwo(t, c.p4info)
			for _, format := range []string{"text", "json"} {
				out, _, err := runLBC(t, append([]string{"status", "--format", format}, target...)...)
				if err == nil {
					t.Fatalf("status --format %s: no error; printed\n%s", format, out)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("status --format %s: %v\nwant it to say %q", format, err, w)
					}
				}
				if strings.Contains(err.Error(), "CounterEntry:") || strings.Contains(err.Error(), "counters: counters:") {
					t.Errorf("status --format %s: %v: the hint for other read errors, or counters: twice", format, err)
				}
				if out != "" {
					t.Errorf("status --format %s printed before failing:\n%s", format, out)
				}
			}
		})
	}
}
