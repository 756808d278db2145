package tofino

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

const (
	tnaSource = "../../p4/tna/lb.p4"
	tnaP4Info = "../../p4/tna/build/lb.p4info.txtpb"
)

// p4testTNAArgs returns p4test's flags for the TNA program, or why p4test
// cannot compile it: a p4c built with the Tofino back end
// (-DENABLE_TOFINO=ON, docs/toolchain.md) finds tna.p4 in its own
// p4include; the TNA_INCLUDE environment variable
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

// TestP4testAcceptsTNAProgram: the open-source p4c front and mid end
// accept p4/tna/lb.p4 for Tofino 1 (tna.p4) and Tofino 2 (t2na.p4) (the
// committed P4Info is the Tofino back end's: TestTofinoCompilerOutputs).
func TestP4testAcceptsTNAProgram(t *testing.T) {
	p4test, err := exec.LookPath("p4test")
	if err != nil {
		t.Skipf("p4test not on PATH (%v): install p4c to check p4/tna/lb.p4", err)
	}
	args, err := p4testTNAArgs(t, p4test)
	if err != nil {
		t.Skipf("%v", err)
	}
	for _, target := range []string{"1", "2"} {
		a := append([]string{"-D__TARGET_TOFINO__=" + target}, args[1:]...)
		cmd := exec.Command(p4test, append(a, "p4/tna/lb.p4")...)
		cmd.Dir = "../.."
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("p4test rejects p4/tna/lb.p4 for Tofino %s: %v\n%s", target, err, msg)
		}
	}
}

// tnaCompilerVersion is `p4c-barefoot --version` as the Makefile puts it in
// a summary's title: lines joined by spaces, trailing spaces dropped. The
// compiler names itself by its argv[0], which the Makefile's default
// (P4C_BAREFOOT = p4c-barefoot, found on PATH) makes the bare name.
func tnaCompilerVersion(bf string) (string, error) {
	cmd := exec.Command(bf, "--version")
	cmd.Args[0] = "p4c-barefoot"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", bf, err, out)
	}
	return strings.TrimRight(strings.ReplaceAll(string(out), "\n", " "), " "), nil
}

// TestTofinoCompilerOutputs: with the Tofino back end of p4c on PATH
// (p4c-barefoot and bfas, docs/toolchain.md), p4/tna/lb.p4 compiles for
// Tofino 1 and Tofino 2 with the flags of `make p4-tna` and fits each
// (bfas assembles it), and the committed outputs are the compiler's: the
// P4Info (std externs: counters and registers are P4Runtime's),
// bf-rt.json and context.json, compared by SameCompilerOutput (order kept
// where it means something; context.json without its date, run ID and
// compiler version), and the resource summary, byte for byte with the
// title the Makefile writes. As in the Makefile, each target is compiled
// twice: release (P4Info, bf-rt.json, the assembled context.json) and -g
// (the report the summary is made from, pipe/logs; -g also changes the
// .bfa, so its context.json is not the release one). The Tofino 1 release
// output directory is then a device config lbc packs and pushes.
func TestTofinoCompilerOutputs(t *testing.T) {
	// Four compiles take about 10 minutes on 2 cores: more than go test's
	// default per package. make check-generated-p4-tna (in .ci/run's
	// generated-files step) compares the same outputs with a fresh compile.
	if os.Getenv("LBC_TOFINO_COMPILE") != "1" {
		t.Skip("compiling p4/tna takes about 10 minutes: set LBC_TOFINO_COMPILE=1 (and go test -timeout 30m) to run it; make check-generated-p4-tna compares the committed outputs with a fresh compile")
	}
	bf, err := exec.LookPath("p4c-barefoot")
	if err != nil {
		t.Skipf("p4c-barefoot not on PATH (%v): the committed Tofino outputs are checked where the compiler is built (docs/toolchain.md)", err)
	}
	bfas, err := exec.LookPath("bfas")
	if err != nil {
		t.Skipf("bfas not on PATH (%v): it comes with p4c-barefoot (docs/toolchain.md)", err)
	}
	version, err := tnaCompilerVersion(bf)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir() // the parent's: the Tofino 1 output is pushed below
	for _, c := range Compiles {
		ok := t.Run(c.Target, func(t *testing.T) {
			out := filepath.Join(root, c.Target)
			cmd := exec.Command(bf, "--target", c.Target, "--arch", c.Arch, "-o", out,
				"--p4runtime-files", filepath.Join(out, "lb.p4info.txtpb"), "--p4runtime-force-std-externs",
				"--bf-rt-schema", filepath.Join(out, "bf-rt.json"), "p4/tna/lb.p4")
			cmd.Dir = "../.."
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("p4c-barefoot rejects p4/tna/lb.p4 for %s: %v\n%s", c.Target, err, msg)
			}
			logs := filepath.Join(root, c.Target+"-g")
			cmd = exec.Command(bf, "--target", c.Target, "--arch", c.Arch, "-g", "-o", logs, "p4/tna/lb.p4")
			cmd.Dir = "../.."
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("p4c-barefoot -g rejects p4/tna/lb.p4 for %s: %v\n%s", c.Target, err, msg)
			}
			title := fmt.Sprintf("p4/tna/lb.p4 for %s (%s), default sizes, %s", c.Target, c.Arch, version)
			var summary bytes.Buffer
			if err := WriteResources(&summary, filepath.Join(logs, "pipe", "logs"), title, c.Stages); err != nil {
				t.Fatal(err)
			}
			stagesLine, _, _ := strings.Cut(strings.TrimPrefix(summary.String(), title+"\n"), "\n")
			if msg, err := exec.Command(bfas, "-o", filepath.Join(out, "pipe"), filepath.Join(out, "pipe", "lb.bfa")).CombinedOutput(); err != nil {
				why := string(bytes.TrimSpace(msg))
				if i := strings.Index(why, "supports up to"); i >= 0 {
					why, _, _ = strings.Cut(why[i:], "\n")
				}
				t.Fatalf("p4/tna/lb.p4 no longer fits %s (%d stages): the compiler placed it in %s; bfas: %v: %s", c.Target, c.Stages, stagesLine, err, why)
			}
			if !strings.HasSuffix(stagesLine, "(fits)") {
				t.Fatalf("p4/tna/lb.p4 no longer fits %s (%d stages): %s", c.Target, c.Stages, stagesLine)
			}
			dir := filepath.Join("../../p4/tna/build", c.Sub)
			for _, f := range []string{"lb.p4info.txtpb", "bf-rt.json", "pipe/context.json"} {
				got, err := os.ReadFile(filepath.Join(out, f))
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(filepath.Join(dir, filepath.Base(f)))
				if err != nil {
					t.Fatal(err)
				}
				if same, err := SameCompilerOutput(f, got, want); err != nil || !same {
					t.Errorf("%s/%s differs from what p4c-barefoot writes for %s (%v); run make p4-tna and commit", dir, filepath.Base(f), c.Target, err)
				}
			}
			summaryFile := filepath.Join(dir, "resources-"+c.Target+".txt")
			want, err := os.ReadFile(summaryFile)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary.Bytes(); !bytes.Equal(got, want) {
				gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
				i := 0
				for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
					i++
				}
				var g, w string
				if i < len(gl) {
					g = gl[i]
				}
				if i < len(wl) {
					w = wl[i]
				}
				t.Errorf("%s differs from the compiler's report at line %d:\n got  %q\n want %q\nrun make p4-tna and commit", summaryFile, i+1, g, w)
			}
			s, err := runtime.LoadP4Info(filepath.Join(out, "lb.p4info.txtpb"))
			if err != nil {
				t.Fatalf("the compiler's P4Info: %v", err)
			}
			if _, err := s.Counter("service_packets"); err != nil {
				t.Errorf("the compiler's P4Info for %s: %v (is --p4runtime-force-std-externs still honoured?)", c.Target, err)
			}
		})
		if !ok {
			return
		}
	}

	out := filepath.Join(root, "tofino")
	dc, err := LoadDeviceConfig(out, "lb")
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := os.ReadFile(filepath.Join(out, "pipe", "tofino.bin"))
	ctx, _ := os.ReadFile(filepath.Join(out, "pipe", "context.json"))
	if len(dc.Pipelines) != 1 || !bytes.Equal(dc.Pipelines[0].Binary, bin) || !bytes.Equal(dc.Pipelines[0].Context, ctx) || len(bin) == 0 {
		t.Fatalf("device config from %s: %d pipelines, want pipe with tofino.bin (%d bytes) and context.json", out, len(dc.Pipelines), len(bin))
	}
	for _, f := range []Format{FormatPI, FormatStratum} {
		b, err := dc.Pack(f)
		if err != nil {
			t.Fatal(err)
		}
		var back *DeviceConfig
		if f == FormatPI {
			back, err = UnpackPI(b)
		} else {
			back, err = UnpackStratum(b)
		}
		if err != nil || len(back.Pipelines) != 1 || !bytes.Equal(back.Pipelines[0].Binary, bin) || !bytes.Equal(back.Pipelines[0].Context, ctx) {
			t.Fatalf("%s packing of the compiler's outputs does not round-trip: %v", f, err)
		}
	}

	// lbc push --target tofino --p4info <the compiler's> --device-config <its directory>
	srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg, err := Open(cctx, Options{Options: runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 1},
		P4InfoPath: filepath.Join(out, "lb.p4info.txtpb"), DeviceConfigPath: out, ProgramName: "lb"})
	if err != nil {
		t.Fatalf("Open with the compiler's outputs: %v", err)
	}
	defer tg.Close()
	if !tg.PipelinePushed() {
		t.Fatal("Open did not push the compiler's pipeline to an empty switch")
	}
}

// TestTNAP4InfoSharesNames: every table, action and parameter the IR
// translation writes exists in the TNA P4Info with the v1model program's
// names and widths (idle_ticks is this target's own; the backend's
// deadline is as wide as each program's clock; the dense ring's address
// and entries are as wide as the pool and the conntrack's backend ID, and
// its rows hold the ring's mask where lb.p4's hold its size).
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
		talias := alias
		if alias == "ring" {
			// The TNA ring is four banks (ring0 .. ring3) of one layout.
			talias = "ring0"
			for b := 1; b < 4; b++ {
				bank, err := tna.Table(fmt.Sprintf("ring%d", b))
				if err != nil {
					t.Errorf("the TNA ring's bank %d: %v", b, err)
				} else if r0, _ := tna.Table("ring0"); bank.GetSize() != r0.GetSize() || len(bank.MatchFields) != 1 || bank.MatchFields[0].Bitwidth != r0.MatchFields[0].Bitwidth {
					t.Errorf("ring%d: %d entries keyed by %v, ring0 %d by %v", b, bank.GetSize(), bank.MatchFields, r0.GetSize(), r0.MatchFields)
				}
			}
		}
		other, err := tna.Table(talias)
		if err != nil {
			t.Errorf("table %s: %v", alias, err)
			continue
		}
		if len(other.MatchFields) != len(tb.MatchFields) {
			t.Errorf("table %s: %d match fields in TNA, %d in v1model", alias, len(other.MatchFields), len(tb.MatchFields))
		}
		for i, f := range tb.MatchFields {
			if alias == "ring" && i < len(other.MatchFields) && other.MatchFields[i].Name == f.Name && other.MatchFields[i].GetMatchType() == f.GetMatchType() {
				// The TNA ring is direct-indexed: a bank's address is as
				// wide as the bank (RING_BANK_BITS), lb.p4's 32 bits.
				if other.MatchFields[i].Bitwidth != 18 || f.Bitwidth != 32 || other.GetSize() != 1<<18 {
					t.Errorf("table ring addr: TNA %d bits (%d entries a bank), v1model %d; want 18 (RING_BANK_BITS, 2^18 entries) and 32", other.MatchFields[i].Bitwidth, other.GetSize(), f.Bitwidth)
				}
				continue
			}
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
			if a.Preamble.Alias == "set_service" && p.Name == "ring_size" && other.Params[i].Name == "ring_mask" && other.Params[i].Bitwidth == p.Bitwidth {
				continue // TNA masks the hashes in the row's action (docs/tofino.md, "The dense ring")
			}
			if a.Preamble.Alias == "set_ring_backend" && p.Name == "backend_id" && other.Params[i].Name == p.Name {
				// A TNA ring entry is its 16-bit backend ID (the
				// conntrack's width), lb.p4's 32 bits.
				if other.Params[i].Bitwidth != 16 || p.Bitwidth != 32 {
					t.Errorf("set_ring_backend backend_id: TNA %d bits, v1model %d; want 16 and 32", other.Params[i].Bitwidth, p.Bitwidth)
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
