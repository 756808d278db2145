package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The product binary does not link its test bench (design decision 10):
// no testbench package and no test helper package (…test) is among lbc's
// dependencies.
func TestProductDoesNotLinkTestbench(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v (needs the go tool)", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "/testbench") || strings.HasSuffix(p, "test") && strings.HasPrefix(p, "github.com/lbc-dev/lbc/") {
			t.Errorf("lbc links %s: test code belongs to lbc-testbench or the tests", p)
		}
	}
}
