package main

import (
	"testing"

	"github.com/lbc-dev/lbc/internal/clihelp/clihelptest"
)

// TestBuiltBinaryHelpExitsZero (issue 24, item 1): the built lbc-testbench
// prints help and exits 0 for --help, -h and help on every page, where its
// own --help printed "Incorrect Usage: flag: help requested" and exited 1.
func TestBuiltBinaryHelpExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the lbc-testbench binary")
	}
	app := newApp()
	if n := len(clihelptest.Pages(app)); n < 4 {
		t.Fatalf("the command walk found %d pages: %v", n, clihelptest.Pages(app))
	}
	clihelptest.Check(t, clihelptest.Build(t, ".", "lbc-testbench"), app)
}
