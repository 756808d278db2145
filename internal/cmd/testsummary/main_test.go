package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryOfRecordedRun: a recorded `go test -json ./...` of a module
// with a passing, a skipping and a failing test (testdata/example.json)
// is printed as go test prints it without -v, plus the skips and why.
func TestSummaryOfRecordedRun(t *testing.T) {
	f, err := os.Open("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	s := newSummary(&out)
	if err := s.read(f); err != nil {
		t.Fatal(err)
	}
	s.finish()
	got := out.String()
	for _, want := range []string{
		"    a_test.go:8: boom\n--- FAIL: TestSub/bad (0.00s)\n--- FAIL: TestSub (0.00s)\nFAIL\nFAIL\texample.com/tj/a\t",
		"ok  \texample.com/tj/b\t",
		"?   \texample.com/tj/c\t[no test files]\n",
		"skipped tests and why (2):\n  example.com/tj/a TestSkip\n      a_test.go:4: no switch here: because\n  example.com/tj/a TestSub/skipped\n      a_test.go:7: sub reason / second line\n",
		"tests: 3 passed, 2 failed, 2 skipped; packages: 1 ok, 1 failed\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"=== RUN", "hello", "--- PASS", "--- SKIP", "\nPASS\n"} {
		if strings.Contains(got, bad) {
			t.Errorf("output has %q, which go test without -v does not print:\n%s", bad, got)
		}
	}
}

// TestExitStatusIsGoTests: run returns go test's exit status, 1 for a
// failing test, 0 when it passes, and lists the skip either way.
func TestExitStatusIsGoTests(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":      "module example.com/m\n\ngo 1.22\n",
		"m_test.go":   "package m\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\nfunc TestMaybe(t *testing.T) {\n\tif os.Getenv(\"TS_FAIL\") != \"\" {\n\t\tt.Fatal(\"asked to fail\")\n\t}\n}\n\nfunc TestSkip(t *testing.T) { t.Skip(\"the reason\") }\n",
		"go.sum":      "",
		"doc_test.go": "package m\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	for _, tc := range []struct {
		fail   string
		status int
		line   string
	}{{"", 0, "ok  \texample.com/m\t"}, {"1", 1, "FAIL\texample.com/m\t"}} {
		t.Setenv("TS_FAIL", tc.fail)
		var out, errw bytes.Buffer
		if got := run([]string{"-count=1", "./..."}, &out, &errw); got != tc.status {
			t.Errorf("TS_FAIL=%q: exit status %d, want %d\n%s%s", tc.fail, got, tc.status, out.String(), errw.String())
		}
		if !strings.Contains(out.String(), tc.line) || !strings.Contains(out.String(), "TestSkip\n      m_test.go:14: the reason") {
			t.Errorf("TS_FAIL=%q: output lacks %q or the skip's reason:\n%s", tc.fail, tc.line, out.String())
		}
	}
}

// TestTimedOutTestsCountAsFailed (issue 36): a package that times out
// leaves its running tests without a result; they are counted as failed,
// said to have never ended, and their output is printed.
func TestTimedOutTestsCountAsFailed(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/h\n\ngo 1.22\n",
		"go.sum": "",
		"h_test.go": "package h\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\nfunc TestQuick(t *testing.T) {}\n\n" +
			"func TestHang(t *testing.T) {\n\tt.Log(\"waiting for nothing\")\n\tt.Run(\"inner\", func(t *testing.T) { time.Sleep(time.Hour) })\n}\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	var out, errw bytes.Buffer
	if got := run([]string{"-count=1", "-timeout=2s", "./..."}, &out, &errw); got == 0 {
		t.Fatalf("a timed-out package: exit status 0\n%s", out.String())
	}
	for _, want := range []string{
		"h_test.go:11: waiting for nothing",
		"2 of the failed tests never ended",
		"tests: 1 passed, 2 failed, 0 skipped; packages: 0 ok, 1 failed\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
