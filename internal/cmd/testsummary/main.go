// Command testsummary runs `go test -json` with its arguments and prints
// what `go test` prints without -v (the output of failed tests, and each
// package's closing ok / FAIL / ? line), then every skipped test with its
// reason, and the counts. It exits with go test's exit status.
//
//	go run ./internal/cmd/testsummary [go test flags] [packages]   # default ./...
//	make test                                                        # the same
//
// With -json (go test's own flag is added by testsummary) skips and their
// reasons are events; without -v, go test prints none of them.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs go test -json args, summarizes its events on stdout and returns
// go test's exit status (1 if it could not be started or was killed).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = []string{"./..."}
	}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.Command(goBin, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testsummary:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testsummary:", err)
		return 1
	}
	s := newSummary(stdout)
	rerr := s.read(out)
	werr := cmd.Wait()
	s.finish()
	if rerr != nil {
		fmt.Fprintln(stderr, "testsummary: reading go test's output:", rerr)
	}
	var ee *exec.ExitError
	switch {
	case werr == nil && rerr == nil:
		if s.failed > 0 {
			// go test reports failures in its status; a failed test
			// event with status 0 would be a contradiction: fail.
			fmt.Fprintf(stderr, "testsummary: %d failed test(s) but go test exited 0\n", s.failed)
			return 1
		}
		return 0
	case errors.As(werr, &ee) && ee.ExitCode() > 0:
		return ee.ExitCode()
	default:
		if werr != nil {
			fmt.Fprintln(stderr, "testsummary: go test:", werr)
		}
		return 1
	}
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
}

// test is one test's (or subtest's) output and result.
type test struct {
	name   string
	lines  []string
	result string // pass, fail, skip; "" while running
}

// pkg holds the tests of one package, by top-level test, in order.
type pkg struct {
	tests map[string]*test
	trees map[string][]outLine // top-level name → the output of the test and its subtests, in order
	order []string
}

// outLine is a line of output and the (sub)test that wrote it.
type outLine struct {
	t    *test
	text string
}

type skipped struct {
	pkg, test, reason string
}

type summary struct {
	w                       io.Writer
	pkgs                    map[string]*pkg
	skips                   []skipped
	passed, failed, skipped int
	pkgFailed, pkgOK        int
	// unfinished counts the failed tests that never ended (a timeout or
	// a crash of their package's test binary).
	unfinished int
}

func newSummary(w io.Writer) *summary { return &summary{w: w, pkgs: map[string]*pkg{}} }

// read consumes go test -json output; lines that are not JSON events are
// printed as they are.
func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			fmt.Fprintf(s.w, "%s\n", line)
			continue
		}
		s.event(ev)
	}
	return sc.Err()
}

func (s *summary) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{tests: map[string]*test{}, trees: map[string][]outLine{}}
		s.pkgs[name] = p
	}
	return p
}

func (p *pkg) test(name string) *test {
	t := p.tests[name]
	if t == nil {
		t = &test{name: name}
		p.tests[name] = t
		top, _, _ := strings.Cut(name, "/")
		if _, ok := p.trees[top]; !ok {
			p.order = append(p.order, top)
			p.trees[top] = nil
		}
	}
	return t
}

func (s *summary) event(ev event) {
	switch ev.Action {
	case "build-output":
		fmt.Fprint(s.w, ev.Output)
		return
	case "build-fail", "start", "run", "pause", "cont", "bench":
		return
	}
	if ev.Test == "" {
		switch ev.Action {
		case "output":
			// A passing package's PASS line is not printed without -v.
			if ev.Output != "PASS\n" {
				fmt.Fprint(s.w, ev.Output)
			}
		case "pass":
			s.pkgOK++
		case "fail":
			s.pkgFailed++
			// Tests that never ended (a timeout, a crash) failed: they
			// are counted, and print what they wrote.
			p := s.pkg(ev.Package)
			for _, t := range p.tests {
				if t.result == "" {
					t.result = "fail"
					s.failed++
					s.unfinished++
				}
			}
			for _, top := range p.order {
				if _, open := p.trees[top]; open && p.tests[top] != nil && p.tests[top].result == "fail" {
					s.printTree(p, top)
				}
			}
		}
		if ev.Action != "output" {
			delete(s.pkgs, ev.Package)
		}
		return
	}
	p := s.pkg(ev.Package)
	t := p.test(ev.Test)
	switch ev.Action {
	case "output":
		t.lines = append(t.lines, ev.Output)
		top, _, _ := strings.Cut(ev.Test, "/")
		p.trees[top] = append(p.trees[top], outLine{t, ev.Output})
	case "pass", "fail", "skip":
		t.result = ev.Action
		switch ev.Action {
		case "pass":
			s.passed++
		case "fail":
			s.failed++
		case "skip":
			s.skipped++
			s.skips = append(s.skips, skipped{pkg: ev.Package, test: ev.Test, reason: reason(t.lines)})
		}
		if !strings.Contains(ev.Test, "/") && ev.Action == "fail" {
			s.printTree(p, ev.Test)
		}
	}
}

// printTree prints the output of a top-level test and of its subtests
// that failed or never ended, as go test does without -v.
func (s *summary) printTree(p *pkg, top string) {
	for _, l := range p.trees[top] {
		if l.t.result != "pass" && l.t.result != "skip" && !strings.HasPrefix(l.text, "=== ") {
			fmt.Fprint(s.w, l.text)
		}
	}
	delete(p.trees, top)
}

// reason is what a skipped test wrote: its log lines without go test's
// own === and --- lines, each trimmed, joined by "; ".
func reason(lines []string) string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return "(no reason given)"
	}
	return strings.Join(out, " / ")
}

// finish prints the skipped tests and why, and the counts.
func (s *summary) finish() {
	sort.SliceStable(s.skips, func(i, j int) bool {
		if s.skips[i].pkg != s.skips[j].pkg {
			return s.skips[i].pkg < s.skips[j].pkg
		}
		return s.skips[i].test < s.skips[j].test
	})
	fmt.Fprintf(s.w, "\nskipped tests and why (%d):\n", len(s.skips))
	for _, k := range s.skips {
		fmt.Fprintf(s.w, "  %s %s\n      %s\n", k.pkg, k.test, k.reason)
	}
	if len(s.skips) == 0 {
		fmt.Fprintln(s.w, "  none")
	}
	if s.unfinished > 0 {
		fmt.Fprintf(s.w, "%d of the failed tests never ended (their package timed out or crashed: see its output above)\n", s.unfinished)
	}
	fmt.Fprintf(s.w, "tests: %d passed, %d failed, %d skipped; packages: %d ok, %d failed\n", s.passed, s.failed, s.skipped, s.pkgOK, s.pkgFailed)
}
