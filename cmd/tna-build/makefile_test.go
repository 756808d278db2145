package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCompiler stands in for p4c-barefoot: it writes each output as
// "$FAKE_TAG <target>", the -g compile's report from targets/tofino's
// testdata, and fails the compile of the target named in
// FAKE_FAIL_COMPILE.
const fakeCompiler = `#!/bin/bash
[ "$1" = --version ] && { echo "p4c-barefoot fake"; exit 0; }
target= out= info= bfrt= g=
while [ $# -gt 0 ]; do
	case "$1" in
	--target) target=$2; shift;; -o) out=$2; shift;; --p4runtime-files) info=$2; shift;;
	--bf-rt-schema) bfrt=$2; shift;; --arch) shift;; -g) g=1;;
	esac; shift
done
[ "$target" = "$FAKE_FAIL_COMPILE" ] && { echo "error: fake compile of $target fails"; exit 1; }
mkdir -p $out/pipe/logs
if [ -n "$g" ]; then cp $FAKE_LOGS/resources.json $FAKE_LOGS/phv.json $out/pipe/logs/; exit 0; fi
echo "$FAKE_TAG $target" > $info; echo "$FAKE_TAG $target" > $bfrt; echo "$target" > $out/pipe/lb.bfa
`

// fakeAssembler stands in for bfas: it refuses the target named in
// FAKE_FAIL_BFAS as bfas refuses a program that does not fit.
const fakeAssembler = `#!/bin/bash
out=$2; target=$(cat $3)
[ "$target" = "$FAKE_FAIL_BFAS" ] && { echo "error: $target supports up to 12 stages"; exit 1; }
echo "$FAKE_TAG $target" > $out/context.json; echo bin > $out/$target.bin
`

var tnaOutputs = []string{"lb.p4info.txtpb", "bf-rt.json", "context.json", "tofino2/lb.p4info.txtpb", "tofino2/bf-rt.json", "tofino2/context.json"}

// TestMakeP4TNAReplacesAllOrNothing: `make p4-tna` (with stand-ins for
// p4c-barefoot and bfas) writes every output of both targets when every
// step succeeds, and none when a compile fails or a target does not fit,
// so a failed run never leaves one target's outputs from another compile
// than the rest (issue 21: a stale context.json beside fresh P4Info).
func TestMakeP4TNAReplacesAllOrNothing(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make not on PATH (%v)", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash not on PATH (%v)", err)
	}
	bin := t.TempDir()
	for name, text := range map[string]string{"p4c-barefoot": fakeCompiler, "bfas": fakeAssembler} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := filepath.Abs("../../targets/tofino/testdata/resources")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, failCompile, failBfas string
		ok                          bool
		say                         string
	}{
		{name: "both fit", ok: true, say: "p4-tna: both targets fit"},
		{name: "Tofino 2 does not fit", failBfas: "tofino2", say: "p4-tna: tofino2 does not fit: supports up to 12 stages"},
		{name: "Tofino 1 compile fails", failCompile: "tofino", say: "p4-tna: tofino: the compile failed"},
		{name: "Tofino 2 compile fails", failCompile: "tofino2", say: "p4-tna: tofino2: the compile failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			for _, f := range tnaOutputs {
				p := filepath.Join(out, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("make", "-s", "p4-tna", "TNA_OUT="+out)
			cmd.Dir = "../.."
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"FAKE_TAG=new", "FAKE_LOGS="+logs, "FAKE_FAIL_COMPILE="+tc.failCompile, "FAKE_FAIL_BFAS="+tc.failBfas)
			msg, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(msg), tc.say) {
				t.Fatalf("make p4-tna: %v, want success %v and %q in:\n%s", err, tc.ok, tc.say, msg)
			}
			for _, f := range tnaOutputs {
				b, err := os.ReadFile(filepath.Join(out, f))
				if err != nil {
					t.Fatal(err)
				}
				target := "tofino"
				if strings.HasPrefix(f, "tofino2/") {
					target = "tofino2"
				}
				want := "old\n"
				if tc.ok {
					want = "new " + target + "\n"
				}
				if string(b) != want {
					t.Errorf("%s: %q, want %q", f, b, want)
				}
			}
			_, err = os.Stat(filepath.Join(out, "device", "tofino", "pipe", "tofino.bin"))
			if tc.ok != (err == nil) {
				t.Errorf("device/tofino/pipe/tofino.bin: %v, want it written only on success", err)
			}
			for _, f := range []string{"resources-tofino.txt", "tofino2/resources-tofino2.txt"} {
				_, err := os.Stat(filepath.Join(out, f))
				if tc.ok != (err == nil) {
					t.Errorf("%s: %v, want it written only on success", f, err)
				}
			}
		})
	}
}
