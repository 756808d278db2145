package tofino

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/p4/p4source"
)

// TestTNABuildMatchesSource: the committed outputs of `make p4-tna`
// (p4/tna/build and p4/tna/build/tofino2) are those of p4/tna/lb.p4 as
// each compile reads it, and agree with each other (CheckBuild). It needs
// no compiler, so it runs everywhere; TestTofinoCompilerOutputs compiles
// again where p4c-barefoot is built.
func TestTNABuildMatchesSource(t *testing.T) {
	for _, c := range Compiles {
		t.Run(c.Target, func(t *testing.T) {
			if err := CheckBuild(tnaSource, filepath.Join("../../p4/tna/build", c.Sub), c, nil); err != nil {
				t.Fatalf("p4/tna/build/%s does not match p4/tna/lb.p4 (run make p4-tna and commit):\n%v", c.Sub, err)
			}
		})
	}
}

// overlay reads the files of the program, with the ones in edits replaced.
func overlay(edits map[string][]byte) p4source.FS {
	return func(name string) ([]byte, error) {
		if b, ok := edits[name]; ok {
			return b, nil
		}
		return os.ReadFile(name)
	}
}

// editLine returns the file at pos with re replaced by repl on pos's line,
// failing the test when the line does not match.
func editLine(t *testing.T, pos p4source.Pos, re, repl string) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(pos.File)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	rx := regexp.MustCompile(re)
	if !rx.MatchString(lines[pos.Line-1]) {
		t.Fatalf("%s: %q does not match %s", pos, lines[pos.Line-1], re)
	}
	lines[pos.Line-1] = rx.ReplaceAllString(lines[pos.Line-1], repl)
	return map[string][]byte{pos.File: []byte(strings.Join(lines, "\n"))}
}

// lineWith is the position of the first line of file that contains sub
// (a macro's body, which the reader reports at the macro's invocation).
func lineWith(t *testing.T, file, sub string) p4source.Pos {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) {
			return p4source.Pos{File: file, Line: i + 1}
		}
	}
	t.Fatalf("%s: no line holds %q", file, sub)
	return p4source.Pos{}
}

// TestTNABuildCheckCatchesDrift: CheckBuild fails, naming what, when the
// source changes and the outputs do not (each edit made on a copy, in
// memory, of the file the reader found the declaration in, so it follows
// the source however it is split into files), and when one output is
// stale against the others.
func TestTNABuildCheckCatchesDrift(t *testing.T) {
	for _, c := range Compiles {
		dir := filepath.Join("../../p4/tna/build", c.Sub)
		prog, err := p4source.Read(tnaSource, c.Defines, nil)
		if err != nil {
			t.Fatal(err)
		}
		macro := func(name string) p4source.Macro {
			m, ok := prog.Source.Macros[name]
			if !ok || m.Pos.File == "" {
				t.Fatalf("no #define %s in the source for %s", name, c.Target)
			}
			return m
		}
		ring, ok := prog.Table("LbIngress.ring0")
		if !ok {
			t.Fatal("no table LbIngress.ring0 in the source")
		}
		ringBank := macro("RING_BANK_SIZE")
		ctBits := macro("CT_WAY_BITS")
		vip := macro("VIP_TABLE_SIZE")
		for _, tc := range []struct {
			name   string
			source map[string][]byte
			// file is a committed output edited, on a copy, by edit.
			file string
			edit func(t *testing.T, b []byte) []byte
			want []string
		}{
			{name: "ring banks halved", source: editLine(t, ringBank.Pos, `(define\s+RING_BANK_SIZE\s+).*`, "${1}(1 << (RING_BANK_BITS - 1))"),
				want: []string{"table LbIngress.ring0: size", "table LbIngress.ring3: size"}},
			// Tofino 1: each way's registers halve; Tofino 2: a way's two
			// register arrays become one of the same size.
			{name: "CT_WAY_BITS minus one", source: editLine(t, ctBits.Pos, `(define\s+CT_WAY_BITS\s+)\S+`, "${1}("+ctBits.Value+"-1)"),
				want: []string{"register LbIngress.ct_sig0", "register LbIngress.ct_backend3"}},
			{name: "VIP_TABLE_SIZE doubled", source: editLine(t, vip.Pos, `(define\s+VIP_TABLE_SIZE\s+)\S+`, "${1}8192"),
				want: []string{"table LbIngress.vip_port: size 4096 in the P4Info, 8192", "table LbIngress.vip_addr: size"}},
			{name: "ring renamed", source: editLine(t, lineWith(t, ring.Pos.File, "table ring##N"), `\btable\s+ring##N\b`, "table bank##N"),
				want: []string{"table LbIngress.bank0 (", "not in the P4Info", "table LbIngress.ring0: in the P4Info, not in the source"}},
			{name: "context.json of another ring size", file: "context.json", edit: jsonTable("LbIngress.ring2", func(t map[string]any) { t["size"] = 4096 }),
				want: []string{"context.json: table LbIngress.ring2: size 4096, " + fmt.Sprint(ring.Size) + " in the P4Info"}},
			{name: "context.json of another CT_EMPTY", file: "context.json", edit: jsonTable("LbIngress.ct_sig2", func(t map[string]any) { t["initial_value_lo"] = 0 }),
				want: []string{"context.json: register LbIngress.ct_sig2: initial value 0x0, 0x80000000 in the source"}},
			{name: "bf-rt.json VIP key in another order", file: "bf-rt.json", edit: jsonTable("pipe.LbIngress.vip_port", func(t map[string]any) {
				k := t["key"].([]any)
				k[0], k[1] = k[1], k[0]
			}), want: []string{"bf-rt.json against the P4Info: table LbIngress.vip_port: key"}},
			{name: "resource summary of another placement", file: "resources-" + c.Target + ".txt", edit: func(t *testing.T, b []byte) []byte {
				return []byte(strings.Replace(string(b), "stages used: ", "stages used: 1", 1))
			}, want: []string{"resources-" + c.Target + ".txt: stages used 1"}},
		} {
			t.Run(c.Target+"/"+tc.name, func(t *testing.T) {
				d := dir
				if f := tc.file; f != "" {
					d = t.TempDir()
					for _, n := range []string{"lb.p4info.txtpb", "bf-rt.json", "context.json", "resources-" + c.Target + ".txt"} {
						b, err := os.ReadFile(filepath.Join(dir, n))
						if err != nil {
							t.Fatal(err)
						}
						if n == f {
							b = tc.edit(t, b)
						}
						if err := os.WriteFile(filepath.Join(d, n), b, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
				err := CheckBuild(tnaSource, d, c, overlay(tc.source))
				if err == nil {
					t.Fatalf("CheckBuild passes")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("CheckBuild's error does not say %q:\n%v", w, err)
					}
				}
			})
		}
	}
}

// jsonTable edits the table named name of a bf-rt.json or context.json.
func jsonTable(name string, edit func(map[string]any)) func(*testing.T, []byte) []byte {
	return func(t *testing.T, b []byte) []byte {
		t.Helper()
		found := false
		out := jsonEdit(t, b, func(m map[string]any) {
			for _, x := range m["tables"].([]any) {
				if tm := x.(map[string]any); tm["name"] == name {
					edit(tm)
					found = true
				}
			}
		})
		if !found {
			t.Fatalf("no table %s", name)
		}
		return out
	}
}
