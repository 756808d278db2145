package fleet

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/fleet/exception"
	"github.com/lbc-dev/lbc/fleet/fleetpb"
	"github.com/lbc-dev/lbc/targets"
)

// Options configure a Node.
type Options struct {
	Config *Config
	// Conntrack is the node's datapath conntrack (controller.Conntrack).
	Conntrack targets.ConntrackTarget
	Logger    *slog.Logger
	// Registry receives the metrics; nil: none.
	Registry prometheus.Registerer
	// HandshakeTimeout bounds a connection's TLS and HTTP/2 handshake
	// (0: DefaultHandshakeTimeout); MaxHandshakes bounds the connections
	// in their handshake at once (0: DefaultMaxHandshakes).
	HandshakeTimeout time.Duration
	MaxHandshakes    int

	// rejectLogWindow is the rate limit's window (0:
	// DefaultRejectLogWindow); tests lengthen it.
	rejectLogWindow time.Duration
}

// Defaults of the fleet port's guard against connections that do not
// authenticate: a TLS 1.3 handshake on a network of nodes takes
// milliseconds, and a fleet has few peers.
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultMaxHandshakes    = 64
)

// The server's keepalive: a peer's connection that stops answering is
// dropped within keepaliveTime + keepaliveTimeout, and with it the peer's
// Sync stream.
const (
	keepaliveTime    = 5 * time.Second
	keepaliveTimeout = 5 * time.Second
)

// Node is one fleet node's sharing: it publishes the exceptions of its
// datapath's conntrack to its peers and installs theirs.
type Node struct {
	cfg  *Config
	log  *slog.Logger
	ct   targets.ConntrackTarget
	m    *metrics
	pool *x509.CertPool
	pair tls.Certificate

	handshakeTimeout time.Duration
	handshakes       chan struct{} // a slot per connection in its handshake
	warns            *warnLimiter

	trigger chan struct{} // a push changed a ring or a backend: publish
	repush  chan struct{} // the IR changed: install the peers' again
	ready   chan struct{} // closed at the first Pushed
	once    sync.Once

	// install serializes writes to the datapath's conntrack and the
	// inbound state they keep.
	install sync.Mutex
	in      map[string]*inbound

	mu       sync.Mutex // guards what follows
	ir       *compiler.IR
	irKey    [32]byte
	pushedAt time.Time
	snap     *snapshot
	out      map[string]*sender
	rejected map[string]uint64
	problem  string
}

// snapshot is one computation of this node's exceptions.
type snapshot struct {
	seq uint64
	// trigger is when what it answers happened: the push's end, or the
	// refresh tick.
	trigger    time.Time
	exceptions []exception.Exception
}

// inbound is what one peer sent and this node installed.
type inbound struct {
	snapshot   uint64
	exceptions []exception.Exception // its last complete snapshot
	receivedAt time.Time
	// installedAt is when the install of that snapshot ended.
	installedAt time.Time
	// installed is this node's entry for each of the peer's exceptions
	// it installed, in this node's IDs.
	installed map[exception.Key]targets.ConntrackEntry
	refused   map[string]uint64
	// tokens is the peer's snapshot budget (MaxSnapshotsPerSecond).
	tokens float64
	last   time.Time

	// stream is the peer's one Sync stream, nil while it has none: what
	// a peer holds buffered here is bounded per peer, not per stream.
	stream atomic.Pointer[openStream]
	// buffered is how many exceptions of the snapshot in transit the
	// stream holds.
	buffered atomic.Int64
}

// openStream is a peer's Sync stream, for the refusal of a second one.
type openStream struct {
	remote string
	since  time.Time
}

// What an installed exception is, this node's datapath records: it
// stores a peer's entry as a copy (targets.ConntrackEntry.Copy), and the
// first packet of this node that refreshes the entry clears the mark. A
// copy is the peer's to publish; an entry whose mark this node's traffic
// cleared is this node's own (the flow moved here) and is published in
// turn; a withdrawal removes only entries still marked. No clock is
// compared: the exception's idle time, late by however long the snapshot
// took to arrive, sets only when the entry ages out.

// New checks the certificates and returns a node; Run starts it.
func New(opts Options) (*Node, error) {
	if opts.Config == nil || opts.Conntrack == nil {
		return nil, fmt.Errorf("fleet: no configuration or no datapath conntrack")
	}
	pool, pair, err := tlsFiles(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && leaf.Subject.CommonName != opts.Config.Node {
		return nil, fmt.Errorf("fleet: cert %s is for %q, but node is %q: the peers would refuse it", opts.Config.Cert, leaf.Subject.CommonName, opts.Config.Node)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.HandshakeTimeout < 0 || opts.MaxHandshakes < 0 {
		return nil, fmt.Errorf("fleet: handshake timeout %v and max handshakes %d: want 0 (the defaults, %v and %d) or more", opts.HandshakeTimeout, opts.MaxHandshakes, DefaultHandshakeTimeout, DefaultMaxHandshakes)
	}
	n := &Node{cfg: opts.Config, log: opts.Logger, ct: opts.Conntrack, m: newMetrics(opts.Registry), pool: pool, pair: pair,
		handshakeTimeout: cmp.Or(opts.HandshakeTimeout, DefaultHandshakeTimeout),
		handshakes:       make(chan struct{}, cmp.Or(opts.MaxHandshakes, DefaultMaxHandshakes)),
		warns:            newWarnLimiter(opts.Logger, cmp.Or(opts.rejectLogWindow, DefaultRejectLogWindow)),
		trigger:          make(chan struct{}, 1), repush: make(chan struct{}, 1), ready: make(chan struct{}),
		in: map[string]*inbound{}, out: map[string]*sender{}, rejected: map[string]uint64{}}
	for _, p := range opts.Config.Peers {
		n.out[p.Name] = newSender(n, p)
		n.in[p.Name] = &inbound{installed: map[exception.Key]targets.ConntrackEntry{}, refused: map[string]uint64{}, tokens: float64(opts.Config.MaxSnapshotsPerSecond)}
	}
	n.m.zero(opts.Config.Peers)
	return n, nil
}

var _ controller.FleetSharer = (*Node)(nil)

// Pushed implements controller.FleetSharer: a push that changed a ring,
// a backend's state or an epoch publishes at once; any new IR installs
// the peers' exceptions again (their local IDs and epochs may differ).
func (n *Node) Pushed(ir *compiler.IR) {
	key := stateKey(ir)
	n.mu.Lock()
	changed := key != n.irKey
	n.ir, n.irKey = ir, key
	if changed {
		n.pushedAt = time.Now()
	}
	n.mu.Unlock()
	n.once.Do(func() {
		n.warnRefresh(ir)
		close(n.ready)
	})
	if changed {
		signal(n.trigger)
		signal(n.repush)
	}
}

// warnRefresh warns when Refresh is not well inside (a quarter of) the
// shortest idle timeout: an installed exception whose flow is quiet at
// its owner could age out here between two refreshes.
func (n *Node) warnRefresh(ir *compiler.IR) {
	var shortest time.Duration
	for _, s := range ir.Services {
		if d := time.Duration(s.IdleTimeoutSec) * time.Second; d > 0 && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	if shortest > 0 && n.cfg.RefreshInterval() > shortest/4 {
		n.log.Warn("fleet: refresh is not well inside the shortest idle timeout (at most a quarter of it)", "refresh", n.cfg.RefreshInterval(), "idleTimeout", shortest)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// stateKey identifies what decides which entries are exceptions and how
// a peer's resolve: rings, epochs, backends and their state.
func stateKey(ir *compiler.IR) [32]byte {
	h := sha256.New()
	fmt.Fprint(h, len(ir.Services), len(ir.Backends), ir.VIPs)
	for _, s := range ir.Services {
		fmt.Fprint(h, s.ID, s.Name, s.Epoch, s.ActiveHalf, s.RingSize, s.RingKey, s.NoBackends, s.IdleTimeoutSec, s.Classes)
		if s.RingKey == 0 {
			fmt.Fprint(h, ir.Index().Ring(s.ID)) // no ring key: the ring itself
		}
	}
	for _, b := range ir.Backends {
		fmt.Fprint(h, b.ID, b.ServiceID, b.Name, b.IP, b.Healthy, b.Draining, b.Deadline)
	}
	return [32]byte(h.Sum(nil))
}

// Run serves the fleet port, streams this node's exceptions to every peer
// and republishes every Refresh, until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", n.cfg.Listen)
	if err != nil {
		return fmt.Errorf("fleet: listen %s: %w", n.cfg.Listen, err)
	}
	return n.Serve(ctx, ln)
}

// Serve is Run on a listener of the caller's.
func (n *Node) Serve(ctx context.Context, ln net.Listener) error {
	creds := &guardCreds{TransportCredentials: credentials.NewTLS(serverTLS(n.pool, n.pair)), slots: n.handshakes, onReject: n.reject}
	// ConnectionTimeout is gRPC's deadline on a new connection's TLS and
	// HTTP/2 handshake (its default is 120 s).
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ConnectionTimeout(n.handshakeTimeout), grpc.MaxRecvMsgSize(maxMessage), grpc.MaxConcurrentStreams(4),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}))
	fleetpb.RegisterFleetServer(srv, &service{n: n})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(ln) }()
	for _, s := range n.out {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); n.reinstallLoop(ctx) }()
	n.log.Info("fleet: serving peers", "listen", ln.Addr().String(), "node", n.cfg.Node, "peers", len(n.cfg.Peers))
	n.publishLoop(ctx)
	srv.Stop()
	wg.Wait()
	n.warns.flush()
	return nil
}

// reject counts a rejected connection or stream, and logs it within the
// rate limit.
func (n *Node) reject(reason, remote string, err error) {
	n.m.rejected.WithLabelValues(reason).Inc()
	n.mu.Lock()
	n.rejected[reason]++
	n.mu.Unlock()
	n.warns.warn(reason, "fleet: peer rejected", "reason", reason, "remote", remote, "err", err)
}

// publishLoop publishes after each push that changed the tables' state
// and every Refresh.
func (n *Node) publishLoop(ctx context.Context) {
	select {
	case <-n.ready:
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(n.cfg.RefreshInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.trigger:
			n.mu.Lock()
			at := n.pushedAt
			n.mu.Unlock()
			n.Publish(ctx, at)
		case <-tick.C:
			n.Publish(ctx, time.Now())
		}
	}
}

// Publish computes this node's exceptions from the datapath's conntrack
// now and hands the snapshot to every peer's sender; trigger dates what
// it answers (for the sync lag).
func (n *Node) Publish(ctx context.Context, trigger time.Time) {
	n.mu.Lock()
	ir := n.ir
	n.mu.Unlock()
	if ir == nil {
		return
	}
	entries, err := n.readOwn(ctx)
	if err != nil {
		n.setProblem(fmt.Errorf("read conntrack: %w", err))
		return
	}
	exc := exception.Compute(ir, entries)
	n.mu.Lock()
	seq := uint64(1)
	if n.snap != nil {
		seq = n.snap.seq + 1
	}
	s := &snapshot{seq: seq, trigger: trigger, exceptions: exc}
	n.snap = s
	n.problem = ""
	n.mu.Unlock()
	n.m.published.Set(float64(len(exc)))
	n.m.snapshots.Inc()
	for _, o := range n.out {
		o.offer(s)
	}
}

// readOwn reads the datapath's conntrack and drops the copies of a
// peer's exceptions that no packet has refreshed here: they are the
// peer's to publish. A copy that this node's traffic refreshed (the flow
// moved here) is its own now.
func (n *Node) readOwn(ctx context.Context) ([]targets.ConntrackEntry, error) {
	entries, err := n.ct.ReadConntrack(ctx)
	out := entries[:0]
	for _, e := range entries {
		if !e.Copy {
			out = append(out, e)
		}
	}
	return out, err
}

func (n *Node) setProblem(err error) {
	n.mu.Lock()
	n.problem = err.Error()
	n.mu.Unlock()
	n.log.Error("fleet: "+err.Error(), "node", n.cfg.Node)
}

// reinstallLoop installs every peer's last snapshot again after the IR
// changed.
func (n *Node) reinstallLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.repush:
			for _, p := range n.cfg.Peers {
				n.install.Lock()
				in := n.in[p.Name]
				if in.exceptions != nil {
					n.apply(ctx, p.Name, in, in.exceptions, in.receivedAt)
				}
				n.install.Unlock()
			}
		}
	}
}

// apply installs a peer's complete snapshot (received at at) and
// withdraws what its last one held and this one does not. It returns
// how many it holds installed and how many it refused. The caller holds
// n.install.
func (n *Node) apply(ctx context.Context, peer string, in *inbound, exc []exception.Exception, at time.Time) (int, int) {
	n.mu.Lock()
	ir := n.ir
	n.mu.Unlock()
	x := ir.Index()
	now := time.Now()
	age := now.Sub(at)
	keys := make([]exception.Key, 0, len(exc))
	writes := make([]targets.ConntrackEntry, 0, len(exc))
	refused := 0
	for _, e := range exc {
		e.Idle += age
		en, err := exception.Resolve(x, e)
		if err != nil {
			refused++
			r := string(exception.ReasonOf(err))
			in.refused[r]++
			n.m.refused.WithLabelValues(peer, r).Inc()
			n.log.Debug("fleet: exception refused", "peer", peer, "err", err)
			continue
		}
		writes = append(writes, en)
		keys = append(keys, e.Key())
	}
	wrote, err := n.ct.WriteConntrack(ctx, writes)
	if err != nil {
		n.setProblem(fmt.Errorf("install %d exceptions of %s: %w", len(writes), peer, err))
	}
	n.m.installedTot.WithLabelValues(peer).Add(float64(wrote))
	next := make(map[exception.Key]targets.ConntrackEntry, len(writes))
	for i, en := range writes {
		next[keys[i]] = en
	}
	// Withdraw what the last snapshot held and this one does not, unless
	// another peer's snapshot still holds the flow on the same backend
	// (the flow moved there; its copy is the same entry here).
	var gone []targets.ConntrackEntry
	var others map[flow]bool
	for k, en := range in.installed {
		if _, ok := next[k]; ok {
			continue
		}
		if others == nil {
			others = n.heldByOthers(in)
		}
		if !others[flowOf(en)] {
			gone = append(gone, en)
		}
	}
	if len(gone) > 0 {
		del, err := n.ct.DeleteConntrack(ctx, gone)
		if err != nil {
			n.setProblem(fmt.Errorf("withdraw %d exceptions of %s: %w", len(gone), peer, err))
		}
		n.m.withdrawn.WithLabelValues(peer).Add(float64(del))
	}
	in.installed = next
	n.m.installed.WithLabelValues(peer).Set(float64(len(next)))
	return len(next), refused
}

// flow is an installed entry's key in the datapath, with its backend.
type flow struct {
	service, backend uint32
	kind             compiler.TupleKind
	tuple            compiler.Tuple
}

func flowOf(en targets.ConntrackEntry) flow {
	return flow{en.ServiceID, en.BackendID, en.Kind, en.Tuple}
}

// heldByOthers returns the flows that peers other than in's hold
// installed. The caller holds n.install.
func (n *Node) heldByOthers(in *inbound) map[flow]bool {
	held := map[flow]bool{}
	for _, o := range n.in {
		if o != in {
			for _, en := range o.installed {
				held[flowOf(en)] = true
			}
		}
	}
	return held
}

// FleetStatus implements controller.FleetSharer.
func (n *Node) FleetStatus() controller.FleetStatus {
	n.mu.Lock()
	st := controller.FleetStatus{Node: n.cfg.Node, Listen: n.cfg.Listen, Rejected: maps.Clone(n.rejected), Problem: n.problem}
	if s := n.snap; s != nil {
		st.Published, st.Snapshot, st.PublishedAt = len(s.exceptions), s.seq, s.trigger
	}
	n.mu.Unlock()
	n.install.Lock()
	defer n.install.Unlock()
	for _, p := range n.cfg.Peers {
		ps := n.out[p.Name].status()
		in := n.in[p.Name]
		ps.Installed, ps.Received, ps.ReceivedAt, ps.InstalledAt, ps.Refused = len(in.installed), len(in.exceptions), in.receivedAt, in.installedAt, maps.Clone(in.refused)
		st.Peers = append(st.Peers, ps)
	}
	return st
}
