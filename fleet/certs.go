package fleet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Certificates for a fleet: one CA, and per node a certificate whose
// common name and DNS name are the node's name, for both ends of a TLS
// connection (a node serves its peers and dials them).

// PEM is a certificate and its key, PEM-encoded.
type PEM struct{ Cert, Key []byte }

// NewCA returns a self-signed fleet CA (ECDSA P-256) valid for validity.
func NewCA(name string, validity time.Duration) (PEM, error) {
	return issue(name, validity, nil, true)
}

// NewNodeCert returns a node certificate signed by ca.
func NewNodeCert(ca PEM, node string, validity time.Duration) (PEM, error) {
	return issue(node, validity, &ca, false)
}

func issue(name string, validity time.Duration, ca *PEM, isCA bool) (PEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return PEM{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
	}
	parent, signer := tmpl, any(key)
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	} else {
		tmpl.DNSNames = []string{name}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		caCert, caKey, err := parsePEM(*ca)
		if err != nil {
			return PEM{}, fmt.Errorf("CA: %w", err)
		}
		parent, signer = caCert, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return PEM{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, err
	}
	return PEM{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}

func parsePEM(p PEM) (*x509.Certificate, any, error) {
	cb, _ := pem.Decode(p.Cert)
	kb, _ := pem.Decode(p.Key)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// WriteCerts writes, in dir, a certificate and key for each node
// (NODE.pem, NODE-key.pem, the key mode 0600), signed by the fleet CA of
// dir (ca.pem, ca-key.pem). When dir has no CA it makes one; when it has
// one, the new nodes are signed with it (reused is true), so that the
// nodes already deployed keep trusting the new ones. It never replaces a
// file: a CA without its key, a key that is not the CA's, or a node that
// already has a certificate is an error, and then nothing is written. A
// node certificate does not outlive its CA.
func WriteCerts(dir string, nodes []string, validity time.Duration) (reused bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	exists := func(name string) bool {
		_, err := os.Lstat(filepath.Join(dir, name))
		return err == nil
	}
	for _, n := range nodes {
		for _, f := range []string{n + ".pem", n + "-key.pem"} {
			if exists(f) {
				return false, fmt.Errorf("node %s: %s exists in %s; a node keeps its certificate: remove %s.pem and %s-key.pem first to issue a new one", n, f, dir, n, n)
			}
		}
	}
	var ca PEM
	switch hasCert, hasKey := exists("ca.pem"), exists("ca-key.pem"); {
	case hasCert && hasKey:
		if ca, err = readCA(dir); err != nil {
			return false, err
		}
		reused = true
	case hasCert || hasKey:
		have, lack := "ca.pem", "ca-key.pem"
		if hasKey {
			have, lack = lack, have
		}
		return false, fmt.Errorf("%s has %s but not %s: a CA needs both to sign nodes; restore %s, or move %s away to make a new CA (every node then needs a new certificate)", dir, have, lack, lack, have)
	default:
		if ca, err = NewCA("lbc fleet CA", validity); err != nil {
			return false, err
		}
	}
	caCert, _, err := parsePEM(ca)
	if err != nil {
		return false, err
	}
	if left := time.Until(caCert.NotAfter); validity > left {
		validity = left
	}
	certs := make([]PEM, len(nodes))
	for i, n := range nodes {
		if certs[i], err = NewNodeCert(ca, n, validity); err != nil {
			return false, fmt.Errorf("node %s: %w", n, err)
		}
	}
	if !reused {
		if err := writeNew(dir, "ca", ca); err != nil {
			return false, err
		}
	}
	for i, n := range nodes {
		if err := writeNew(dir, n, certs[i]); err != nil {
			return reused, err
		}
	}
	return reused, nil
}

// readCA reads and checks the CA of dir: a CA certificate, still valid,
// with its own key.
func readCA(dir string) (PEM, error) {
	var ca PEM
	var err error
	if ca.Cert, err = os.ReadFile(filepath.Join(dir, "ca.pem")); err != nil {
		return PEM{}, err
	}
	if ca.Key, err = os.ReadFile(filepath.Join(dir, "ca-key.pem")); err != nil {
		return PEM{}, err
	}
	cert, key, err := parsePEM(ca)
	if err != nil {
		return PEM{}, fmt.Errorf("the CA in %s (ca.pem, ca-key.pem): %w", dir, err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	switch {
	case !cert.IsCA:
		return PEM{}, fmt.Errorf("%s: ca.pem is not a CA certificate", dir)
	case !ok || !pub.Equal(key.(*ecdsa.PrivateKey).Public()):
		return PEM{}, fmt.Errorf("%s: ca-key.pem is not the key of ca.pem", dir)
	case time.Now().After(cert.NotAfter):
		return PEM{}, fmt.Errorf("%s: the CA expired on %s; move ca.pem and ca-key.pem away to make a new CA (every node then needs a new certificate)", dir, cert.NotAfter.Format(time.DateOnly))
	}
	return ca, nil
}

// writeNew writes name.pem and name-key.pem, failing rather than
// replacing a file that appeared meanwhile.
func writeNew(dir, name string, p PEM) error {
	for _, f := range []struct {
		file string
		data []byte
		mode os.FileMode
	}{{name + ".pem", p.Cert, 0o644}, {name + "-key.pem", p.Key, 0o600}} {
		fh, err := os.OpenFile(filepath.Join(dir, f.file), os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return err
		}
		_, err = fh.Write(f.data)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
