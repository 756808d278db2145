package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/internal/testenv"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
)

// replayBMv2Config has a TCP, a UDP and an L3_DEFAULT service, IPv4 and
// IPv6, and idle timeouts far above the trace's span and run time.
const replayBMv2Config = `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8:ffff::1"}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    connectionTrackingPolicy: {idleTimeoutSec: 3600}
    ringSize: 1021
    backends:
      - name: web-g
        endpoints: [{name: web-1, ip: 10.0.1.1}, {name: web-2, ip: 10.0.1.2}, {name: web-3, ip: 10.0.1.3}]
  - name: dns
    vip: 203.0.113.53
    protocol: UDP
    ports: ALL
    sessionAffinity: CLIENT_IP_PROTO
    connectionTrackingPolicy: {trackingMode: PER_SESSION, idleTimeoutSec: 3600}
    ringSize: 251
    backends:
      - name: dns-g
        endpoints: [{name: dns-1, ip: 10.0.2.1}, {name: dns-2, ip: 10.0.2.2}]
  - name: any6
    vip: "2001:db8:30::1"
    protocol: L3_DEFAULT
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {idleTimeoutSec: 3600}
    ringSize: 251
    backends:
      - name: any6-g
        endpoints: [{name: any6-1, ip: "2001:db8:30:1::1"}, {name: any6-2, ip: "2001:db8:30:1::2"}]
`

// TestReplayBMv2EqualsSimP4: `lbc replay --target bmv2` prints what
// `--target sim-p4` prints (the rule citations aside, which only the
// reference's explanation carries), line by line, summary included, for a
// generated trace with events. Every idle timeout exceeds the trace's
// span and the run, so the free clock is exact.
func TestReplayBMv2EqualsSimP4(t *testing.T) {
	testenv.SkipWithoutBMv2(t, bmv2live.Available(""), "targets/bmv2/live compares the same on targets/sim")
	dir := t.TempDir()
	cfg, tr := filepath.Join(dir, "lb.yaml"), filepath.Join(dir, "t.jsonl")
	if err := os.WriteFile(cfg, []byte(replayBMv2Config), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runLBC(t, "gen-trace", "-c", cfg, "--seed", "7", "--packets", "600", "--clients", "20", "--duration", "60", "--events", "-o", tr); err != nil {
		t.Fatal(err)
	}
	ref, _, err := runLBC(t, "replay", "-c", cfg, "--trace", tr, "--target", "sim-p4")
	if err != nil {
		t.Fatal(err)
	}
	got, stderr, err := runLBC(t, "replay", "-c", cfg, "--trace", tr, "--target", "bmv2", "--bmv2-clock", "free")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	rl, gl := strings.Split(strings.TrimSpace(ref), "\n"), strings.Split(strings.TrimSpace(got), "\n")
	if len(rl) != len(gl) {
		t.Fatalf("%d lines from sim-p4, %d from bmv2", len(rl), len(gl))
	}
	for i := range rl {
		var a, b map[string]any
		if err := json.Unmarshal([]byte(rl[i]), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(gl[i]), &b); err != nil {
			t.Fatal(err)
		}
		delete(a, "rule")
		delete(b, "rule")
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("line %d differs:\n  sim-p4: %s\n  bmv2:   %s", i+1, rl[i], gl[i])
		}
	}
	if data, _ := os.ReadFile(tr); len(data) == 0 {
		t.Fatal("empty trace")
	}
	t.Logf("%d output lines equal", len(rl))
}
