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
		{[]string{"bogus"}, `unknown command "bogus"; commands: compile, completion, detach, explain, fleet, gen-trace, gslb, help, push, replay, run, status, validate, version (lbc --help)`},
		{[]string{"help", "bogus"}, `unknown command "bogus"; commands: compile,`},
		{[]string{"gslb", "bogus"}, `gslb: unknown command "bogus"; commands: demo-geodb, explain, help, serve (lbc gslb --help)`},
		{[]string{"help", "gslb", "bogus"}, `gslb: unknown command "bogus"; commands: demo-geodb, explain, `},
		{[]string{"version", "extra"}, `version takes no arguments`},
		// A misspelt command or flag: the one most likely meant.
		{[]string{"valdate"}, `unknown command "valdate" (did you mean "validate"?); commands: compile,`},
		{[]string{"gslb", "srve"}, `gslb: unknown command "srve" (did you mean "serve"?)`},
		{[]string{"push", "--tagret", "xdp"}, "push: flag provided but not defined: -tagret (did you mean --target?)\nusage: lbc push"},
		{[]string{"status", "--contrller", "x"}, "(did you mean --controller?)"},
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

// --at takes seconds in a trace's range and says so; without it the packet
// runs at the trace's last time (0 without a trace).
func TestExplainAt(t *testing.T) {
	pkt := "tcp 198.51.100.7:4242 > 203.0.113.10:80 S"
	for _, tc := range []struct {
		at, want string
	}{
		{"-5", "--at -5: want seconds in 0..1e9"},
		{"-0.001", "--at -0.001: want seconds in 0..1e9"},
		{"1e300", "--at 1e300: want seconds in 0..1e9"},
		{"1000000001", "--at 1000000001: want seconds in 0..1e9"},
		{"NaN", "--at NaN: want seconds in 0..1e9"},
		{"Inf", "--at Inf: want seconds in 0..1e9"},
		{"soon", `--at "soon": want seconds, e.g. --at 12.5`},
	} {
		_, _, err := runLBC(t, "explain", "-p", pkt, "--at", tc.at)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--at %s: %v, want %q", tc.at, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "at t=0s"},
		{[]string{"--at", "12.5"}, "at t=12.5s"},
		{[]string{"--at", "0"}, "at t=0s"},
		{[]string{"--at", "1e9"}, "at t=1e+09s"},
	} {
		out, _, err := runLBC(t, append([]string{"explain", "-p", pkt}, tc.args...)...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v: %v, output lacks %q:\n%s", tc.args, err, tc.want, out)
		}
	}
	help, _, _ := runLBC(t, "explain", "--help")
	for _, line := range strings.Split(help, "\n") {
		if strings.Contains(line, "--at SECONDS") && strings.Count(line, "default") != 1 {
			t.Errorf("explain --help: --at shows %d defaults: %s", strings.Count(line, "default"), line)
		}
	}
}

// The placeholder of status --controller is ADDR, not a phrase.
func TestStatusHelpPlaceholder(t *testing.T) {
	help, _, _ := runLBC(t, "status", "--help")
	if !strings.Contains(help, "--controller ADDR ") || strings.Contains(help, "--controller lbc run") {
		t.Errorf("status --help:\n%s", help)
	}
}

// TestGroupUsageNamesSubcommand (issue 24, item 10): a command group's
// usage says a subcommand comes next (lbc gslb COMMAND ...), where
// urfave/cli wrote "lbc gslb [command options]"; help's own page is its
// usage, not lbc's.
func TestGroupUsageNamesSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		want     string
		notWants []string
	}{
		{[]string{"gslb", "--help"}, "USAGE:\n   lbc gslb COMMAND [command options]\n", []string{"USAGE:\n   lbc gslb [command options]"}},
		{[]string{"gslb"}, "USAGE:\n   lbc gslb COMMAND [command options]\n", nil},
		{[]string{"help", "gslb"}, "USAGE:\n   lbc gslb COMMAND [command options]\n", nil},
		{[]string{"help", "--help"}, "NAME:\n   lbc help - describe lbc, or one of its commands\n\nUSAGE:\n   lbc help [COMMAND [SUBCOMMAND]]\n", []string{"COMMANDS:"}},
		{[]string{"help", "-h"}, "USAGE:\n   lbc help [COMMAND [SUBCOMMAND]]\n", nil},
		{[]string{"help", "gslb", "serve", "--help"}, "NAME:\n   lbc gslb serve - ", nil},
	} {
		out, errw, err := runLBC(t, tc.args...)
		if err != nil {
			t.Errorf("lbc %s: %v (stderr %q)", strings.Join(tc.args, " "), err, errw)
			continue
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("lbc %s: output lacks %q:\n%s", strings.Join(tc.args, " "), tc.want, out)
		}
		for _, nw := range tc.notWants {
			if strings.Contains(out, nw) {
				t.Errorf("lbc %s: output has %q:\n%s", strings.Join(tc.args, " "), nw, out)
			}
		}
	}
}
