package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArgumentsAreNeverIgnored (issue 36): a file given without -c is
// read, never replaced by the embedded demo; push and run need a file or
// --example; a flag after an argument and an argument a command does not
// take are errors.
func TestArgumentsAreNeverIgnored(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("services:\n  - name: web\n    vip: nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "lb.yaml")
	data, err := os.ReadFile("../../examples/udp-fragments.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runCLICases(t, []cliCase{
		{"validate reads its argument", []string{"validate", good}, good + ": ok", ""},
		{"validate of a bad argument fails on it", []string{"validate", bad}, "", "bad.yaml"},
		{"compile reads its argument", []string{"compile", good}, "service media", ""},
		{"compile without a file: the example", []string{"compile"}, "service web", ""},
		{"two files", []string{"validate", good, bad}, "", "takes one configuration file, got 2 arguments"},
		{"-c and an argument", []string{"validate", "-c", good, bad}, "", "both -c"},
		{"a flag after the file", []string{"validate", good, "--target", "xdp"}, "", "flag --target comes after an argument and would not be read"},
		{"push without a file", []string{"push", "--target", "bmv2", "--addr", "127.0.0.1:1", "--dry-run"}, "", "push needs the configuration to program: -c lb.yaml (or --example"},
		{"push with a flag after the file", []string{"push", bad, "--target", "bmv2"}, "", "flag --target comes after an argument"},
		{"push of a bad file reads it", []string{"push", "--target", "bmv2", "--addr", "127.0.0.1:1", "--dry-run", bad}, "", "bad.yaml"},
		{"run without a file", []string{"run", "--target", "sim"}, "", "run needs the configuration to program"},
		{"a command without arguments", []string{"status", "extra"}, "", `status takes no arguments (got "extra")`},
		{"fleet certs keeps its node arguments", []string{"fleet", "certs", "--out", dir, "n1"}, "n1", ""},
	}, func(t *testing.T, tc cliCase, out, errw string) {
		if tc.wantErr != "" && strings.Contains(out+errw, "203.0.113.10") {
			t.Errorf("lbc %s used the demo (its VIP 203.0.113.10 is in the output)", strings.Join(tc.args, " "))
		}
	})
}

// cliCase is one command line and what it must print (out, when it
// succeeds) or fail with (wantErr).
type cliCase struct {
	name    string
	args    []string
	out     string
	wantErr string
}

// runCLICases runs each case as a subtest; also, when given, checks more
// of what the command printed.
func runCLICases(t *testing.T, cases []cliCase, also func(t *testing.T, tc cliCase, out, errw string)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errw, err := runLBC(t, tc.args...)
			switch {
			case tc.wantErr == "" && (err != nil || !strings.Contains(out, tc.out)):
				t.Fatalf("lbc %s: %v\n%s%s", strings.Join(tc.args, " "), err, out, errw)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("lbc %s: error %v, want %q\n%s", strings.Join(tc.args, " "), err, tc.wantErr, out)
			}
			if also != nil {
				also(t, tc, out, errw)
			}
		})
	}
}

// TestUsageErrorIsShort (issue 36): a flag the parser refuses is one error
// with the command's usage line, not the whole help around it.
func TestUsageErrorIsShort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", "--bogus"}, "compile: flag provided but not defined: -bogus\nusage: lbc compile [-c lb.yaml]"},
		{[]string{"fleet", "certs", "--bogus"}, "fleet certs: flag provided but not defined: -bogus\nusage: lbc fleet certs [flags] NODE...\n(lbc help fleet certs shows every flag)"},
		{[]string{"push", "--target"}, "push: flag needs an argument: -target\nusage: lbc push -c lb.yaml"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus\nusage: lbc [--version] COMMAND"},
	} {
		out, errw, err := runLBC(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lbc %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if strings.Contains(out+errw, "OPTIONS:") || strings.Contains(out+errw, "Incorrect Usage") {
			t.Errorf("lbc %s printed the help:\n%s%s", strings.Join(tc.args, " "), out, errw)
		}
	}
}

// TestStatusTakesNoWriteFlags (issue 36): status only reads, so its help
// lists no flag that says how to write or attach, and it refuses them.
func TestStatusTakesNoWriteFlags(t *testing.T) {
	help, _, err := runLBC(t, "status", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--batch-size", "--fallback-port", "--mode", "--egress", "--gateway-mac"} {
		if strings.Contains(help, f) {
			t.Errorf("status --help lists %s, a flag of push and run", f)
		}
		if _, _, err := runLBC(t, "status", f, "1"); err == nil || !strings.Contains(err.Error(), "flag provided but not defined") {
			t.Errorf("status %s 1: %v", f, err)
		}
	}
	if !strings.Contains(help, "--addr") || !strings.Contains(help, "--pin-dir") {
		t.Errorf("status --help lacks the flags that say where to read:\n%s", help)
	}
}

// TestFlagAfterFileNamesTheOrder (issue 36, round three): a flag after the
// file is named as such, also when it is a required one (it read as
// "Required flag "packet" not set" above the whole help), and the error
// suggests the command line in the right order, each flag with its value;
// a required flag left out is one short error with the usage line.
func TestFlagAfterFileNamesTheOrder(t *testing.T) {
	const pkt = "tcp 198.51.100.7:4242 > 203.0.113.10:80 S"
	f := "../../examples/failover.yaml"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", f, "-p", pkt}, `flag -p comes after an argument and would not be read; put every flag before the arguments: lbc explain [flags] -p "` + pkt + `" ` + f},
		{[]string{"compile", f, "--format", "json"}, "lbc compile [flags] --format json " + f},
		{[]string{"compile", f, "--format=json"}, "lbc compile [flags] --format=json " + f},
		{[]string{"validate", f, "--target", "xdp", "--kind", "lb"}, "lbc validate [flags] --target xdp --kind lb " + f},
		{[]string{"explain", "--json", f, "--fallback", "-p", pkt}, `lbc explain [flags] --fallback -p "` + pkt + `" ` + f},
		{[]string{"explain"}, "explain needs --packet\nusage: lbc explain [-c lb.yaml]"},
		{[]string{"replay"}, "replay needs --trace\nusage: lbc replay"},
		{[]string{"gslb", "explain", "--name", "www.example.com"}, "gslb explain needs --client\nusage: lbc gslb explain"},
	} {
		out, _, err := runLBC(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lbc %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if out != "" {
			t.Errorf("lbc %s printed %d bytes on stdout (the help?), want the error alone", strings.Join(tc.args, " "), len(out))
		}
	}
}

// TestXDPWithoutIfaceFirst (issue 36, round three): push, status and
// detach on XDP without --iface say so before anything else: no
// "connecting to xdp  …" line on stderr first, and it says when xdp is
// only the default target.
func TestXDPWithoutIfaceFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "--example", "--dry-run"}, "--target xdp (the default) needs --iface INTERFACE"},
		{[]string{"push", "--example", "--target", "xdp"}, "--target xdp needs --iface INTERFACE"},
		{[]string{"status"}, "--target xdp (the default) needs --iface INTERFACE"},
		{[]string{"detach", "--target", "xdp"}, "--target xdp needs --iface INTERFACE"},
	} {
		_, errw, err := runLBC(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lbc %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if errw != "" {
			t.Errorf("lbc %s printed before the error: %q", strings.Join(tc.args, " "), errw)
		}
	}
}

// TestHelpListsWhatTheCommandReads (issue 36, round three): lbc detach
// --help lists the flags a detach reads (--target, the xdp adapter's
// interface and pin flags, --keep-maps), not a switch's connection flags
// nor how to attach; lbc status reads the P4Info the switch runs, so its
// --help lists no pipeline file nor a flag of how to write or attach.
func TestHelpListsWhatTheCommandReads(t *testing.T) {
	for _, tc := range []struct {
		cmd       string
		want, not []string
	}{
		{"detach", []string{"--target KIND", "--iface INTERFACE", "--pin-dir DIR", "--state-dir DIR", "--keep-maps"},
			[]string{"--addr", "--p4info", "--device-config", "--ring-table-size", "--mode", "--egress", "--gateway-mac", "bmv2"}},
		{"status", []string{"--target KIND", "--addr HOST:PORT", "--iface INTERFACE", "--controller ADDR", "--tls-ca FILE"},
			[]string{"--p4info", "--device-config", "--program-name", "--ring-table-size", "--batch-size", "--mode", "--egress"}},
	} {
		out, _, err := runLBC(t, tc.cmd, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %s:\n%s", tc.cmd, want, out)
			}
		}
		for _, not := range tc.not {
			if strings.Contains(out, not) {
				t.Errorf("%s --help names %s, which a %s does not read:\n%s", tc.cmd, not, tc.cmd, out)
			}
		}
	}
	// A switch target says it has nothing to detach.
	if _, _, err := runLBC(t, "detach", "--target", "bmv2"); err == nil || !strings.Contains(err.Error(), "--target bmv2 has nothing to detach") {
		t.Errorf("detach --target bmv2: %v, want 'has nothing to detach'", err)
	}
}
