package tofino

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteResources condenses a resource report (testdata/resources: an
// excerpt of p4c-barefoot -g's pipe/logs, stages out of order, a stage
// without tables after the last one, a PHV container without slices) into
// the summary written beside it, for a target it fits and one it does not.
func TestWriteResources(t *testing.T) {
	dir := filepath.Join("testdata", "resources")
	for _, c := range []struct {
		title  string
		stages int
		want   string
	}{
		{"a title line", 12, "fits.txt"},
		{"", 2, "over.txt"},
	} {
		want, err := os.ReadFile(filepath.Join(dir, c.want))
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := WriteResources(&got, dir, c.title, c.stages); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%d stages: summary\n%s\nwant (%s)\n%s", c.stages, got.Bytes(), c.want, want)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A report that is missing, malformed or not the compiler's is an error
// naming the file; so is a failed write. Nothing is written for a bad
// report.
func TestWriteResourcesErrors(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "resources", "phv.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, resources, want string
	}{
		{"missing", "", "resources.json: no such file"},
		{"malformed", `{"resources": {"mau": {"mau_stages": [`, "resources.json: unexpected end of JSON input"},
		{"not a report", `{"resources": {}}`, "resources.json: no MAU stages"},
		{"stage gap", `{"resources": {"mau": {"mau_stages": [{"stage_number": 0}, {"stage_number": 2}]}}}`, "stage numbers are not 0..1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "phv.json"), good, 0o644); err != nil {
				t.Fatal(err)
			}
			if c.resources != "" {
				if err := os.WriteFile(filepath.Join(dir, "resources.json"), []byte(c.resources), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			err := WriteResources(&out, dir, "title", 12)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %q before failing", out.String())
			}
		})
	}
	if err := WriteResources(failingWriter{}, filepath.Join("testdata", "resources"), "", 12); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("failed write: %v", err)
	}
}
