package soak

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// The soak's two configurations (with and without the reloaded backend)
// are valid, without warnings, and differ in that backend.
func TestConfigValid(t *testing.T) {
	dir := t.TempDir()
	for _, with := range []bool{false, true} {
		path := filepath.Join(dir, "lb.yaml")
		if err := writeConfig(path, 8080, with); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		d, err := compiler.Load(path, data)
		if err != nil {
			t.Fatalf("with %s = %v: %v", reloaded, with, err)
		}
		if len(d.Warnings) > 0 { // lbc run would log them at WARN: the soak would fail
			t.Errorf("with %s = %v: warnings: %v", reloaded, with, d.Warnings)
		}
		if got := strings.Contains(string(data), "name: "+reloaded+","); got != with {
			t.Errorf("with %s = %v: the file has it: %v", reloaded, with, got)
		}
	}
}

func TestMetric(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines.
go_goroutines 35
go_goroutines_extra 99
lbc_config_reloads_total{result="applied"} 3
lbc_config_reloads_total{result="rejected"} 0
lbc_errors_total{kind="push"} 1
lbc_errors_total{kind="read"} 2
`
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
		err    bool
	}{
		{"go_goroutines", nil, 35, false},
		{"lbc_config_reloads_total", map[string]string{"result": "applied"}, 3, false},
		{"lbc_config_reloads_total", map[string]string{"result": "rejected"}, 0, false},
		{"lbc_errors_total", nil, 3, false},
		{"lbc_pushes_total", map[string]string{"result": "error"}, 0, false}, // absent with labels: 0
		{"go_threads", nil, 0, true},                                         // absent without: an error
	} {
		got, err := metric(text, c.name, c.labels)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("metric(%s, %v) = %v, %v; want %v, error %v", c.name, c.labels, got, err, c.want, c.err)
		}
	}
}
