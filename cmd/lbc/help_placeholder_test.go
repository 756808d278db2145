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
// FORMAT, --max-probes N), on every help page, and every flag is written
// once: one line of OPTIONS whose names column names it once (urfave/cli
// writes a repeatable flag's names twice, "--target KIND, -t KIND
// [ --target KIND, -t KIND ]"). lbc run's --target notation (KIND, WHERE)
// is explained once.
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
			flagsOnce(t, strings.Join(p, " "), out, c.VisibleFlags())
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	if n < 14 {
		t.Fatalf("only %d help pages", n)
	}
	out, _, err := runLBC(t, "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, once := range []string{"KIND is sim or", "WHERE overrides", "repeat the flag for several"} {
		if n := strings.Count(out, once); n != 1 {
			t.Errorf("lbc run --help says %q %d times, want once:\n%s", once, n, out)
		}
	}
}

// flagsOnce checks that each of flags has one line in page's OPTIONS and
// that the line's names column (up to the usage) names it once.
func flagsOnce(t *testing.T, cmd, page string, flags []cli.Flag) {
	t.Helper()
	_, opts, ok := strings.Cut(page, "\nOPTIONS:\n")
	if !ok {
		if len(flags) > 0 {
			t.Errorf("lbc %s --help has no OPTIONS:\n%s", cmd, page)
		}
		return
	}
	for _, f := range flags {
		name := "--" + f.Names()[0]
		if len(f.Names()[0]) == 1 {
			name = "-" + f.Names()[0]
		}
		var lines []string
		for _, l := range strings.Split(opts, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), name+" ") || strings.TrimSpace(l) == name || strings.HasPrefix(strings.TrimSpace(l), name+",") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Errorf("lbc %s --help: %d OPTIONS lines for %s, want 1:\n%s", cmd, len(lines), name, opts)
			continue
		}
		// The names column ends where the usage starts, at the first run
		// of two spaces after the names.
		col, _, _ := strings.Cut(strings.TrimSpace(lines[0]), "  ")
		if n := strings.Count(col+" ", name+" ") + strings.Count(col+" ", name+","); n != 1 {
			t.Errorf("lbc %s --help writes %s %d times in its names column %q, want once", cmd, name, n, col)
		}
	}
}
