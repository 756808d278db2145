package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// TestReplayOversizeXDPEqualsSim (issue 24 §3): `lbc gen-trace --oversize`
// replayed with `lbc replay` gives every line the same outcome on --target
// sim and --target xdp (rule citations aside, which only the reference
// gives), R-MTU's too-big answers and their MTU included; the XDP replay
// used to check no MTU at all ("tooBig":0 against the model's 189).
func TestReplayOversizeXDPEqualsSim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--target xdp runs packets through the kernel (BPF_PROG_TEST_RUN): needs root (CI runs as root)")
	}
	const cfg = "../../examples/udp-fragments.yaml"
	tr := filepath.Join(t.TempDir(), "oversize.jsonl")
	if _, errw, err := runLBC(t, "gen-trace", "-c", cfg, "--oversize", "-o", tr); err != nil {
		t.Fatalf("gen-trace: %v\n%s", err, errw)
	}
	lines := map[string][]map[string]any{}
	for _, target := range []string{"sim", "xdp"} {
		out, errw, err := runLBC(t, "replay", "-c", cfg, "--trace", tr, "--target", target)
		if err != nil {
			t.Fatalf("replay --target %s: %v\n%s", target, err, errw)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("replay --target %s: %v: %s", target, err, l)
			}
			delete(m, "rule")
			lines[target] = append(lines[target], m)
		}
	}
	s, x := lines["sim"], lines["xdp"]
	if len(s) != len(x) {
		t.Fatalf("sim printed %d lines, xdp %d", len(s), len(x))
	}
	tooBig := 0
	for i := range s {
		if !reflect.DeepEqual(s[i], x[i]) {
			t.Fatalf("line %d differs:\n  sim: %v\n  xdp: %v", i+1, s[i], x[i])
		}
		if s[i]["action"] == "too-big" {
			tooBig++
			if s[i]["mtu"] != float64(compiler.DefaultMTU-20) {
				t.Errorf("too-big answer with mtu %v, want %d (compiler.DefaultMTU less 20 bytes of outer IPv4)", s[i]["mtu"], compiler.DefaultMTU-20)
			}
		}
	}
	sum, _ := s[len(s)-1]["summary"].(map[string]any)
	if tooBig == 0 || sum["tooBig"] != float64(tooBig) {
		t.Fatalf("%d lines answered too big, summary says %v: the oversize packets were not compared", tooBig, sum["tooBig"])
	}
}
