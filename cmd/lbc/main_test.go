package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"USAGE:", "COMMANDS:", "validate", "gslb", "version", "help"}},
		{[]string{"help"}, []string{"USAGE:", "COMMANDS:", "compile"}},
		{[]string{"help", "compile"}, []string{"lbc compile - ", "--config"}},
		{[]string{"help", "gslb", "serve"}, []string{"lbc gslb serve - ", "--listen"}},
		{[]string{"gslb"}, []string{"serve", "explain", "demo-geodb"}},
	} {
		out, errw, err := runLBC(t, tc.args...)
		if err != nil {
			t.Errorf("lbc %s: %v (stderr %q)", strings.Join(tc.args, " "), err, errw)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("lbc %s: output lacks %q:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
		if strings.Contains(out, "   testbench  ") {
			t.Errorf("lbc %s lists the moved testbench command:\n%s", strings.Join(tc.args, " "), out)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus"; commands: compile, detach, explain, gen-trace, gslb, help, push, replay, run, status, validate, version (lbc --help)`},
		{[]string{"help", "bogus"}, `unknown command "bogus"; commands: compile,`},
		{[]string{"gslb", "bogus"}, `gslb: unknown command "bogus"; commands: demo-geodb, explain, help, serve (lbc gslb --help)`},
		{[]string{"help", "gslb", "bogus"}, `gslb: unknown command "bogus"; commands: demo-geodb, explain, `},
		{[]string{"version", "extra"}, `version takes no arguments`},
		// The testbench moved to its own binary: say where.
		{[]string{"testbench", "run", "seed001-failover"}, "go run ./cmd/lbc-testbench run seed001-failover"},
		{[]string{"testbench"}, "lbc-testbench list"},
	} {
		out, _, err := runLBC(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lbc %s: error %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if strings.Contains(out, "No help topic") {
			t.Errorf("lbc %s printed urfave/cli's %q", strings.Join(tc.args, " "), out)
		}
	}
}

// lbc version and --version print the module, the commit (or why there is
// none) and the SHA-256 of the embedded programs, which must be the
// committed files' own.
func TestVersion(t *testing.T) {
	var want []string
	for _, f := range []string{"p4/build/lb.json", "p4/build/lb.p4info.txtpb", "fallback/lb_bpfel.o"} {
		data, err := os.ReadFile("../../" + f)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		want = append(want, f+" ", "sha256:"+hex.EncodeToString(h[:]))
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, _, err := runLBC(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range append(want, "lbc ", "(github.com/lbc-dev/lbc)", "commit   ", "go       go1.") {
			if !strings.Contains(out, w) {
				t.Errorf("lbc %s: output lacks %q:\n%s", args[0], w, out)
			}
		}
	}
	var b strings.Builder
	writeVersion(&b, buildVersion{Module: "m", Version: "v1.2.3", Commit: "abc123", Time: "2026-01-02T03:04:05Z", Modified: true, Go: "go1.26", Platform: "linux/amd64"})
	if got := b.String(); !strings.Contains(got, "lbc v1.2.3 (m)\ncommit   abc123 (2026-01-02T03:04:05Z), modified\n") {
		t.Errorf("version with VCS information:\n%s", got)
	}
}
