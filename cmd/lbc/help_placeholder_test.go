package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// unnamedValue is a flag line of --help whose value has no name: the
// flag's usage has no `NAME` in backticks, so urfave/cli prints "value".
var unnamedValue = regexp.MustCompile(`(?m)^\s+(--[a-z0-9-]+)(?:, -[a-z]+)? value\s`)

// TestHelpNamesEveryValue (issue 36, round three): every flag that takes
// a value says what it is (--batch-size N, --device-config-format
// FORMAT, --max-probes N), on every help page.
func TestHelpNamesEveryValue(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	n := 0
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" || c.Hidden {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			out, _, err := runLBC(t, append(p, "--help")...)
			if err != nil {
				t.Errorf("lbc %s --help: %v", strings.Join(p, " "), err)
			}
			n++
			for _, m := range unnamedValue.FindAllStringSubmatch(out, -1) {
				t.Errorf("lbc %s --help: %s takes a value it does not name (put `NAME` in its usage)", strings.Join(p, " "), m[1])
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	if n < 14 {
		t.Fatalf("only %d help pages", n)
	}
}
