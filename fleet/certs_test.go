package fleet

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// verifies reports whether node's certificate in dir chains to the CA in
// caDir.
func verifies(t *testing.T, caDir, dir, node string) error {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	b, err := os.ReadFile(filepath.Join(dir, node+".pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: node, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

// TestWriteCertsKeepsTheCA (issue 36): a second run signs new nodes with
// the CA already there, so the first nodes trust them; no file is ever
// replaced, and a broken CA stops the run before anything is written.
func TestWriteCertsKeepsTheCA(t *testing.T) {
	dir := t.TempDir()
	if reused, err := WriteCerts(dir, []string{"n1", "n2"}, time.Hour); err != nil || reused {
		t.Fatalf("first run: reused %v, %v", reused, err)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	caKey, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))

	if reused, err := WriteCerts(dir, []string{"n3"}, time.Hour); err != nil || !reused {
		t.Fatalf("second run: reused %v, %v", reused, err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	caKey2, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if !bytes.Equal(ca, ca2) || !bytes.Equal(caKey, caKey2) {
		t.Fatal("the second run replaced the fleet CA")
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := verifies(t, dir, dir, n); err != nil {
			t.Errorf("%s does not chain to the fleet CA: %v", n, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "n3-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("n3-key.pem: %v, mode %v; want 0600", err, st.Mode())
	}

	n1, _ := os.ReadFile(filepath.Join(dir, "n1.pem"))
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, d string)
		nodes []string
		want  string
	}{
		{"a node that has a certificate", nil, []string{"n4", "n1"}, "node n1: n1.pem exists"},
		{"a CA without its key", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "ca.pem"), ca, 0o644)
		}, []string{"n4"}, "has ca.pem but not ca-key.pem"},
		{"a key without its CA", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "ca-key.pem"), caKey, 0o600)
		}, []string{"n4"}, "has ca-key.pem but not ca.pem"},
		{"a key that is not the CA's", func(t *testing.T, d string) {
			other := t.TempDir()
			if _, err := WriteCerts(other, nil, time.Hour); err != nil {
				t.Fatal(err)
			}
			k, _ := os.ReadFile(filepath.Join(other, "ca-key.pem"))
			os.WriteFile(filepath.Join(d, "ca.pem"), ca, 0o644)
			os.WriteFile(filepath.Join(d, "ca-key.pem"), k, 0o600)
		}, []string{"n4"}, "ca-key.pem is not the key of ca.pem"},
		{"a node certificate in place of the CA", func(t *testing.T, d string) {
			k, _ := os.ReadFile(filepath.Join(dir, "n1-key.pem"))
			os.WriteFile(filepath.Join(d, "ca.pem"), n1, 0o644)
			os.WriteFile(filepath.Join(d, "ca-key.pem"), k, 0o600)
		}, []string{"n4"}, "ca.pem is not a CA certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dir
			if tc.setup != nil {
				d = t.TempDir()
				tc.setup(t, d)
			}
			before, _ := os.ReadDir(d)
			_, err := WriteCerts(d, tc.nodes, time.Hour)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WriteCerts: %v, want %q", err, tc.want)
			}
			if after, _ := os.ReadDir(d); len(after) != len(before) {
				t.Errorf("a failed run wrote files: %d before, %d after", len(before), len(after))
			}
		})
	}
}

// TestWriteCertsNodeNotAfterCA: a node signed late by an existing CA does
// not outlive it.
func TestWriteCertsNodeNotAfterCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteCerts(dir, []string{"n1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCerts(dir, []string{"n2"}, 100*time.Hour); err != nil {
		t.Fatal(err)
	}
	read := func(name string) *x509.Certificate {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if ca, n2 := read("ca.pem"), read("n2.pem"); n2.NotAfter.After(ca.NotAfter) {
		t.Errorf("n2 valid until %s, after its CA (%s)", n2.NotAfter, ca.NotAfter)
	}
}
