package mutation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	ms, err := Parse(strings.NewReader(`# a comment
mutation a
target: sim
file: x.go
why: breaks it
untestable: no tool sees it
- old 1
-   old 2
+ new

mutation b
target: tna
file: y.p4
why: gone
equivalent: nothing can see it
- only
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("%d mutations, want 2", len(ms))
	}
	a, b := ms[0], ms[1]
	if a.ID != "a" || a.Target != "sim" || a.File != "x.go" || a.Why != "breaks it" || len(a.Old) != 2 || a.Old[1] != "  old 2" || len(a.New) != 1 || a.Line != 2 || a.Untestable != "no tool sees it" {
		t.Errorf("a = %+v", a)
	}
	if b.Equivalent != "nothing can see it" || len(b.New) != 0 {
		t.Errorf("b = %+v", b)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"target: sim\n", `before the first "mutation ID" line`},
		{"mutation a\nfile: x\nwhy: y\n- z\n", "no target: line"},
		{"mutation a\ntarget: p4\n", `target "p4": want one of sim, sim-p4, sim-tna, v1model, tna`},
		{"mutation a\ntarget: sim\nwhy: y\n- z\n", "no file: line"},
		{"mutation a\ntarget: sim\nfile: x\n- z\n", "no why: line"},
		{"mutation a\ntarget: sim\nfile: x\nwhy: y\n", `no "- " lines`},
		{"mutation a\ntarget: sim\nfile: x\nwhy: y\n+ n\n- o\n", `a "- " line after the "+ " lines`},
		{"mutation a\ntarget: sim\nfile: x\nwhy: y\n- o\nmutation a\n", `mutation "a" is already defined on line 1`},
		{"mutation a\ncolour: red\n", `unknown field "colour"`},
		{"mutation a\njust words\n", `is neither a field`},
		{"mutation two words\n", `want one word`},
	} {
		_, err := Parse(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func TestApply(t *testing.T) {
	src := "func f() {\n\tif a {\n\t\treturn 1\n\t}\n\treturn 2\n}\n"
	got, err := Apply(src, Mutation{ID: "m", Old: []string{"if a {", "return 1"}, New: []string{"if !a {", "return 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "func f() {\n\tif !a {\n\treturn 3\n\t}\n\treturn 2\n}\n"; got != want {
		t.Errorf("Apply = %q, want %q (new lines indented as the first line replaced)", got, want)
	}
	if got, err := Apply(src, Mutation{ID: "m", Old: []string{"return 2"}}); err != nil || strings.Contains(got, "return 2") {
		t.Errorf("a deletion: %q, %v", got, err)
	}
	if _, err := Apply(src, Mutation{ID: "m", File: "f.go", Old: []string{"return 9"}}); err == nil || !strings.Contains(err.Error(), "are not there") {
		t.Errorf("missing lines: %v", err)
	}
	if _, err := Apply(src+src, Mutation{ID: "m", File: "f.go", Old: []string{"return 2"}}); err == nil || !strings.Contains(err.Error(), "occur 2 times") {
		t.Errorf("ambiguous lines: %v", err)
	}
}

// repoRoot is the module's root, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

func load(t *testing.T) []Mutation {
	t.Helper()
	f, err := os.Open("mutations.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		t.Fatalf("mutations.txt: %v", err)
	}
	return ms
}

// TestMutationsStillApply: every mutation of the list applies, once, to the
// committed sources, and changes them; so the list cannot rot while the
// code moves (CI runs this; `make mutate` runs the mutants).
func TestMutationsStillApply(t *testing.T) {
	root := repoRoot(t)
	ms := load(t)
	per := map[string]int{}
	for _, m := range ms {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.File)))
		if err != nil {
			t.Errorf("mutation %q (mutations.txt:%d): %v", m.ID, m.Line, err)
			continue
		}
		got, err := Apply(string(b), m)
		if err != nil {
			t.Errorf("mutations.txt:%d: %v", m.Line, err)
			continue
		}
		if got == string(b) {
			t.Errorf("mutation %q (mutations.txt:%d) changes nothing", m.ID, m.Line)
		}
		per[m.Target]++
	}
	for _, target := range Targets {
		if per[target] == 0 {
			t.Errorf("no mutation of target %s", target)
		}
	}
}
