package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// runLBC runs the CLI in-process and returns stdout, stderr and the error.
func runLBC(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	app := newApp()
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	err := app.Run(append([]string{"lbc"}, args...))
	return out.String(), errw.String(), err
}

func TestCompileDefault(t *testing.T) {
	out, _, err := runLBC(t, "compile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"service web", "decision primary (R-ELIG-3d)", "25.00%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCompileJSON(t *testing.T) {
	out, _, err := runLBC(t, "compile", "-c", "../../examples/failover.yaml", "--health", "../../examples/failover-health.yaml", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Services []struct {
			Name     string   `json:"name"`
			Eligible []string `json:"eligible"`
			Decision string   `json:"decision"`
			Rule     string   `json:"rule"`
			Ring     struct {
				Size       int            `json:"size"`
				Auto       bool           `json:"auto"`
				ShareError *float64       `json:"shareError"`
				Counts     map[string]int `json:"counts"`
			} `json:"ring"`
		} `json:"services"`
		IR struct {
			Backends []json.RawMessage `json:"backends"`
		} `json:"ir"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	s := got.Services[0]
	if s.Decision != "failover" || s.Rule != "R-ELIG-3e" || strings.Join(s.Eligible, ",") != "vm-b1,vm-b2,vm-c1,vm-c2" {
		t.Fatalf("got %s %s %v", s.Decision, s.Rule, s.Eligible)
	}
	total := 0
	for _, n := range s.Ring.Counts {
		total += n
	}
	if total != s.Ring.Size || s.Ring.Size != 1024 || !s.Ring.Auto || s.Ring.ShareError == nil || *s.Ring.ShareError != 0 || len(got.IR.Backends) != 8 {
		t.Fatalf("ring counts sum %d of %d, %d backends", total, s.Ring.Size, len(got.IR.Backends))
	}
}

func TestValidateReportsAll(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lb.yaml")
	os.WriteFile(p, []byte("services:\n  - name: web\n    vip: nope\n    protocol: TCP\n    ports: [80]\n    ringSize: 12\n    backends: []\n"), 0o644)
	_, _, err := runLBC(t, "validate", "-c", p)
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{"3 problems", "lb.yaml:3: service \"web\": vip: \"nope\" is not an IP address", "lb.yaml:6: service \"web\": ringSize: 12 out of range", "lb.yaml:7: service \"web\": backends: no backend groups"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	out, _, err := runLBC(t, "validate", "-c", "../../examples/weighted.yaml")
	if err != nil || !strings.Contains(out, "ok (2 services, 5 endpoints)") {
		t.Fatalf("validate good: %q %v", out, err)
	}
}

// One warning per service (300 UDP services without R-FRAG-CFG's settings)
// is one line on stderr, not 300.
func TestCompileWarningsAggregated(t *testing.T) {
	var b strings.Builder
	b.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "  - {name: u%d, vip: 10.1.%d.%d, protocol: UDP, ports: [53], ringSize: 1021, backends: [{name: g, endpoints: [{name: e%d, ip: 10.2.%d.%d}]}]}\n",
			i, i/250, i%250+1, i, i/250, i%250+1)
	}
	p := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := runLBC(t, "compile", "-c", p)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "R-FRAG-CFG") || !strings.Contains(lines[0], "[the same for 299 more: service \"u1\"") {
		t.Fatalf("warnings:\n%s", stderr)
	}
}

// `lbc compile --format json` writes the IR's enumerations as names and
// MACs as strings (issue 36): no "proto": 6, "kind": 0, "affinity": 5,
// "track": 5, "encap": 0 or "mac": [2, 0, ...].
func TestCompileJSONNames(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lb.yaml")
	cfg := `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    backends:
      - name: a
        endpoints:
          - {name: a1, ip: 10.0.1.1}
  - name: dns
    vip: 203.0.113.53
    protocol: UDP
    ports: ALL
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {trackingMode: PER_SESSION}
    encapsulation: L2_DSR
    backends:
      - name: ig
        endpoints:
          - {name: ns1, ip: 10.0.2.1, mac: "02:00:00:00:00:01"}
`
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLBC(t, "compile", "-c", p, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	// A numeric value of one of these fields, however indented.
	numeric := regexp.MustCompile(`"(proto|kind|affinity|track|encap|op)":\s*[0-9]`)
	if m := numeric.FindAllString(out, -1); len(m) > 0 {
		t.Errorf("numbers where names belong: %q\n%s", m, out)
	}
	if m := regexp.MustCompile(`"mac":\s*\[`).FindString(out); m != "" {
		t.Errorf("a MAC as an array of bytes:\n%s", out)
	}
	var got struct {
		IR compiler.IR `json:"ir"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("the output does not read back: %v", err)
	}
	for _, want := range []string{`"proto": "tcp"`, `"proto": "udp"`, `"kind": "port"`, `"kind": "all-ports"`, `"encap": "L2_DSR"`,
		`"affinity": "CLIENT_IP"`, `"track": "CLIENT_IP_PORT_PROTO"`, `"mac": "02:00:00:00:00:01"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s", want)
		}
	}
	if b := got.IR.Backends; len(b) != 2 || b[1].MAC != (compiler.MAC{2, 0, 0, 0, 0, 1}) || got.IR.Services[1].Encap != compiler.EncapKindL2DSR {
		t.Errorf("read back: %+v", b)
	}
}

// TestCompileWeightedWithoutHealth (issue 36, round three): compiling a
// WEIGHTED_MAGLEV service without weights names the flag that gives them,
// not only "the health state", which no flag is called.
func TestCompileWeightedWithoutHealth(t *testing.T) {
	_, _, err := runLBC(t, "compile", "-c", "../../examples/weighted.yaml")
	if err == nil || !strings.Contains(err.Error(), `WEIGHTED_MAGLEV needs its weight; give it in the health state (a file for --health with the line api-1: {weight: 0..1000})`) {
		t.Fatalf("got %v", err)
	}
	if _, _, err := runLBC(t, "compile", "-c", "../../examples/weighted.yaml", "--health", "../../examples/weighted-health.yaml"); err != nil {
		t.Fatalf("with its health file: %v", err)
	}
}
