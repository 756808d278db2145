package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
)

// connAs is a gRPC connection to addr with the certificate of name in
// dir (certDir's CA trusted), which dials at the first call.
func connAs(t *testing.T, addr, caDir, certDir, name string) *grpc.ClientConn {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, name+".pem"), filepath.Join(certDir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "n1", MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// wellFormed is the i-th of distinct exceptions that decode (Resolve is
// not reached: the snapshots that hold them stay unfinished).
func wellFormed(i int) *fleetpb.Exception {
	return &fleetpb.Exception{Service: "web", Backend: "r1", BackendIp: []byte{10, 0, 0, 1}, Kind: 5,
		Src: []byte{198, 51, byte(i >> 8), byte(i)}, Dst: []byte{203, 0, 113, 10}, Proto: 6, SrcPort: 1000, DstPort: 80}
}

// TestPeerBufferBoundRFLEET: one peer (n2's certificate) opens 3
// connections of 4 Sync streams each, and on every stream sends a
// snapshot of maxExceptions exceptions without its last batch. What n1
// holds buffered for n2 never exceeds maxExceptions (before: one
// snapshot in transit a stream, 12 × maxExceptions); every stream but
// one is refused with AlreadyExists; the one accepted releases what it
// held when it ends.
func TestPeerBufferBoundRFLEET(t *testing.T) {
	const bound, batch, conns, streams = 2000, 500, 3, 4
	f := newTestFleet(t, 2, func(i int, c *Config) {
		c.MaxExceptions = bound
		silent(t, 1)(i, c)
	})
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	in := f.nodes[0].in["n2"]

	// Sample what n1 holds for n2 for as long as the streams run.
	var peak int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, in.buffered.Load())
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ends := make(chan error, conns*streams)
	for range conns {
		client := fleetpb.NewFleetClient(connAs(t, f.cfgs[0].Listen, f.dir, f.dir, "n2"))
		for range streams {
			go func() {
				st, err := client.Sync(ctx)
				if err != nil {
					ends <- err
					return
				}
				for k := 0; k < bound; k += batch {
					b := &fleetpb.Batch{Snapshot: 1}
					for i := range batch {
						b.Exceptions = append(b.Exceptions, wellFormed(k+i))
					}
					if st.Send(b) != nil {
						break // refused: Recv says why
					}
				}
				_, err = st.Recv() // the accepted stream waits here for its last batch
				ends <- err
			}()
		}
	}
	// Every stream is accounted for once it was refused or n1 holds all
	// it sent.
	var refusals []error
	deadline := time.After(20 * time.Second)
	for len(refusals)*bound+int(in.buffered.Load()) != conns*streams*bound {
		select {
		case err := <-ends:
			if status.Code(err) != codes.AlreadyExists {
				t.Fatalf("a stream ended with %v, want AlreadyExists or to stay open", err)
			}
			refusals = append(refusals, err)
		case <-time.After(time.Millisecond):
		case <-deadline:
			t.Fatalf("not within 20 s: %d streams refused, %d exceptions buffered for n2", len(refusals), in.buffered.Load())
		}
	}
	close(stopSampling)
	<-sampled
	peak = max(peak, in.buffered.Load())
	if peak > bound {
		t.Fatalf("n1 held up to %d exceptions of n2's snapshots in transit over %d streams, want at most maxExceptions = %d", peak, conns*streams, bound)
	}
	if len(refusals) != conns*streams-1 {
		t.Fatalf("%d of %d streams refused, want all but one", len(refusals), conns*streams)
	}
	for _, err := range refusals {
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "one stream per peer") || !strings.Contains(msg, "peer n2") {
			t.Fatalf("refusal %q: want it to name the peer and the one-stream rule", msg)
		}
	}
	if got := metricValue(t, f.regs[0], "lbc_fleet_exceptions_buffered", "peer", "n2"); got != bound {
		t.Fatalf("lbc_fleet_exceptions_buffered{peer=n2} = %v, want %d", got, bound)
	}
	if got := f.nodes[0].FleetStatus().Rejected[RejectSecondStream]; got != conns*streams-1 {
		t.Fatalf("rejected[second-stream] = %d, want %d", got, conns*streams-1)
	}
	cancel()
	waitFor(t, "n1 releases what the ended stream held", func() bool { return in.buffered.Load() == 0 })
}

// metricValue is the value of the series of name with label = value in
// reg, or -1 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	s := series(t, reg)
	v, ok := s[fmt.Sprintf("%s{%s=%s}", name, label, value)]
	if !ok {
		return -1
	}
	return v
}

// series is every series reg gathers, as name{label=value,...} (labels
// in order) → value.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			key := mf.GetName()
			if len(ls) > 0 {
				key += "{" + strings.Join(ls, ",") + "}"
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[key] = v
		}
	}
	return out
}

// TestRefusedPeerIsToldWhyRFLEET: a peer that authenticates but is
// refused gets a gRPC status that names why and what to change; a peer
// whose TLS handshake fails cannot be told anything (docs/fleet.md).
func TestRefusedPeerIsToldWhyRFLEET(t *testing.T) {
	f := newTestFleet(t, 2, func(i int, c *Config) {
		c.MaxExceptions = 10
		silent(t, 1)(i, c)
	})
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	other := t.TempDir()
	if _, err := WriteCerts(other, []string{"n2"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	addr := f.cfgs[0].Listen
	// open starts a Sync stream as name and sends batches; the stream's
	// end is its first Recv's error.
	open := func(t *testing.T, certDir, name string, batches ...*fleetpb.Batch) (grpc.BidiStreamingClient[fleetpb.Batch, fleetpb.Ack], error) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		st, err := fleetpb.NewFleetClient(connAs(t, addr, f.dir, certDir, name)).Sync(ctx)
		if err != nil {
			return nil, err
		}
		for _, b := range batches {
			if st.Send(b) != nil {
				break
			}
		}
		return st, nil
	}
	// end is how the stream ends: a refused snapshot's ack comes before
	// the status; an ack of an installed snapshot means it was accepted.
	end := func(st grpc.BidiStreamingClient[fleetpb.Batch, fleetpb.Ack], err error) error {
		for err == nil {
			var a *fleetpb.Ack
			if a, err = st.Recv(); err == nil && a.Error == "" {
				return fmt.Errorf("the stream was accepted: ack %v", a)
			}
		}
		return err
	}
	big := &fleetpb.Batch{Snapshot: 3, Last: true}
	for i := range 11 {
		big.Exceptions = append(big.Exceptions, wellFormed(i))
	}
	tests := []struct {
		name string
		run  func(t *testing.T) error
		code codes.Code
		says []string
	}{
		{"R-FLEET/the CA's certificate for a name fleet.yaml does not list", func(t *testing.T) error {
			return end(open(t, f.dir, "n9", &fleetpb.Batch{Snapshot: 1, Last: true}))
		}, codes.PermissionDenied, []string{`"n9"`, "not a peer of n1", "add it to peers in n1's fleet.yaml"}},
		{"R-FLEET/a second stream of the same peer", func(t *testing.T) error {
			first, err := open(t, f.dir, "n2", &fleetpb.Batch{Snapshot: 1, Last: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.Recv(); err != nil {
				t.Fatalf("the first stream: %v", err)
			}
			second := end(open(t, f.dir, "n2", &fleetpb.Batch{Snapshot: 2, Last: true}))
			// The first stream's end frees n2's one stream.
			first.CloseSend()
			if err := end(first, nil); err != io.EOF {
				t.Fatalf("the first stream ended with %v, want EOF", err)
			}
			var again error
			waitFor(t, "a new stream of n2 accepted once the first ended", func() bool {
				st, err := open(t, f.dir, "n2", &fleetpb.Batch{Snapshot: 4, Last: true})
				if err == nil {
					_, again = st.Recv()
				}
				return err == nil && status.Code(again) != codes.AlreadyExists
			})
			if again != nil {
				t.Fatalf("the stream after the first ended: %v", again)
			}
			return second
		}, codes.AlreadyExists, []string{"peer n2", "one stream per peer", "end the other one first"}},
		{"R-FLEET/a snapshot over maxExceptions", func(t *testing.T) error {
			return end(open(t, f.dir, "n2", big))
		}, codes.ResourceExhausted, []string{"more than 10 exceptions", "raise maxExceptions in n1's fleet.yaml"}},
		{"R-FLEET/TLS fails (another CA): no status can reach the peer", func(t *testing.T) error {
			return end(open(t, other, "n2", &fleetpb.Batch{Snapshot: 1, Last: true}))
		}, codes.Unavailable, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The streams of the case before ended at its cleanup.
			waitFor(t, "n2 has no stream open to n1", func() bool { return f.nodes[0].in["n2"].stream.Load() == nil })
			err := tt.run(t)
			if status.Code(err) != tt.code {
				t.Fatalf("stream ended with %v, want %s", err, tt.code)
			}
			for _, s := range tt.says {
				if msg := status.Convert(err).Message(); !strings.Contains(msg, s) {
					t.Errorf("status %q does not say %q", msg, s)
				}
			}
		})
	}
}

// idleConn opens a TCP connection to addr that sends nothing.
func idleConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reads c until the server closes it, and returns when;
// it fails the test if c is still open after d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) time.Time {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection is still open after %v", d)
	}
	return time.Now()
}

// TestHandshakeTimeoutRFLEET: a TCP connection that never starts its TLS
// handshake is closed at the handshake timeout (300 ms here; before, gRPC's
// 120 s), and counted as a timeout.
func TestHandshakeTimeoutRFLEET(t *testing.T) {
	const timeout = 300 * time.Millisecond
	// n2 does not dial n1: the test's connection is n1's only one.
	f := newTestFleetOpts(t, 2, silent(t, 1), func(i int, o *Options) { o.HandshakeTimeout = timeout })
	t0 := time.Now() // before the server's accept, which starts its deadline
	c := idleConn(t, f.cfgs[0].Listen)
	// 5 s only tells a connection held for gRPC's default from one closed.
	if took := closedWithin(t, c, 5*time.Second).Sub(t0); took < timeout {
		t.Fatalf("closed after %v, before the handshake timeout of %v", took, timeout)
	}
	waitFor(t, "the timeout counted", func() bool { return f.nodes[0].FleetStatus().Rejected[RejectTimeout] == 1 })
}

// TestHandshakeLimitRFLEET: with MaxHandshakes connections in their
// handshake, the next is closed at once and counted as busy; once they
// end, a peer authenticates again.
func TestHandshakeLimitRFLEET(t *testing.T) {
	const limit = 2
	// The idle connections hold their slots for the test's length.
	f := newTestFleetOpts(t, 2, silent(t, 1), func(i int, o *Options) { o.MaxHandshakes, o.HandshakeTimeout = limit, time.Minute })
	n1 := f.nodes[0]
	var idle []net.Conn
	for range limit {
		idle = append(idle, idleConn(t, f.cfgs[0].Listen))
	}
	waitFor(t, fmt.Sprintf("%d connections in their handshake", limit), func() bool { return len(n1.handshakes) == limit })
	// 5 s only tells a connection held for the handshake timeout from one
	// closed at once.
	closedWithin(t, idleConn(t, f.cfgs[0].Listen), 5*time.Second)
	if got := n1.FleetStatus().Rejected[RejectBusy]; got != 1 {
		t.Fatalf("rejected[busy] = %d, want 1 (counted before the connection is closed)", got)
	}
	for _, c := range idle {
		c.Close()
	}
	waitFor(t, "the idle connections' slots freed", func() bool { return len(n1.handshakes) == 0 })
	f.push(t, &compiler.IR{}, compileLB(t, testLB, nil))
	if _, err := dialAs(t, f.cfgs[0].Listen, filepath.Join(f.dir, "ca.pem"), filepath.Join(f.dir, "n2.pem"), filepath.Join(f.dir, "n2-key.pem"), "n1"); err != nil {
		t.Fatalf("n2 after the idle connections ended: %v", err)
	}
}

// lockedBuffer is a log's output, read while the node writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// notTLS connects to addr, sends what no TLS server accepts, and waits
// until the server closes the connection.
func notTLS(t *testing.T, addr string) {
	t.Helper()
	c := idleConn(t, addr)
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: n1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 5*time.Second)
	c.Close()
}

// TestRejectionLogsRateLimitedRFLEET: of 40 connections that are not
// TLS, the first rejectLogBurst are logged, one by one; one line sums up
// the rest, by reason, when the window ends (here: when the node stops,
// inside a window of an hour).
func TestRejectionLogsRateLimitedRFLEET(t *testing.T) {
	const conns = 40
	var out lockedBuffer
	// n2 does not dial n1: a handshake of its cut short when the nodes
	// stop would be one more rejection.
	f := newTestFleetOpts(t, 2, silent(t, 1), func(i int, o *Options) {
		if i == 0 {
			o.Logger = slog.New(slog.NewTextHandler(&out, nil))
			o.rejectLogWindow = time.Hour // one window, however slow the machine
		}
	})
	for range conns {
		notTLS(t, f.cfgs[0].Listen)
	}
	waitFor(t, "every rejection counted", func() bool { return f.nodes[0].FleetStatus().Rejected[RejectTLS] == conns })
	f.stop()
	log := out.String()
	if got := strings.Count(log, `msg="fleet: peer rejected"`); got != rejectLogBurst {
		t.Fatalf("%d rejections logged one by one, want %d:\n%s", got, rejectLogBurst, log)
	}
	sum := regexp.MustCompile(`msg="fleet: … and (\d+) more rejections suppressed in the last [^"]+" tls=(\d+)\n`).FindAllStringSubmatch(log, -1)
	want := fmt.Sprint(conns - rejectLogBurst)
	if len(sum) != 1 || sum[0][1] != want || sum[0][2] != want {
		t.Fatalf("summaries %q, want one of %s more, all tls:\n%s", sum, want, log)
	}
}

// TestMetricsStartAtZeroRFLEET: every fleet series whose labels are known
// exists at 0 from the start (Prometheus' increase() sees no first
// event of a series that does not exist yet); the first rejection
// moves its counter from 0 to 1.
func TestMetricsStartAtZeroRFLEET(t *testing.T) {
	// No push: nothing is published, sent or received; n2 does not dial
	// n1, whose only connection is the test's.
	f := newTestFleet(t, 2, silent(t, 1))
	got := series(t, f.regs[0])
	want := []string{"lbc_fleet_exceptions_published", "lbc_fleet_snapshots_published_total"}
	for _, r := range []string{"tls", "timeout", "busy", "unknown-peer", "second-stream"} {
		want = append(want, "lbc_fleet_peers_rejected_total{reason="+r+"}")
	}
	for _, m := range []string{"exceptions_installed", "exceptions_installed_total", "exceptions_withdrawn_total", "exceptions_buffered", "sync_lag_seconds", "peer_connected"} {
		want = append(want, "lbc_fleet_"+m+"{peer=n2}")
	}
	for _, r := range []string{"unknown-service", "unknown-vip", "unknown-backend", "backend-address", "tracking", "expired", "malformed", "over-bound", "rate"} {
		want = append(want, "lbc_fleet_exceptions_refused_total{peer=n2,reason="+r+"}")
	}
	for _, k := range want {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s: %v (present: %v), want 0", k, v, ok)
		}
	}
	var extra []string
	for k := range got {
		if !slices.Contains(want, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		t.Errorf("series not listed here (add them, and to docs/fleet.md): %v", extra)
	}
	notTLS(t, f.cfgs[0].Listen)
	waitFor(t, "the rejection counted", func() bool {
		return metricValue(t, f.regs[0], "lbc_fleet_peers_rejected_total", "reason", "tls") == 1
	})
}
