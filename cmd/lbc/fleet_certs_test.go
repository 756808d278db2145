package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFleetCertsAddsNodeWithTheSameCA (issue 36): a second `lbc fleet
// certs` on the same folder signs the new node with the CA there and says
// so; naming a node that has a certificate fails and changes nothing.
func TestFleetCertsAddsNodeWithTheSameCA(t *testing.T) {
	dir := t.TempDir()
	out, _, err := runLBC(t, "fleet", "certs", "--out", dir, "n1", "n2")
	if err != nil || !strings.Contains(out, "wrote a new CA") {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	out, _, err = runLBC(t, "fleet", "certs", "--out", dir, "n3")
	if err != nil || !strings.Contains(out, "signed a certificate and key for n3 with the existing CA") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(ca, ca2) {
		t.Fatal("ca.pem changed")
	}
	if _, _, err = runLBC(t, "fleet", "certs", "--out", dir, "n4", "n2"); err == nil || !strings.Contains(err.Error(), "n2.pem exists") {
		t.Fatalf("a node that has a certificate: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "n4.pem")); err == nil {
		t.Fatal("n4.pem written by a run that failed")
	}
}
