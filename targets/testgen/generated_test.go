package testgen

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/targets"
)

var update = flag.Bool("update", false, "rewrite testdata/results-*.txt from this run (after make testgen)")

// freshEnv names a directory of freshly generated tests (one
// subdirectory per target) to run instead of testdata, without the
// committed result lists (make check-generated-testgen).
const freshEnv = "LBC_TESTGEN_FRESH"

// TestGeneratedOnModels runs P4Testgen's tests (make testgen) on the model
// of their program: testdata/bmv2 (p4/lb.p4) on sim-p4, testdata/tofino
// and testdata/tofino2 (p4/tna/lb.p4, each with its build's P4Info) on
// sim.TNA. Every test inside the model's domain must agree with it; every
// test outside is listed with its reason. The list, one line per test,
// must be testdata/results-<target>.txt, which docs/tofino.md's tables
// count: a test that moves from agreeing to outside the domain (or back)
// is a change to review, not noise. A target not generated yet (no
// directory) is reported and skipped; an empty directory fails.
func TestGeneratedOnModels(t *testing.T) {
	for _, c := range []struct {
		target string
		prog   func() (Program, error)
	}{
		{"bmv2", V1Model},
		{"tofino", func() (Program, error) { return TNA(p4.TNAP4Info) }},
		{"tofino2", func() (Program, error) {
			info, err := os.ReadFile("../../p4/tna/build/tofino2/lb.p4info.txtpb")
			if err != nil {
				return Program{}, err
			}
			return TNA(info)
		}},
	} {
		t.Run(c.target, func(t *testing.T) {
			dir, golden := filepath.Join("testdata", c.target), filepath.Join("testdata", "results-"+c.target+".txt")
			if other := os.Getenv(freshEnv); other != "" {
				// make check-generated-testgen: a fresh generation, which
				// differs from the committed one (P4Testgen is not
				// deterministic here, docs/tofino.md): it must agree too.
				dir, golden = filepath.Join(other, c.target), ""
			}
			if _, err := os.Stat(dir); os.IsNotExist(err) && (c.target != "bmv2" || os.Getenv(freshEnv) != "") {
				// A fresh generation may cover some targets only
				// (TESTGEN_SPECS: make mutate's TNA step).
				t.Skipf("%s: not generated (make testgen)", dir)
			}
			prog, err := c.prog()
			if err != nil {
				t.Fatal(err)
			}
			runGenerated(t, prog, dir, golden)
		})
	}
}

func runGenerated(t *testing.T, prog Program, dir, golden string) {
	names, tests, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) == 0 {
		t.Fatalf("no generated tests in %s (make testgen)", dir)
	}
	var lines []string
	agree, outside := 0, 0
	kinds := map[targets.Action]int{} // the agreeing tests' verdicts
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
			if r.Probe == "" {
				kinds[r.Verdict.Action]++
			}
			note := ""
			if len(r.Notes) > 0 {
				note = " [" + strings.Join(r.Notes, "; ") + "]"
			}
			lines = append(lines, fmt.Sprintf("%s agrees: %s%s", r.Name, r.decision(), note))
		default:
			t.Errorf("%s", r)
			lines = append(lines, fmt.Sprintf("%s DISAGREES: expected %s, model %s", r.Name, r.Want, r.Got))
		}
	}
	t.Logf("%s: %d tests: %d agree with %s (%d forward, %d fallback, %d drop, %d not ours), %d outside its domain, %d disagree", dir, len(tests), agree, prog.Name,
		kinds[targets.Forward], kinds[targets.Fallback], kinds[targets.Drop], kinds[targets.NotOurs], outside, len(tests)-agree-outside)
	got := strings.Join(lines, "\n") + "\n"
	if golden == "" {
		return
	}
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./targets/testgen -run TestGeneratedOnModels -update writes it)", err)
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
