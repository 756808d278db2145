package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"google.golang.org/grpc/credentials"
)

// Mutual TLS with the fleet's CA authenticates both ends: a node serves
// only peers whose certificate the CA signed and whose name fleet.yaml
// lists, and dials a peer only when the certificate it presents is the
// CA's for that peer's name. TLS 1.3 only.

// tlsFiles reads the CA and this node's key pair.
func tlsFiles(cfg *Config) (*x509.CertPool, tls.Certificate, error) {
	caPEM, err := os.ReadFile(cfg.CA)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("ca: %w%s", err, certsHint(err, cfg))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, tls.Certificate{}, fmt.Errorf("ca %s: no PEM certificate in it", cfg.CA)
	}
	pair, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("cert %s and key %s: %w%s", cfg.Cert, cfg.Key, err, certsHint(err, cfg))
	}
	return pool, pair, nil
}

// certsHint tells, when a file is missing, how to make them all.
func certsHint(err error, cfg *Config) string {
	if !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return fmt.Sprintf("; lbc fleet certs --out DIR %s makes the fleet CA (ca.pem) and the node's certificate and key (%s.pem, %s-key.pem) in DIR", cfg.Node, cfg.Node, cfg.Node)
}

// serverTLS accepts a client whose certificate the CA signed.
func serverTLS(pool *x509.CertPool, pair tls.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
}

// clientTLS dials a server whose certificate the CA signed for peer.
func clientTLS(pool *x509.CertPool, pair tls.Certificate, peer string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: peer}
}

// Reasons a connecting peer is rejected (lbc_fleet_peers_rejected_total).
// The first three end the connection during the TLS handshake, before
// the peer could be told anything; the last two answer its Sync call
// with a gRPC status that says why.
const (
	RejectTLS          = "tls"           // no certificate, not the CA's, expired, not TLS at all
	RejectTimeout      = "timeout"       // no complete TLS handshake within the handshake timeout
	RejectBusy         = "busy"          // MaxHandshakes connections were in their handshake already
	RejectUnknownPeer  = "unknown-peer"  // the CA's, but not a peer fleet.yaml lists (PermissionDenied)
	RejectSecondStream = "second-stream" // the peer has a Sync stream open already (AlreadyExists)
)

// rejectReasons are every reason, for the metrics to start at 0.
var rejectReasons = []string{RejectTLS, RejectTimeout, RejectBusy, RejectUnknownPeer, RejectSecondStream}

// guardCreds is the server's TLS with every failed handshake counted, and
// at most cap(slots) handshakes at once: a connection that has not
// authenticated holds a slot until it does or the handshake timeout
// (grpc.ConnectionTimeout) ends it. A peer whose certificate is the CA's
// passes, whatever its name: the Sync call refuses a name fleet.yaml does
// not list with a status the peer can read.
type guardCreds struct {
	credentials.TransportCredentials
	slots    chan struct{}
	onReject func(reason, remote string, err error)
}

func (g *guardCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	default:
		err := fmt.Errorf("%d connections are in their TLS handshake already, the bound (fleet.Options.MaxHandshakes)", cap(g.slots))
		g.onReject(RejectBusy, c.RemoteAddr().String(), err)
		c.Close()
		return nil, nil, err
	}
	conn, info, err := g.TransportCredentials.ServerHandshake(c)
	if err != nil {
		reason := RejectTLS
		if errors.Is(err, os.ErrDeadlineExceeded) {
			reason = RejectTimeout
		}
		g.onReject(reason, c.RemoteAddr().String(), err)
		return nil, nil, err
	}
	return conn, info, nil
}

func (g *guardCreds) Clone() credentials.TransportCredentials {
	return &guardCreds{TransportCredentials: g.TransportCredentials.Clone(), slots: g.slots, onReject: g.onReject}
}

// ClientHandshake is the embedded one's (the server side is guarded).
func (g *guardCreds) ClientHandshake(ctx context.Context, authority string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return g.TransportCredentials.ClientHandshake(ctx, authority, c)
}

// peerName is the common name of the verified certificate in info.
func peerName(info credentials.AuthInfo) string {
	ti, ok := info.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return ti.State.VerifiedChains[0][0].Subject.CommonName
}

var errNoPeer = errors.New("no authenticated peer")

// CheckFiles reads the CA, certificate and key that cfg names, as lbc run
// --fleet will, and checks that the certificate is the CA's, for this
// node's name, for both ends of a connection: what `lbc validate --kind
// fleet` reports before a node is started.
func CheckFiles(cfg *Config) error {
	pool, pair, err := tlsFiles(cfg)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("cert %s: %w", cfg.Cert, err)
	}
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: cfg.Node, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			return fmt.Errorf("cert %s for node %s with ca %s: %w (lbc fleet certs --out DIR %s signs one with the CA in DIR)", cfg.Cert, cfg.Node, cfg.CA, err, cfg.Node)
		}
	}
	return nil
}
