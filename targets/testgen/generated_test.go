package testgen

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/results-*.txt from this run (after make testgen)")

// TestGeneratedOnSimP4 runs P4Testgen's tests of p4/lb.p4 (testdata/bmv2,
// make testgen) on sim-p4. Every test inside the model's domain must
// agree with it; every test outside is listed with its reason. The list,
// one line per test, must be testdata/results-bmv2.txt, which
// docs/tofino.md's table counts: a test that moves from agreeing to
// outside the domain (or back) is a change to review, not noise.
func TestGeneratedOnSimP4(t *testing.T) {
	prog := v1model(t)
	names, tests, err := Load("testdata/bmv2")
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) == 0 {
		t.Fatal("no generated tests in testdata/bmv2 (make testgen)")
	}
	var lines []string
	agree, outside := 0, 0
	for i, tc := range tests {
		r, err := RunModel(prog, names[i], tc)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Domain != "":
			outside++
			lines = append(lines, fmt.Sprintf("%s outside: %s", r.Name, r.Domain))
		case r.Agree:
			agree++
			lines = append(lines, fmt.Sprintf("%s agrees: %s", r.Name, r.Verdict))
		default:
			t.Errorf("%s", r)
			lines = append(lines, fmt.Sprintf("%s DISAGREES: expected %s, model %s", r.Name, r.Want, r.Got))
		}
	}
	t.Logf("%d tests: %d agree with sim-p4, %d outside its domain, %d disagree", len(tests), agree, outside, len(tests)-agree-outside)
	got := strings.Join(lines, "\n") + "\n"
	const golden = "testdata/results-bmv2.txt"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./targets/testgen -run TestGeneratedOnSimP4 -update writes it)", err)
	}
	if string(want) != got {
		t.Errorf("results differ from %s (review, then -update):\n%s", golden, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only one side has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
