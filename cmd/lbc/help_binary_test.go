package main

import (
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/internal/clihelp/clihelptest"
)

// TestBuiltBinaryHelpExitsZero (issue 24, item 1): the built lbc prints
// help and exits 0 for --help, -h and help, on its own page and on every
// command's and subcommand's (found from newApp's command list), where it
// printed "Incorrect Usage: flag: help requested" and exited 1.
func TestBuiltBinaryHelpExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the lbc binary")
	}
	app := newApp()
	pages := clihelptest.Pages(app)
	// The walk must find the commands and the gslb subcommands, or the
	// test would pass by checking nothing.
	found := map[string]bool{}
	for _, p := range pages {
		found[strings.Join(p, " ")] = true
	}
	for _, want := range []string{"", "compile", "run", "gslb", "gslb serve", "gslb explain", "gslb demo-geodb", "help"} {
		if !found[want] {
			t.Fatalf("the command walk lacks %q: %v", want, pages)
		}
	}
	bin := built(t, ".", "lbc")
	clihelptest.Check(t, bin, app)
}
