package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
)

// lockedSim is a sim datapath on the wall clock, safe for the node's
// goroutines and the test's packets (as the controller's target lock
// makes a real one).
type lockedSim struct {
	mu    sync.Mutex
	d     *sim.Datapath
	start time.Time
}

func newLockedSim() *lockedSim {
	s := &lockedSim{start: time.Now()}
	s.d = sim.New(sim.Options{Now: s.now})
	return s
}

func (s *lockedSim) now() time.Duration { return time.Since(s.start) }

func (s *lockedSim) ReadConntrack(ctx context.Context) ([]targets.ConntrackEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.ReadConntrack(ctx)
}
func (s *lockedSim) WriteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.WriteConntrack(ctx, es)
}
func (s *lockedSim) DeleteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.DeleteConntrack(ctx, es)
}
func (s *lockedSim) apply(t testing.TB, prev, next *compiler.IR) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.d.Apply(context.Background(), compiler.DiffIR(prev, next)); err != nil {
		t.Fatal(err)
	}
}
func (s *lockedSim) process(t testing.TB, p targets.Packet) targets.Verdict {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.d.Process(context.Background(), p, s.now())
	if err != nil {
		t.Fatal(err)
	}
	return v
}
func (s *lockedSim) entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.Conntrack().Len()
}

// testFleet is nodes n1..nN on loopback, each with a sim datapath.
type testFleet struct {
	dir   string
	nodes []*Node
	dps   []*lockedSim
	cfgs  []*Config
	regs  []*prometheus.Registry
	// stop ends every node's Serve and waits for it (also at cleanup).
	stop func()
}

// newTestFleet writes certificates and a fleet.yaml per node (edit
// changes each before it is loaded) and starts the nodes; wrap, if
// given, stands between each node and its datapath.
func newTestFleet(t testing.TB, n int, edit func(i int, c *Config), wrap ...func(*lockedSim) targets.ConntrackTarget) *testFleet {
	t.Helper()
	return newTestFleetOpts(t, n, edit, nil, wrap...)
}

// newTestFleetOpts is newTestFleet with opt, if given, editing each
// node's Options before New.
func newTestFleetOpts(t testing.TB, n int, edit func(i int, c *Config), opt func(i int, o *Options), wrap ...func(*lockedSim) targets.ConntrackTarget) *testFleet {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for i := 1; i <= n; i++ {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	if _, err := WriteCerts(dir, append(names, "n9"), time.Hour); err != nil {
		t.Fatal(err)
	}
	// Listeners first: every node must know its peers' addresses.
	lns := make([]net.Listener, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	f := &testFleet{dir: dir}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	f.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(f.stop)
	for i := range n {
		var y strings.Builder
		fmt.Fprintf(&y, "node: %s\nlisten: %s\nca: ca.pem\ncert: %s.pem\nkey: %s-key.pem\nrefresh: 200ms\npeers:\n", names[i], lns[i].Addr(), names[i], names[i])
		for j := range n {
			if j != i {
				fmt.Fprintf(&y, "  - {name: %s, address: %q}\n", names[j], lns[j].Addr())
			}
		}
		path := filepath.Join(dir, names[i]+"-fleet.yaml")
		cfg, err := Load(path, []byte(y.String()))
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(i, cfg)
		}
		dp := newLockedSim()
		var ct targets.ConntrackTarget = dp
		for _, w := range wrap {
			ct = w(dp)
		}
		reg := prometheus.NewRegistry()
		o := Options{Config: cfg, Conntrack: ct, Registry: reg}
		if opt != nil {
			opt(i, &o)
		}
		node, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		f.nodes, f.dps, f.cfgs, f.regs = append(f.nodes, node), append(f.dps, dp), append(f.cfgs, cfg), append(f.regs, reg)
		wg.Add(1)
		go func() { defer wg.Done(); node.Serve(ctx, lns[i]) }()
	}
	return f
}

// silent is an edit that keeps node i from dialling its peers (their
// addresses are a port nobody listens on), so that a test can speak as
// node i: a peer has one Sync stream at a time.
func silent(t testing.TB, i int) func(int, *Config) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	return func(j int, c *Config) {
		if j == i {
			for k := range c.Peers {
				c.Peers[k].Address = dead
			}
		}
	}
}

// push applies next to every node's datapath and tells the node.
func (f *testFleet) push(t testing.TB, prev, next *compiler.IR) {
	for i, d := range f.dps {
		d.apply(t, prev, next)
		f.nodes[i].Pushed(next)
	}
}

// waitFor polls cond until it holds; the bound is generous (a loaded
// machine), the test's assertions are on what holds, not on time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func peerStatus(st controller.FleetStatus, name string) controller.FleetPeerStatus {
	for _, p := range st.Peers {
		if p.Name == name {
			return p
		}
	}
	return controller.FleetPeerStatus{}
}

// TestSyncInstallsAndWithdrawsRFLEET: n1's exceptions reach n2 and n3
// over mutual TLS and keep the flows on their backends there; when the
// backend recovers they are no exceptions any more and are withdrawn.
func TestSyncInstallsAndWithdrawsRFLEET(t *testing.T) {
	f := newTestFleet(t, 3, nil)
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	const flows = 200
	chosen := make([]uint32, flows)
	for i := range flows {
		f.dps[0].process(t, tcp(i, targets.FlagSYN))
		chosen[i] = f.dps[0].process(t, tcp(i, targets.FlagACK)).BackendID
	}
	v2 := compileLB(t, testLB, v1, "r3")
	f.push(t, v1, v2)
	live, _ := f.dps[0].ReadConntrack(context.Background())
	exc := exception.Compute(v2, live)
	want, even := len(exc), 0
	for _, e := range exc {
		if (e.Tuple.SrcPort-30000)%2 == 0 {
			even++
		}
	}
	if even == 0 || even == want {
		t.Fatalf("%d exceptions, %d of even flows: the test needs some of each", want, even)
	}
	for _, j := range []int{1, 2} {
		waitFor(t, fmt.Sprintf("n%d installs n1's %d exceptions", j+1, want), func() bool {
			return peerStatus(f.nodes[j].FleetStatus(), "n1").Installed == want
		})
		if p := peerStatus(f.nodes[j].FleetStatus(), "n1"); p.InstalledAt.Before(p.ReceivedAt) || p.ReceivedAt.IsZero() {
			t.Fatalf("n%d: n1's snapshot received at %v, installed at %v: want both, installed after received", j+1, p.ReceivedAt, p.InstalledAt)
		}
	}
	// n1 dies; its even flows move to n2, its odd ones to n3, whose
	// traffic makes the copies their own.
	for i := range flows {
		j := 1 + i%2
		if v := f.dps[j].process(t, tcp(i, targets.FlagACK)); v.BackendID != chosen[i] {
			t.Fatalf("flow %d moved to n%d: backend %d, want %d", i, j+1, v.BackendID, chosen[i])
		}
	}
	waitFor(t, "n1 sees n2's ack and a sync lag", func() bool {
		p := peerStatus(f.nodes[0].FleetStatus(), "n2")
		return p.Acked > 0 && p.SyncLag > 0 && p.Connected
	})
	// n2's traffic refreshed its copies: they are n2's own exceptions now.
	waitFor(t, fmt.Sprintf("n3 installs n2's %d exceptions (the copies n2's traffic made its own)", even), func() bool {
		return peerStatus(f.nodes[2].FleetStatus(), "n2").Installed == even
	})
	// r3 recovers: the entries agree with the ring again.
	v3 := compileLB(t, testLB, v2)
	f.push(t, v2, v3)
	waitFor(t, "n1 publishes no exception", func() bool { return f.nodes[0].FleetStatus().Published == 0 })
	waitFor(t, "n3 withdraws n1's and n2's", func() bool {
		st := f.nodes[2].FleetStatus()
		return peerStatus(st, "n1").Installed == 0 && peerStatus(st, "n2").Installed == 0
	})
	for _, p := range f.nodes[2].FleetStatus().Peers {
		if len(p.Refused) != 0 {
			t.Fatalf("n3 refused %v from %s", p.Refused, p.Name)
		}
	}
	if n := f.dps[2].entries(); n != flows/2 {
		t.Fatalf("n3's conntrack holds %d entries after the withdrawal, want the %d of its own flows", n, flows/2)
	}
}

// dialAs opens a Sync stream to node's address with the given
// certificate files (a peer of the caller's making).
func dialAs(t *testing.T, addr, caFile, certFile, keyFile, serverName string) (grpc.BidiStreamingClient[fleetpb.Batch, fleetpb.Ack], error) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := fleetpb.NewFleetClient(conn).Sync(ctx)
	if err != nil {
		return nil, err
	}
	// A rejected handshake shows on the first exchange.
	if err := st.Send(&fleetpb.Batch{Snapshot: 1, Last: true}); err != nil {
		_, rerr := st.Recv()
		return nil, errors.Join(err, rerr)
	}
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return st, nil
}

// TestRejectsUnauthenticatedPeersRFLEET: a peer with a certificate of
// another CA, and one of the fleet's CA for a name fleet.yaml does not
// list, are rejected before any exception is read, and counted; the
// fleet's own sync goes on.
func TestRejectsUnauthenticatedPeersRFLEET(t *testing.T) {
	f := newTestFleet(t, 2, nil)
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	other := t.TempDir()
	if _, err := WriteCerts(other, []string{"n2"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	addr := f.cfgs[0].Listen
	tests := []struct {
		name, ca, cert, key, reason string
	}{
		{"R-FLEET/wrong key: n2's name, another CA", filepath.Join(f.dir, "ca.pem"), filepath.Join(other, "n2.pem"), filepath.Join(other, "n2-key.pem"), RejectTLS},
		{"R-FLEET/the fleet CA's certificate for a node not listed", filepath.Join(f.dir, "ca.pem"), filepath.Join(f.dir, "n9.pem"), filepath.Join(f.dir, "n9-key.pem"), RejectUnknownPeer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.nodes[0].FleetStatus().Rejected[tt.reason]
			if _, err := dialAs(t, addr, tt.ca, tt.cert, tt.key, "n1"); err == nil {
				t.Fatal("the stream was accepted")
			}
			waitFor(t, "the rejection counted as "+tt.reason, func() bool { return f.nodes[0].FleetStatus().Rejected[tt.reason] > before })
		})
	}
	// The real n2 still syncs: its next snapshot is acked.
	acked := peerStatus(f.nodes[1].FleetStatus(), "n1").Acked
	f.nodes[1].Publish(context.Background(), time.Now())
	waitFor(t, "n1 acks n2's next snapshot", func() bool { return peerStatus(f.nodes[1].FleetStatus(), "n1").Acked > acked })
}

// TestRefusesWhatLocalConfigLacksRFLEET: exceptions naming a service,
// VIP or backend n1 does not have, or malformed, are refused and counted
// by reason, and nothing reaches n1's conntrack.
func TestRefusesWhatLocalConfigLacksRFLEET(t *testing.T) {
	f := newTestFleet(t, 2, silent(t, 1))
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	st, err := dialAs(t, f.cfgs[0].Listen, filepath.Join(f.dir, "ca.pem"), filepath.Join(f.dir, "n2.pem"), filepath.Join(f.dir, "n2-key.pem"), "n1")
	if err != nil {
		t.Fatal(err)
	}
	good := exception.Exception{Service: "web", Backend: "r3", BackendIP: netip.MustParseAddr("10.0.0.3"), Kind: compiler.Tuple5,
		Tuple: compiler.Tuple{Src: netip.MustParseAddr("198.51.100.1"), Dst: netip.MustParseAddr("203.0.113.10"), Proto: 6, SrcPort: 1234, DstPort: 80}, Idle: time.Second}
	with := func(f func(*exception.Exception)) *fleetpb.Exception { e := good; f(&e); return encodeException(e) }
	batch := &fleetpb.Batch{Snapshot: 100, Last: true, Exceptions: []*fleetpb.Exception{
		with(func(e *exception.Exception) { e.Service = "mail" }),
		with(func(e *exception.Exception) { e.Backend = "evil" }),
		with(func(e *exception.Exception) { e.BackendIP = netip.MustParseAddr("192.0.2.66") }),
		with(func(e *exception.Exception) { e.Tuple.Dst = netip.MustParseAddr("192.0.2.1") }),
		{Service: "web", Backend: "r3", BackendIp: []byte{1, 2, 3}, Kind: 5, Src: []byte{1, 2, 3, 4}, Dst: []byte{203, 0, 113, 10}},
	}}
	if err := st.Send(batch); err != nil {
		t.Fatal(err)
	}
	ack, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ack.Installed != 0 || ack.Refused != 4 || ack.Error != "" {
		t.Fatalf("ack %v: want 0 installed, 4 refused by resolve (and the malformed one before)", ack)
	}
	got := peerStatus(f.nodes[0].FleetStatus(), "n2").Refused
	want := map[string]uint64{"unknown-service": 1, "unknown-backend": 1, "backend-address": 1, "unknown-vip": 1, "malformed": 1}
	for r, n := range want {
		if got[r] < n {
			t.Errorf("refused[%s] = %d, want ≥ %d (all: %v)", r, got[r], n, got)
		}
	}
	if n := f.dps[0].entries(); n != 0 {
		t.Fatalf("n1's conntrack holds %d entries, want 0", n)
	}
	// The good one alone is installed.
	if err := st.Send(&fleetpb.Batch{Snapshot: 101, Last: true, Exceptions: []*fleetpb.Exception{encodeException(good)}}); err != nil {
		t.Fatal(err)
	}
	if ack, err = st.Recv(); err != nil || ack.Installed != 1 {
		t.Fatalf("ack %v, %v: want 1 installed", ack, err)
	}
	if n := f.dps[0].entries(); n != 1 {
		t.Fatalf("n1's conntrack holds %d entries, want 1", n)
	}
}

// TestBoundsRFLEET: a snapshot over maxExceptions ends the stream with an
// error naming the bound; one over maxSnapshotsPerSecond is refused
// whole, naming its bound; both are counted.
func TestBoundsRFLEET(t *testing.T) {
	f := newTestFleet(t, 2, func(i int, c *Config) {
		c.MaxExceptions, c.MaxSnapshotsPerSecond = 10, 1
		silent(t, 1)(i, c)
	})
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	dial := func() grpc.BidiStreamingClient[fleetpb.Batch, fleetpb.Ack] {
		st, err := dialAs(t, f.cfgs[0].Listen, filepath.Join(f.dir, "ca.pem"), filepath.Join(f.dir, "n2.pem"), filepath.Join(f.dir, "n2-key.pem"), "n1")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ex := func(i int) *fleetpb.Exception {
		return &fleetpb.Exception{Service: "web", Backend: "r1", BackendIp: []byte{10, 0, 0, 1}, Kind: 5, Src: []byte{198, 51, 100, byte(i)}, Dst: []byte{203, 0, 113, 10}, Proto: 6, SrcPort: 1000, DstPort: 80}
	}
	t.Run("R-FLEET/over maxExceptions", func(t *testing.T) {
		st := dial()
		for k := range 2 {
			b := &fleetpb.Batch{Snapshot: 7, Last: k == 1}
			for i := range 6 {
				b.Exceptions = append(b.Exceptions, ex(k*6+i))
			}
			if err := st.Send(b); err != nil {
				break
			}
		}
		ack, err := st.Recv()
		if err != nil || !strings.Contains(ack.Error, "more than 10 exceptions") || !strings.Contains(ack.Error, "maxExceptions") {
			t.Fatalf("ack %v, %v: want the bound named", ack, err)
		}
		if _, err := st.Recv(); err == nil || !strings.Contains(err.Error(), "maxExceptions") {
			t.Fatalf("stream ended with %v, want ResourceExhausted naming maxExceptions", err)
		}
		if got := peerStatus(f.nodes[0].FleetStatus(), "n2").Refused[RefuseOverBound]; got != 12 {
			t.Fatalf("refused[over-bound] = %d, want 12", got)
		}
	})
	t.Run("R-FLEET/a batch over MaxBatch", func(t *testing.T) {
		st := dial()
		b := &fleetpb.Batch{Snapshot: 8, Last: true}
		for i := range MaxBatch + 1 {
			b.Exceptions = append(b.Exceptions, ex(i))
		}
		st.Send(b)
		if _, err := st.Recv(); err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxBatch)) {
			t.Fatalf("stream ended with %v, want the batch bound %d named", err, MaxBatch)
		}
	})
	t.Run("R-FLEET/over maxSnapshotsPerSecond", func(t *testing.T) {
		st := dial() // its first exchange took the one token
		refused := false
		for s := uint64(20); s < 24 && !refused; s++ {
			if err := st.Send(&fleetpb.Batch{Snapshot: s, Last: true, Exceptions: []*fleetpb.Exception{ex(1)}}); err != nil {
				t.Fatal(err)
			}
			ack, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			refused = strings.Contains(ack.Error, "maxSnapshotsPerSecond")
		}
		if !refused {
			t.Fatal("four snapshots at once at a bound of 1 a second: none refused")
		}
		if peerStatus(f.nodes[0].FleetStatus(), "n2").Refused[RefuseRate] == 0 {
			t.Fatal("the rate refusal is not counted")
		}
	})
}

// slowConntrack is a datapath whose writes take their time before the
// datapath reads its clock, and whose reads return well after it read
// it: what a write or walk of 100k entries does. delay is well over two
// of the datapath's ticks.
type slowConntrack struct {
	*lockedSim
	delay time.Duration
}

func (s slowConntrack) ReadConntrack(ctx context.Context) ([]targets.ConntrackEntry, error) {
	es, err := s.lockedSim.ReadConntrack(ctx)
	time.Sleep(s.delay)
	return es, err
}

func (s slowConntrack) WriteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	time.Sleep(s.delay)
	return s.lockedSim.WriteConntrack(ctx, es)
}

// failR3 pushes testLB, opens flows TCP connections on n1, then takes r3
// out of the ring on every node; it returns that IR and how many of n1's
// flows are exceptions of it (some, or the test fails).
func (f *testFleet) failR3(t *testing.T, flows int) (*compiler.IR, int) {
	t.Helper()
	v1 := compileLB(t, testLB, nil)
	f.push(t, &compiler.IR{}, v1)
	for i := range flows {
		f.dps[0].process(t, tcp(i, targets.FlagSYN))
		f.dps[0].process(t, tcp(i, targets.FlagACK))
	}
	v2 := compileLB(t, testLB, v1, "r3")
	f.push(t, v1, v2)
	live, _ := f.dps[0].ReadConntrack(context.Background())
	want := len(exception.Compute(v2, live))
	if want == 0 {
		t.Fatal("no exception: the test needs some")
	}
	return v2, want
}

// TestCopiesStayCopiesWhenTheDatapathIsSlowRFLEET: a peer's exception
// installed here is not this node's own, however long the datapath's
// write and walk take (a copy that came back would, at the withdrawal,
// delete the owner's own quiet entries); n1's entries outlive the
// withdrawal of every copy.
func TestCopiesStayCopiesWhenTheDatapathIsSlowRFLEET(t *testing.T) {
	f := newTestFleet(t, 3, nil, func(dp *lockedSim) targets.ConntrackTarget { return slowConntrack{dp, 80 * time.Millisecond} })
	const flows = 100
	v2, want := f.failR3(t, flows)
	for _, j := range []int{1, 2} {
		waitFor(t, fmt.Sprintf("n%d installs n1's %d exceptions", j+1, want), func() bool {
			return peerStatus(f.nodes[j].FleetStatus(), "n1").Installed == want
		})
	}
	for _, j := range []int{1, 2} {
		f.nodes[j].Publish(context.Background(), time.Now())
		if got := f.nodes[j].FleetStatus().Published; got != 0 {
			t.Fatalf("n%d publishes %d exceptions, want 0: the copies of n1's that no packet refreshed are n1's", j+1, got)
		}
	}
	// r3 back: n1's entries agree with the ring; the copies are withdrawn,
	// n1's own entries stay (idle, within their timeout).
	v3 := compileLB(t, testLB, v2)
	f.push(t, v2, v3)
	for _, j := range []int{1, 2} {
		waitFor(t, fmt.Sprintf("n%d withdraws n1's copies", j+1), func() bool {
			return peerStatus(f.nodes[j].FleetStatus(), "n1").Installed == 0
		})
	}
	for range 3 { // rounds of every node's publishing and the peers' installing
		for j := range f.nodes {
			f.nodes[j].Publish(context.Background(), time.Now())
		}
		for j := range f.nodes {
			for _, p := range f.nodes[j].FleetStatus().Peers {
				if p.Installed != 0 {
					t.Fatalf("n%d holds %d exceptions of %s, want 0", j+1, p.Installed, p.Name)
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if n := f.dps[0].entries(); n != flows {
		t.Fatalf("n1's conntrack holds %d entries, want its %d own", n, flows)
	}
}

// lateReads returns the conntrack it read late while slow is set, as a
// loaded owner's snapshot reaches its peers long after the walk that
// made it: the exceptions' idle times then fall short by that much.
type lateReads struct {
	*lockedSim
	slow *atomic.Bool
}

func (s lateReads) ReadConntrack(ctx context.Context) ([]targets.ConntrackEntry, error) {
	es, err := s.lockedSim.ReadConntrack(ctx)
	if s.slow.Load() {
		time.Sleep(400 * time.Millisecond)
	}
	return es, err
}

// TestLateSnapshotKeepsMovedFlowsRFLEET: n1's exceptions are installed
// on n2 and the flows move there; n1's next snapshot arrives 400 ms after
// the walk that made it, so it says n1 saw the flows later than n2's
// traffic did. When r3 recovers and n1 withdraws them, n2 keeps every
// flow: its traffic made them its own, whatever the clocks say. (With
// the time-based test of the first version, n2 lost the 22 moved flows.)
func TestLateSnapshotKeepsMovedFlowsRFLEET(t *testing.T) {
	var slow atomic.Bool
	f := newTestFleet(t, 2, nil, func(dp *lockedSim) targets.ConntrackTarget { return lateReads{dp, &slow} })
	const flows = 100
	v2, want := f.failR3(t, flows)
	waitFor(t, "n2 installs", func() bool { return peerStatus(f.nodes[1].FleetStatus(), "n1").Installed == want })
	slow.Store(true)
	first := peerStatus(f.nodes[1].FleetStatus(), "n1").InstalledAt
	for i := range flows {
		f.dps[1].process(t, tcp(i, targets.FlagACK))
	}
	waitFor(t, "n2 installs a snapshot n1 sent 400 ms after its walk", func() bool {
		return peerStatus(f.nodes[1].FleetStatus(), "n1").InstalledAt.After(first.Add(300 * time.Millisecond))
	})
	slow.Store(false)
	v3 := compileLB(t, testLB, v2)
	f.push(t, v2, v3)
	waitFor(t, "n2 withdraws n1's", func() bool { return peerStatus(f.nodes[1].FleetStatus(), "n1").Installed == 0 })
	if n := f.dps[1].entries(); n != flows {
		t.Fatalf("n2 holds %d entries after n1's withdrawal, want the %d flows its traffic refreshed", n, flows)
	}
}

// withdrawn is n's lbc_fleet_exceptions_withdrawn_total for peer.
func (f *testFleet) withdrawn(t *testing.T, n int, peer string) float64 {
	t.Helper()
	mfs, err := f.regs[n].Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "lbc_fleet_exceptions_withdrawn_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" && l.GetValue() == peer {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestWithdrawalKeepsWhatAnotherPeerHoldsRFLEET: n1's flows move to n2,
// whose traffic makes their copies its own, so n3 holds each flow twice
// over: as n1's exception and as n2's, one entry. When n1 no longer
// holds them (r3 back on n1 only) n3 withdraws n1's and deletes nothing:
// n2 still holds every flow on the same backend.
func TestWithdrawalKeepsWhatAnotherPeerHoldsRFLEET(t *testing.T) {
	f := newTestFleet(t, 3, nil)
	const flows = 100
	v2, want := f.failR3(t, flows)
	for _, j := range []int{1, 2} {
		waitFor(t, fmt.Sprintf("n%d installs n1's %d exceptions", j+1, want), func() bool {
			return peerStatus(f.nodes[j].FleetStatus(), "n1").Installed == want
		})
	}
	for i := range flows {
		f.dps[1].process(t, tcp(i, targets.FlagACK))
	}
	waitFor(t, fmt.Sprintf("n3 installs n2's %d exceptions (the copies n2's traffic made its own)", want), func() bool {
		return peerStatus(f.nodes[2].FleetStatus(), "n2").Installed == want
	})
	v3 := compileLB(t, testLB, v2)
	f.dps[0].apply(t, v2, v3)
	f.nodes[0].Pushed(v3)
	waitFor(t, "n3 withdraws n1's", func() bool { return peerStatus(f.nodes[2].FleetStatus(), "n1").Installed == 0 })
	if w := f.withdrawn(t, 2, "n1"); w != 0 {
		t.Fatalf("n3 deleted %v entries at n1's withdrawal, want 0: n2 still holds every one", w)
	}
	if n := f.dps[2].entries(); n != want {
		t.Fatalf("n3 holds %d entries after n1's withdrawal, want n2's %d", n, want)
	}
}
