package scenario

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lbc-dev/lbc/fleet/fleetpb"
)

// intrude joins the fleet as a wrong-key peer: from the router's
// namespace, with a certificate of another CA for the name of one of the
// node's peers, it dials the node's fleet port and offers an exception
// that would send a flow to r1. The node must refuse the connection (and
// count it); intrude returns nil only when the stream was refused.
func (e *fleetEnv) intrude(ctx context.Context, n *fleetNode) error {
	var as string
	for _, p := range e.nodes {
		if p != n {
			as = p.name
			break
		}
	}
	dir := filepath.Join(e.certs, "other-ca")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, as+".pem"), filepath.Join(dir, as+"-key.pem"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(e.certs, "ca.pem"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: n.name, MinVersion: tls.VersionTLS13})
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return nsDialer{e.rt}.DialContext(ctx, "tcp", addr)
	}
	conn, err := grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", n.ip, fleetPort), grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dial))
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := fleetpb.NewFleetClient(conn).Sync(ctx)
	if err != nil {
		return nil // refused at the handshake
	}
	b := &fleetpb.Batch{Snapshot: 1, Last: true, Exceptions: []*fleetpb.Exception{{Service: "web", Backend: "r1", BackendIp: e.hosts[0].IP.AsSlice(),
		Kind: 5, Src: e.clients[0].AsSlice(), Dst: fleetVIP.AsSlice(), Proto: 6, SrcPort: 9, DstPort: TCPPort}}}
	if err := st.Send(b); err != nil {
		return nil
	}
	if ack, err := st.Recv(); err == nil {
		return fmt.Errorf("node %s accepted a stream from a certificate of another CA for %q and acked snapshot %d (%d installed)", n.name, as, ack.Snapshot, ack.Installed)
	} else if errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
