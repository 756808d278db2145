package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/testbench/scenario"
)

func runTB(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	app := newApp()
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errw
	err := app.Run(append([]string{"lbc-testbench"}, args...))
	return out.String(), errw.String(), err
}

func TestTestbenchList(t *testing.T) {
	out, _, err := runTB(t, "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"seed001-failover", "weighted-drain", "rolling-restart", "udp-fragments", "fleet-ecmp"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "invalid") {
		t.Errorf("a shipped scenario is invalid:\n%s", out)
	}
}

func TestTestbenchRunErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "want one SCENARIO"},
		{[]string{"run", "no-such-scenario"}, "not a shipped scenario (fleet-ecmp, rolling-restart, seed001-failover, switch-faults, udp-fragments, weighted-drain, xdp-faults)"},
		{[]string{"run", "seed001-failover", "--bogus", "1"}, "flag --bogus"},
		{[]string{"run", "seed001-failover", "--out"}, "flag --out needs a value"},
		{[]string{"run", "seed001-failover", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "seed001-failover", "--topology", "ring"}, `--topology "ring": want netns or mininet`},
	} {
		_, _, err := runTB(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lbc-testbench %s: error %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
		if err != nil && exitStatus(err) != exitFailed {
			t.Errorf("lbc-testbench %s: exit status %d, want %d", strings.Join(tc.args, " "), exitStatus(err), exitFailed)
		}
	}
}

// A topology that cannot run here is not a pass: the run exits 77 unless
// --allow-skip is given.
func TestTestbenchSkipExitStatus(t *testing.T) {
	reason := scenario.MininetAvailable()
	if reason == nil {
		t.Skip("mininet and BMv2 are installed here: the mininet topology runs, nothing is skipped (TestScenariosMininet covers it)")
	}
	_, _, err := runTB(t, "run", "seed001-failover", "--topology", "mininet", "--out", t.TempDir())
	var se *skippedError
	if !errors.As(err, &se) || !errors.Is(err, scenario.ErrUnavailable) {
		t.Fatalf("error %v, want a skip with the reason", err)
	}
	if got := exitStatus(err); got != exitSkipped {
		t.Errorf("exit status %d, want %d", got, exitSkipped)
	}
	if !strings.Contains(err.Error(), "skipped") || !strings.Contains(err.Error(), "--allow-skip") {
		t.Errorf("message %q should say it was skipped and how to allow it", err)
	}
	_, errw, err := runTB(t, "run", "seed001-failover", "--topology", "mininet", "--allow-skip", "--out", t.TempDir())
	if err != nil {
		t.Fatalf("--allow-skip: %v", err)
	}
	if !strings.Contains(errw, "skipped (--allow-skip)") || !strings.Contains(errw, reason.Error()) {
		t.Errorf("--allow-skip printed %q, want the skip and its reason %q", errw, reason)
	}
}

// The built binary exits 77 on a skip and 1 on an unknown command (what a
// CI script sees).
func TestTestbenchBinaryExitStatus(t *testing.T) {
	if scenario.MininetAvailable() == nil {
		t.Skip("mininet and BMv2 are installed here: nothing is skipped")
	}
	bin := t.TempDir() + "/lbc-testbench"
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want int
		msg  string
	}{
		{[]string{"run", "seed001-failover", "--topology", "mininet", "--out", t.TempDir()}, exitSkipped, "skipped"},
		{[]string{"bogus"}, exitFailed, `unknown command "bogus"`},
	} {
		cmd := exec.Command(bin, tc.args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.want {
			t.Errorf("lbc-testbench %s: %v, want exit status %d\n%s", strings.Join(tc.args, " "), err, tc.want, out)
		}
		if !strings.Contains(string(out), tc.msg) {
			t.Errorf("lbc-testbench %s printed %q, want %q", strings.Join(tc.args, " "), out, tc.msg)
		}
	}
}
