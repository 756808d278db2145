package main

import (
	"strings"
	"testing"
)

func TestTestbenchList(t *testing.T) {
	out, _, err := runLBC(t, "testbench", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"seed001-failover", "weighted-drain", "rolling-restart", "udp-fragments", "fleet-ecmp"} {
		if !strings.Contains(out, want) {
			t.Errorf("testbench list lacks %s:\n%s", want, out)
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
		{[]string{"testbench", "run"}, "want one SCENARIO"},
		{[]string{"testbench", "run", "no-such-scenario"}, "not a shipped scenario (fleet-ecmp, rolling-restart, seed001-failover, udp-fragments, weighted-drain)"},
		{[]string{"testbench", "run", "seed001-failover", "--bogus", "1"}, "flag --bogus"},
		{[]string{"testbench", "run", "seed001-failover", "--out"}, "flag --out needs a value"},
		{[]string{"testbench", "run", "seed001-failover", "extra"}, `unexpected argument "extra"`},
	} {
		_, _, err := runLBC(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lbc %s: error %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
