package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The product binary does not link its test bench (design decision 10).
// testbenchPending are the testbench packages lbc still links while they
// move to product packages; the list only shrinks.
var testbenchPending = []string{
	"github.com/lbc-dev/lbc/testbench/bmv2live", // lbc replay --target bmv2: moves out of testbench
	"github.com/lbc-dev/lbc/testbench/netns",    // imported by bmv2live
	"github.com/lbc-dev/lbc/testbench/trace",    // moves to trace/
}

func TestProductDoesNotLinkTestbench(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v (needs the go tool)", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "/testbench") || strings.HasSuffix(p, "test") && strings.HasPrefix(p, "github.com/lbc-dev/lbc/") {
			if !slices.Contains(testbenchPending, p) {
				t.Errorf("lbc links %s: test code belongs to lbc-testbench or the tests", p)
			}
		}
	}
}
