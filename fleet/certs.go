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

// WriteCerts makes a CA and a certificate for each node in dir:
// ca.pem, ca-key.pem, and NODE.pem, NODE-key.pem (keys mode 0600).
func WriteCerts(dir string, nodes []string, validity time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, err := NewCA("lbc fleet CA", validity)
	if err != nil {
		return err
	}
	write := func(name string, p PEM) error {
		if err := os.WriteFile(filepath.Join(dir, name+".pem"), p.Cert, 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name+"-key.pem"), p.Key, 0o600)
	}
	if err := write("ca", ca); err != nil {
		return err
	}
	for _, n := range nodes {
		p, err := NewNodeCert(ca, n, validity)
		if err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
		if err := write(n, p); err != nil {
			return err
		}
	}
	return nil
}
