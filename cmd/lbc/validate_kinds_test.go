package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateOtherKinds (issue 36): lbc validate checks bgp.yaml,
// fleet.yaml (with its CA, certificate and key) and gslb.yaml offline,
// told from their fields or by --kind, with every problem at its line.
func TestValidateOtherKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, _, err := runLBC(t, "fleet", "certs", "--out", dir, "n1", "n2"); err != nil {
		t.Fatal(err)
	}
	bgpOK := write("bgp.yaml", "localASN: 64512\nrouterID: 10.0.0.2\npeers:\n  - {address: 10.0.0.1, asn: 64500}\n")
	bgpBad := write("bgp-bad.yaml", "localASN: 64512\nrouterID: nope\npeers:\n  - {address: 10.0.0.1, asn: 64500}\n")
	fleetOK := write("fleet.yaml", "node: n1\nlisten: 127.0.0.1:7946\nca: ca.pem\ncert: n1.pem\nkey: n1-key.pem\npeers:\n  - {name: n2, address: 127.0.0.1:7947}\n")
	fleetWrongCert := write("fleet-n2.yaml", "node: n1\nlisten: 127.0.0.1:7946\nca: ca.pem\ncert: n2.pem\nkey: n2-key.pem\npeers:\n  - {name: n2, address: 127.0.0.1:7947}\n")
	fleetNoCA := write("fleet-noca.yaml", "node: n1\nlisten: 127.0.0.1:7946\nca: nothere/ca.pem\ncert: n1.pem\nkey: n1-key.pem\npeers:\n  - {name: n2, address: 127.0.0.1:7947}\n")
	fleetNoKey := write("fleet-nokey.yaml", "node: n1\nlisten: 127.0.0.1:7946\nca: ca.pem\ncert: n1.pem\nkey: missing.pem\npeers:\n  - {name: n2, address: 127.0.0.1:7947}\n")
	runCLICases(t, []cliCase{
		{"bgp told from its fields", []string{"validate", bgpOK}, "ok (bgp.yaml: AS 64512, 1 peer)", ""},
		{"bgp problem at its line", []string{"validate", bgpBad}, "", "bgp-bad.yaml:2"},
		{"fleet and its certificate", []string{"validate", fleetOK}, "ok (fleet.yaml: node n1, 1 peer,", ""},
		{"fleet: another node's certificate", []string{"validate", fleetWrongCert}, "", "cert " + filepath.Join(dir, "n2.pem") + " for node n1"},
		{"fleet: a missing key", []string{"validate", fleetNoKey}, "", "missing.pem: no such file or directory; lbc fleet certs --out DIR n1 makes the fleet CA (ca.pem) and the node's certificate and key (n1.pem, n1-key.pem) in DIR"},
		{"fleet: no CA yet", []string{"validate", fleetNoCA}, "", "no such file or directory; lbc fleet certs --out DIR n1 makes the fleet CA"},
		{"gslb", []string{"validate", "../../examples/gslb.yaml"}, "ok (gslb.yaml: 3 sites)", ""},
		{"the bgp example", []string{"validate", "../../examples/bgp.yaml"}, "ok (bgp.yaml: AS 64512, 1 peer)", ""},
		{"--kind overrides", []string{"validate", "--kind", "bgp", "../../examples/gslb.yaml"}, "", "gslb.yaml"},
		{"unknown kind", []string{"validate", "--kind", "dns", bgpOK}, "", `--kind "dns": one of lb, bgp, fleet, gslb`},
		{"--target is for lb.yaml", []string{"validate", "--target", "xdp", bgpOK}, "", "--target is for lb.yaml"},
		{"lb.yaml as before", []string{"validate", "../../examples/failover.yaml"}, "ok (1 service, 8 endpoints)", ""},
	}, nil)
}

// TestBGPExampleIsTheDocs: examples/bgp.yaml is the bgp.yaml that
// docs/fleet.md shows, so that the one a user validates is the one the
// docs explain.
func TestBGPExampleIsTheDocs(t *testing.T) {
	exampleIsDocsBlock(t, "bgp.yaml", "# bgp.yaml (decoded")
}

// exampleIsDocsBlock fails t unless examples/name ends with the yaml block
// of docs/fleet.md that starts with the line start (after the example's
// own comment lines), and returns the example.
func exampleIsDocsBlock(t *testing.T, name, start string) []byte {
	t.Helper()
	doc, err := os.ReadFile("../../docs/fleet.md")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\n"+start)
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatalf("docs/fleet.md has no %s block", name)
	}
	if !strings.HasSuffix(string(ex), start+block) {
		t.Errorf("examples/%s is not docs/fleet.md's %s block (after its own comment lines)", name, name)
	}
	return ex
}

// TestValidateWeightedNeedsWeights (issue 36, round three): validate of a
// WEIGHTED_MAGLEV file without --health passes, as the file is valid, but
// notes that compile and push need the weights (lbc compile -c
// examples/weighted.yaml fails where validate said ok); with --health, or
// for an unweighted file, no note.
func TestValidateWeightedNeedsWeights(t *testing.T) {
	const note = `note: WEIGHTED_MAGLEV services "api", "api6": lbc compile and lbc push need each endpoint's weight from --health FILE`
	for _, tc := range []struct {
		args []string
		note bool
	}{
		{[]string{"validate", "../../examples/weighted.yaml"}, true},
		{[]string{"validate", "--health", "../../examples/weighted-health.yaml", "../../examples/weighted.yaml"}, false},
		{[]string{"validate", "../../examples/failover.yaml"}, false},
	} {
		out, errw, err := runLBC(t, tc.args...)
		if err != nil || !strings.Contains(out, ": ok (") {
			t.Errorf("%v: %v\n%s", tc.args, err, out)
		}
		if strings.Contains(errw, note) != tc.note || (!tc.note && strings.Contains(errw, "note:")) {
			t.Errorf("%v: stderr %q, want the note: %v", tc.args, errw, tc.note)
		}
	}
}

// TestFleetExampleIsTheDocs (issue 36, round three): examples/fleet.yaml
// is docs/fleet.md's fleet.yaml block, and, beside the certificates lbc
// fleet certs makes for its nodes, validates as its comment says.
func TestFleetExampleIsTheDocs(t *testing.T) {
	ex := exampleIsDocsBlock(t, "fleet.yaml", "# fleet.yaml, beside")
	dir := t.TempDir()
	if _, _, err := runLBC(t, "fleet", "certs", "--out", dir, "n1", "n2", "n3"); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(f, ex, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errw, err := runLBC(t, "validate", f)
	if err != nil || !strings.Contains(out, "ok (fleet.yaml: node n1, 2 peers") {
		t.Errorf("lbc validate of examples/fleet.yaml beside its certificates: %v\n%s%s", err, out, errw)
	}
}
