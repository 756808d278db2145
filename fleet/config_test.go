package fleet

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	good := "node: n1\nlisten: 10.0.0.2:7946\nca: ca.pem\ncert: n1.pem\nkey: n1-key.pem\npeers:\n  - {name: n2, address: 10.0.0.3:7946}\n"
	cfg, err := Load("/etc/lbc/fleet.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CA != filepath.Join("/etc/lbc", "ca.pem") || cfg.RefreshInterval() != DefaultRefresh || cfg.MaxExceptions != DefaultMaxExceptions || cfg.MaxSnapshotsPerSecond != DefaultMaxSnapshotsPerSecond {
		t.Fatalf("defaults or paths: %+v", cfg)
	}
	tests := []struct{ name, yaml, want string }{
		{"empty", "", "empty configuration"},
		{"unknown field", good + "bogus: 1\n", "bogus"},
		{"no node", strings.Replace(good, "node: n1\n", "", 1), "node is missing"},
		{"bad listen", strings.Replace(good, "10.0.0.2:7946", "10.0.0.2", 1), `fleet.yaml:2: listen: listen "10.0.0.2"`},
		{"no key", strings.Replace(good, "key: n1-key.pem\n", "", 1), "key is missing"},
		{"peer is self", strings.Replace(good, "name: n2", "name: n1", 1), "is this node's own"},
		{"duplicate peer", good + "  - {name: n2, address: 10.0.0.4:7946}\n", `name "n2" is also peers[0]`},
		{"bad peer port", strings.Replace(good, "10.0.0.3:7946", "10.0.0.3:0", 1), "out of range 1..65535"},
		{"bad refresh", good + "refresh: 1ms\n", `refresh "1ms"`},
		{"bound out of range", good + "maxExceptions: -1\n", "maxExceptions -1 out of range"},
		{"no peers", strings.Split(good, "peers:")[0], "no peers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("fleet.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
