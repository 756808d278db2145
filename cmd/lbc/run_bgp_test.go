package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunBGPConfigRejected: lbc run refuses a bad bgp.yaml before it
// touches a datapath, with every problem, its line and field.
func TestRunBGPConfigRejected(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bgp.yaml")
	if err := os.WriteFile(f, []byte("localASN: 64512\nrouterID: 10.0.0.2\npeers:\n  - address: 10.0.0.1\n    asn: 64500\n    holdTime: 1s\n    pasword: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runLBC(t, "run", "-c", "../../examples/failover.yaml", "--bgp", f)
	if err == nil {
		t.Fatal("lbc run accepted a bad bgp.yaml")
	}
	for _, want := range []string{"--bgp " + f, `bgp.yaml:7: peers[0].pasword: unknown field (did you mean "password"?); known fields of a peer`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
