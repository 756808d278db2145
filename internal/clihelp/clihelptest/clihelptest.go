// Package clihelptest checks, on a built binary, that every command's help
// is help: printed on stdout with exit status 0, never urfave/cli's
// "Incorrect Usage: flag: help requested". Only tests import it.
package clihelptest

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// Build builds the main package in dir (a go build path such as ".") into
// a temporary directory and returns the binary's path.
func Build(t *testing.T, dir, name string) string {
	t.Helper()
	return BuildIn(t, dir, name, t.TempDir())
}

// BuildIn builds the main package in dir into out/name and returns the
// binary's path: for a caller that keeps a binary beyond one test.
func BuildIn(t *testing.T, dir, name, out string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is not on PATH (it runs this test): %v", err)
	}
	bin := filepath.Join(out, name)
	cmd := exec.Command(goTool, "build", "-o", bin, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s %s: %v\n%s", bin, dir, err, out)
	}
	return bin
}

// Pages lists every help page of app, as the path of command names that
// leads to it (nil for the app's own page): every command and subcommand
// that is not hidden, found by walking app.Commands, the program's help
// command included (its own page, not its subcommands). The help
// subcommands urfave/cli adds below the top level as commands run (and
// which stay in the shared commands of a test's earlier runs) are not
// pages of their own.
func Pages(app *cli.App) [][]string {
	pages := [][]string{nil}
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || len(path) > 0 && c.Name == "help" {
				continue
			}
			p := append(append([]string(nil), path...), c.Name)
			pages = append(pages, p)
			if c.Name != "help" {
				walk(p, c.Subcommands)
			}
		}
	}
	walk(nil, app.Commands)
	return pages
}

// Invocation is one way to ask for a page.
type Invocation struct {
	Page []string // the command path, nil for the app
	Args []string // what is run
}

// Invocations lists, for each page, PAGE --help, PAGE -h and help PAGE
// (not for the help command's own page, whose `help help` is the app's).
func Invocations(app *cli.App) []Invocation {
	var out []Invocation
	for _, p := range Pages(app) {
		for _, flag := range []string{"--help", "-h"} {
			out = append(out, Invocation{p, append(append([]string(nil), p...), flag)})
		}
		if len(p) == 0 || p[0] != "help" {
			out = append(out, Invocation{p, append([]string{"help"}, p...)})
		}
	}
	return out
}

// Check runs bin with each invocation of app's pages and checks that it
// exits 0, prints the page (NAME: "<app> <page> - ", USAGE:) on stdout,
// nothing on stderr, and no "Incorrect Usage" or "help requested".
func Check(t *testing.T, bin string, app *cli.App) {
	t.Helper()
	invs := Invocations(app)
	for _, inv := range invs {
		name := strings.Join(inv.Args, " ")
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, inv.Args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				t.Errorf("%s %s: exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", app.Name, name, ee.ExitCode(), stdout.String(), stderr.String())
			case err != nil:
				t.Fatalf("%s %s: %v", app.Name, name, err)
			}
			out := stdout.String()
			title := "   " + strings.Join(append([]string{app.Name}, inv.Page...), " ") + " - "
			for _, want := range []string{"NAME:\n" + title, "USAGE:"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s %s: stdout lacks %q:\n%s", app.Name, name, want, out)
				}
			}
			if stderr.Len() > 0 {
				t.Errorf("%s %s: stderr is not empty:\n%s", app.Name, name, stderr.String())
			}
			for _, bad := range []string{"Incorrect Usage", "help requested"} {
				if strings.Contains(out+stderr.String(), bad) {
					t.Errorf("%s %s prints %q:\nstdout:\n%s\nstderr:\n%s", app.Name, name, bad, out, stderr.String())
				}
			}
		})
	}
}
