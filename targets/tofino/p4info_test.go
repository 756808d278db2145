package tofino

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lbc-dev/lbc/runtime"
)

const (
	tnaSource = "../../p4/tna/lb.p4"
	tnaP4Info = "../../p4/tna/build/lb.p4info.txtpb"
)

// p4testTNAArgs returns p4test's flags for the TNA program, or why p4test
// cannot compile it: a p4c built with the Tofino back end
// (-DENABLE_TOFINO=ON, docs/toolchain.md) finds tna.p4 in its own
// p4include; the TNA_INCLUDE environment variable (as for `make p4-tna`)
// names another directory holding it.
func p4testTNAArgs(t *testing.T, p4test string) ([]string, error) {
	args := []string{"-D__TARGET_TOFINO__=1"}
	if d := os.Getenv("TNA_INCLUDE"); d != "" {
		args = append(args, "-I", d)
	}
	probe := filepath.Join(t.TempDir(), "probe.p4")
	if err := os.WriteFile(probe, []byte("#include <tna.p4>\n"), 0o644); err != nil {
		return nil, err
	}
	if msg, err := exec.Command(p4test, append(args, probe)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s finds no tna.p4 (%v: %s); use a p4c built with -DENABLE_TOFINO=ON or set TNA_INCLUDE to p4c's backends/tofino/bf-p4c/p4include", p4test, err, bytes.TrimSpace(msg))
	}
	return args, nil
}

// TestP4testAcceptsTNAProgram: the open-source p4c frontend accepts
// p4/tna/lb.p4 for Tofino 1, and the committed P4Info is what it produces
// (`make p4-tna` regenerates it).
func TestP4testAcceptsTNAProgram(t *testing.T) {
	p4test, err := exec.LookPath("p4test")
	if err != nil {
		t.Skipf("p4test not on PATH (%v): install p4c to check p4/tna/lb.p4; the committed P4Info is still used by the other tests", err)
	}
	args, err := p4testTNAArgs(t, p4test)
	if err != nil {
		t.Skipf("%v", err)
	}
	out := filepath.Join(t.TempDir(), "lb.p4info.txtpb")
	// p4test runs from the repository root, as `make p4-tna` does.
	cmd := exec.Command(p4test, append(args, "--p4runtime-files", out, "p4/tna/lb.p4")...)
	cmd.Dir = "../.."
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("p4test rejects p4/tna/lb.p4: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(tnaP4Info)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("p4/tna/build/lb.p4info.txtpb differs from what p4test produces; run `make p4-tna` and commit")
	}
}

// TestTNAP4InfoSharesNames: every table, action and parameter the IR
// translation writes exists in the TNA P4Info with the v1model program's
// names and widths (idle_ticks is this target's own; the backend's
// deadline is as wide as each program's clock).
func TestTNAP4InfoSharesNames(t *testing.T) {
	tna, err := runtime.LoadP4Info(tnaP4Info)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := runtime.LoadP4Info("../../p4/build/lb.p4info.txtpb")
	if err != nil {
		t.Skipf("v1model P4Info not built (%v); run make p4", err)
	}
	for _, tb := range v1.Info.Tables {
		alias := tb.Preamble.Alias
		other, err := tna.Table(alias)
		if err != nil {
			t.Errorf("table %s: %v", alias, err)
			continue
		}
		if len(other.MatchFields) != len(tb.MatchFields) {
			t.Errorf("table %s: %d match fields in TNA, %d in v1model", alias, len(other.MatchFields), len(tb.MatchFields))
		}
		for i, f := range tb.MatchFields {
			if i < len(other.MatchFields) && (other.MatchFields[i].Name != f.Name || other.MatchFields[i].Bitwidth != f.Bitwidth || other.MatchFields[i].GetMatchType() != f.GetMatchType()) {
				t.Errorf("table %s field %d: TNA %v, v1model %v", alias, i, other.MatchFields[i], f)
			}
		}
	}
	for _, a := range v1.Info.Actions {
		other, err := tna.Action(a.Preamble.Alias)
		if err != nil {
			t.Errorf("action %s: %v", a.Preamble.Alias, err)
			continue
		}
		if len(other.Params) != len(a.Params) {
			t.Errorf("action %s: %d params in TNA, %d in v1model", a.Preamble.Alias, len(other.Params), len(a.Params))
			continue
		}
		for i, p := range a.Params {
			if a.Preamble.Alias == "set_backend" && p.Name == "deadline" && other.Params[i].Name == p.Name {
				// The one width that differs: each program holds the
				// deadline in its own clock (lb.p4: 48-bit µs; TNA: the
				// 32-bit tick), which the targets map it onto.
				if other.Params[i].Bitwidth != 32 || p.Bitwidth != 48 {
					t.Errorf("set_backend deadline: TNA %d bits, v1model %d; want 32 (ticks) and 48 (µs)", other.Params[i].Bitwidth, p.Bitwidth)
				}
				continue
			}
			if other.Params[i].Name != p.Name || other.Params[i].Bitwidth != p.Bitwidth {
				t.Errorf("action %s param %d: TNA %s/%d, v1model %s/%d", a.Preamble.Alias, i, other.Params[i].Name, other.Params[i].Bitwidth, p.Name, p.Bitwidth)
			}
		}
	}
	if _, err := tna.Table("idle_ticks"); err != nil {
		t.Error(err)
	}
}
