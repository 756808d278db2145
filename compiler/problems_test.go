package compiler

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateProblems = flag.Bool("update-problems", false, "rewrite testdata/problems/*.txt from what Load reports (review the diff)")

// TestLoadProblems: each testdata/problems/NAME.yaml is loaded as lb.yaml;
// NAME.txt beside it holds every problem Load must report, in order, as
// `lbc validate` prints them.
func TestLoadProblems(t *testing.T) {
	files, err := filepath.Glob("testdata/problems/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got := validateOutput(t, data)
			wantFile := strings.TrimSuffix(f, ".yaml") + ".txt"
			if *updateProblems {
				if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// validateOutput is what `lbc validate -c lb.yaml` prints for data.
func validateOutput(t *testing.T, data []byte) string {
	t.Helper()
	_, err := Load("lb.yaml", data)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want Problems, got %v", err)
	}
	return "lbc: " + ps.Report("lb.yaml") + "\n"
}

// The README's validate example is testdata/problems/readme.yaml, and its
// output is what Load reports for it.
func TestREADMEValidateExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile("testdata/problems/readme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for what, block := range map[string]string{"input": string(in), "output": validateOutput(t, in)} {
		if !strings.Contains(string(readme), "\n"+block) {
			t.Errorf("README.md does not show the validate example's %s:\n%s", what, block)
		}
	}
}
