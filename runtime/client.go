package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Defaults. P4Runtime servers return large batched reads (a 65,537-slot
// ring is ≈ 3.5 MB) and one p4.v1.Error per update in the status trailer,
// both over gRPC's 4 MB / 16 KB defaults, so the limits are raised.
const (
	DefaultBatchSize   = 1000
	DefaultMaxMsgSize  = 256 << 20
	DefaultMaxMetadata = 64 << 20

	// DefaultElectionIDInUseWait: a server sees a dead client's stream end
	// within milliseconds of the process exiting (the kernel closes its
	// sockets); a few seconds covers a loaded machine.
	DefaultElectionIDInUseWait = 5 * time.Second
	// closeWait bounds how long Close waits for the server to end the
	// stream after this client has closed its side.
	closeWait = 2 * time.Second

	// DefaultHeartbeat and DefaultHeartbeatTimeout: while a session is
	// up, a Capabilities RPC every DefaultHeartbeat must answer within
	// DefaultHeartbeatTimeout, or the session is dropped as lost
	// (ErrUnreachable). A switch that dies ends the stream at once (its
	// kernel closes the socket); one that hangs or is cut off silently is
	// noticed within DefaultHeartbeat + DefaultHeartbeatTimeout = 1 s.
	// gRPC keepalive cannot do this alone: grpc-go pings at most every
	// 10 s, and servers answer faster pings on an idle stream with
	// GOAWAY (too_many_pings); the heartbeat's replies are data, which
	// keeps the servers' ping policies quiet.
	DefaultHeartbeat        = 200 * time.Millisecond
	DefaultHeartbeatTimeout = 800 * time.Millisecond
	// keepaliveTime: with the heartbeat on, a transport that read nothing
	// for this long is pinged and, without an answer within
	// keepaliveTimeout, closed, so that the next session dials a new
	// connection instead of queueing behind a dead one (a partition).
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 2 * time.Second
)

// Options configures a Client.
type Options struct {
	Addr     string
	DeviceID uint64
	// ElectionID is this controller's election ID (high, low); the highest
	// among connected controllers of a role is primary and may write.
	ElectionHigh, ElectionLow uint64
	// Role is the P4Runtime role name; "" is the default role.
	Role string
	// BatchSize bounds updates per Write RPC (DefaultBatchSize when 0).
	BatchSize int
	// MaxMsgSize bounds gRPC messages both ways (DefaultMaxMsgSize when 0).
	MaxMsgSize int
	// TLS enables TLS (mTLS when it carries a client certificate).
	TLS *tls.Config
	// ReadOnly skips arbitration: reads work (P4Runtime needs no mastership
	// for them), writes fail with ErrNotPrimary. For status and dry runs.
	ReadOnly bool
	// Backoff bounds the reconnect delay, of the session and of gRPC's
	// own connection attempts (100 ms .. 1 s when zero): a switch that
	// comes back is reconnected within MaxBackoff of accepting
	// connections.
	MinBackoff, MaxBackoff time.Duration
	// Heartbeat is how often a live session checks that the switch
	// answers (DefaultHeartbeat when 0; negative: never, and no gRPC
	// keepalive either); HeartbeatTimeout bounds each check
	// (DefaultHeartbeatTimeout when 0). A check that fails drops the
	// session: mastership is lost with ErrUnreachable, and the client
	// reconnects and arbitrates again.
	Heartbeat, HeartbeatTimeout time.Duration
	// ElectionIDInUseWait bounds how long WaitPrimary waits out a server
	// that refuses our election ID as held by another live controller
	// (DefaultElectionIDInUseWait when 0; negative: do not wait). The
	// holder is usually our own previous session: a process that restarts
	// at once arbitrates before the server has seen the old stream end.
	ElectionIDInUseWait time.Duration
	// ConnectTimeout bounds how long a target's Open waits for the switch
	// to answer and take this client as primary (DefaultConnectTimeout
	// when 0). The client itself never gives up: it reconnects until
	// Close.
	ConnectTimeout time.Duration
	Logger         *slog.Logger
}

// DefaultConnectTimeout is Options.ConnectTimeout when 0.
const DefaultConnectTimeout = 10 * time.Second

// ConnectTimeoutOrDefault is o.ConnectTimeout, or DefaultConnectTimeout
// when it is 0.
func (o Options) ConnectTimeoutOrDefault() time.Duration {
	if o.ConnectTimeout > 0 {
		return o.ConnectTimeout
	}
	return DefaultConnectTimeout
}

// TLSConfig builds a TLS configuration from PEM files; certFile and
// keyFile are optional (mTLS), caFile verifies the server.
func TLSConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificates", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ErrNotPrimary is returned by writes when this client is not the primary
// controller (never was, or lost mastership).
var ErrNotPrimary = errors.New("not the primary controller")

// ErrUnreachable is in the reason of a session dropped because the switch
// stopped answering its heartbeat.
var ErrUnreachable = errors.New("the switch does not answer")

// ErrElectionIDInUse is the server's refusal of an election ID that
// another live controller of the same device and role holds (P4Runtime
// §"Client Arbitration": the server ends the new stream with
// INVALID_ARGUMENT). The client keeps re-arbitrating; WaitPrimary reports
// it once Options.ElectionIDInUseWait has passed.
var ErrElectionIDInUse = errors.New("election ID in use by another live controller")

// Client is a P4Runtime connection to one device.
type Client struct {
	opts   Options
	conn   *grpc.ClientConn
	rt     p4v1.P4RuntimeClient
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	primary  bool
	wasEver  bool
	reason   error         // why not primary, when known
	changed  chan struct{} // closed and replaced on every arbitration change
	sessions int
	// term counts the times this client became primary: a new term means
	// another controller or a new switch process may have written (or
	// wiped) the tables since the last one.
	term uint64
	// answered: the current session's stream is up and the server has
	// answered its arbitration (as primary or backup); lost is why not.
	answered bool
	lost     error
	inUse    time.Time                          // first ErrElectionIDInUse of the current streak
	stream   p4v1.P4Runtime_StreamChannelClient // the open session, once arbitration is sent
	closing  bool
	quit     chan struct{} // closed by Close

	pkt packetIO // packet-outs and packet-ins on the stream (packetio.go)

	// answered is when the server last answered any RPC (a unary reply,
	// a streamed message), in UnixNano: a heartbeat that goes unanswered
	// while other answers arrive is a busy switch, not a lost one.
	lastAnswer atomic.Int64
}

// Dial connects and starts arbitration in the background; use WaitPrimary
// before writing.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if err := checkAddr(opts.Addr); err != nil {
		return nil, err
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.MaxMsgSize <= 0 {
		opts.MaxMsgSize = DefaultMaxMsgSize
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 100 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Second
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if opts.ElectionIDInUseWait == 0 {
		opts.ElectionIDInUseWait = DefaultElectionIDInUseWait
	}
	if opts.ElectionHigh == 0 && opts.ElectionLow == 0 {
		opts.ElectionLow = 1 // 0 is not a valid election ID
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxMsgSize), grpc.MaxCallSendMsgSize(opts.MaxMsgSize)),
		grpc.WithMaxHeaderListSize(DefaultMaxMetadata),
		// gRPC's default reconnect backoff grows to 120 s: a switch that
		// restarts would wait that long for lbc to notice it is back.
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
			Backoff: backoff.Config{BaseDelay: opts.MinBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: opts.MaxBackoff}}),
	}
	if opts.Heartbeat > 0 && !opts.ReadOnly {
		dopts = append(dopts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}))
	}
	c := &Client{opts: opts, log: log.With("p4rt", opts.Addr),
		done: make(chan struct{}), changed: make(chan struct{}), quit: make(chan struct{})}
	dopts = append(dopts, grpc.WithChainUnaryInterceptor(c.stampUnary), grpc.WithChainStreamInterceptor(c.stampStream))
	conn, err := grpc.NewClient(opts.Addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("p4runtime %s: %w", opts.Addr, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	c.conn, c.rt, c.cancel = conn, p4v1.NewP4RuntimeClient(conn), cancel
	if opts.ReadOnly {
		c.reason = errors.New("read-only connection")
		go func() { <-sctx.Done(); close(c.done) }()
		return c, nil
	}
	go c.run(sctx)
	return c, nil
}

// Close ends the session; the device keeps its state. It closes its side
// of the stream and waits (at most a few seconds) for the server to end
// it, which the server does once it has dropped this controller from the
// election: a client that dials next with the same election ID is then
// not refused as a duplicate of this one.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closing = true
	close(c.quit)
	s := c.stream
	c.mu.Unlock()
	if s != nil {
		c.pkt.send.Lock() // not while a packet-out is being sent
		_ = s.CloseSend()
		c.pkt.send.Unlock()
	}
	if !c.opts.ReadOnly && s != nil { // no open stream (switch down): nothing to wait for
		select {
		case <-c.done:
		case <-time.After(closeWait):
			c.log.Warn("the server did not end the stream after CloseSend; cancelling it", "wait", closeWait)
		}
	}
	c.cancel()
	<-c.done
	return c.conn.Close()
}

func (c *Client) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// Options returns the client's options with defaults filled in.
func (c *Client) Options() Options { return c.opts }

// ElectionID returns this client's election ID.
func (c *Client) ElectionID() *p4v1.Uint128 {
	return &p4v1.Uint128{High: c.opts.ElectionHigh, Low: c.opts.ElectionLow}
}

func (c *Client) role() *p4v1.Role {
	if c.opts.Role == "" {
		return nil
	}
	return &p4v1.Role{Name: c.opts.Role}
}

// IsPrimary reports whether the last arbitration made this client primary.
func (c *Client) IsPrimary() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.primary
}

// Primary reports mastership and, when not primary, why.
func (c *Client) Primary() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.primary {
		return true, nil
	}
	if c.reason != nil {
		return false, fmt.Errorf("%w: %w", ErrNotPrimary, c.reason)
	}
	return false, ErrNotPrimary
}

// Session reports the arbitration state: whether this client is primary,
// its term (it grows each time the client becomes primary, so a changed
// term means the switch may hold other tables than this client wrote:
// another controller's, or none after a restart), and lost, why no
// session is up (the switch is unreachable, restarted, or has not
// answered yet); lost is nil while the server has answered this session's
// arbitration, as primary or backup.
func (c *Client) Session() (primary bool, term uint64, lost error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.ReadOnly {
		return false, 0, nil
	}
	if !c.answered {
		lost = c.lost
		if lost == nil {
			lost = errors.New("no arbitration answer yet")
		}
	}
	return c.primary, c.term, lost
}

// Changed returns a channel closed at the next arbitration change.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// WaitPrimary waits for the first arbitration outcome: nil when primary, an
// error naming the reason otherwise (another controller is primary, the
// device is unreachable and ctx ended, or the server refused the election).
func (c *Client) WaitPrimary(ctx context.Context) error {
	for {
		c.mu.Lock()
		primary, reason, ch := c.primary, c.reason, c.changed
		c.mu.Unlock()
		if primary {
			return nil
		}
		var wait <-chan time.Time // until a refusal of our election ID is final
		if errors.Is(reason, ErrElectionIDInUse) {
			c.mu.Lock()
			left := c.opts.ElectionIDInUseWait - time.Since(c.inUse)
			c.mu.Unlock()
			if left <= 0 {
				return fmt.Errorf("%w: %w (for %s; is another controller running with this election ID?)", ErrNotPrimary, reason, c.opts.ElectionIDInUseWait)
			}
			t := time.NewTimer(left)
			defer t.Stop()
			wait = t.C
		} else if reason != nil && !IsTransport(reason) {
			return fmt.Errorf("%w: %w", ErrNotPrimary, reason)
		}
		select {
		case <-ctx.Done():
			if reason != nil {
				return fmt.Errorf("p4runtime %s: %w (%w)", c.opts.Addr, ctx.Err(), reason)
			}
			return fmt.Errorf("p4runtime %s: no arbitration answer: %w%s", c.opts.Addr, ctx.Err(), Diagnose(c.opts.Addr))
		case <-ch:
		case <-wait:
		}
	}
}

// checkAddr refuses an address no switch can be at, before any wait:
// HOST:PORT with a port of 1..65535, or unix:PATH.
func checkAddr(addr string) error {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return fmt.Errorf("p4runtime address %q: unix: needs a socket path, e.g. unix:/run/p4rt.sock", addr)
		}
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("p4runtime address %q: %w; want HOST:PORT, e.g. 127.0.0.1:9559, or unix:PATH", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("p4runtime address %q: port %q is not 1..65535; want HOST:PORT, e.g. 127.0.0.1:9559", addr, port)
	}
	return nil
}

// Diagnose says why a switch at addr may not have answered, from one plain
// connection attempt: nothing listens there, or something that is no
// P4Runtime server does. It starts with "; ", to follow an error.
func Diagnose(addr string) string {
	network, where := "tcp", addr
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, where = "unix", path
	}
	conn, err := net.DialTimeout(network, where, time.Second)
	if err != nil {
		return fmt.Sprintf("; nothing accepts connections at %s (%v): is the switch running, and is this its gRPC address (simple_switch_grpc --grpc-server-addr)?", addr, err)
	}
	conn.Close()
	return fmt.Sprintf("; %s accepts connections but answered no P4Runtime arbitration: is it the switch's gRPC port?", addr)
}

// IsTransport reports whether err says an RPC did not reach the switch or
// got no answer (the connection, the session or the caller's context
// ended), not that the switch refused it.
func IsTransport(err error) bool {
	code := status.Code(err)
	return errors.Is(err, ErrUnreachable) || code == codes.Unavailable || code == codes.Canceled || code == codes.DeadlineExceeded || errors.Is(err, io.EOF)
}

func (c *Client) setState(primary bool, reason error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.primary && !primary {
		if errors.Is(reason, errClientClosed) {
			c.log.Debug("mastership released", "reason", reason)
		} else {
			c.log.Warn("mastership lost", "reason", reason)
		}
	}
	if primary && !c.primary {
		c.log.Info("primary", "election_id", c.opts.ElectionLow)
		c.term++
	}
	switch {
	case !errors.Is(reason, ErrElectionIDInUse):
		c.inUse = time.Time{}
	case c.inUse.IsZero():
		c.inUse = time.Now()
	}
	c.primary, c.reason = primary, reason
	c.wasEver = c.wasEver || primary
	close(c.changed)
	c.changed = make(chan struct{})
}

// run keeps a StreamChannel session up, reconnecting with backoff.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	backoff := c.opts.MinBackoff
	for ctx.Err() == nil && !c.isClosing() {
		reached, err := c.session(ctx)
		if ctx.Err() != nil || c.isClosing() {
			break
		}
		c.mu.Lock()
		c.answered, c.lost = false, err
		c.mu.Unlock()
		c.setState(false, err)
		if reached {
			backoff = c.opts.MinBackoff
		}
		c.log.Debug("stream channel ended; reconnecting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
		case <-c.quit:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, c.opts.MaxBackoff)
	}
	c.mu.Lock()
	c.answered, c.lost = false, errClientClosed
	c.mu.Unlock()
	c.setState(false, errClientClosed)
}

// errClientClosed ends the primary's term when the client closes: a
// release, not a loss (lbc push ends so after every successful write).
var errClientClosed = errors.New("client closed")

func (c *Client) session(ctx context.Context) (reachedPrimary bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Wait for the connection rather than fail at once while the switch
	// is down: the stream opens as soon as gRPC reconnects.
	stream, err := c.rt.StreamChannel(sctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	arb := &p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: c.opts.DeviceID, Role: c.role(), ElectionId: c.ElectionID()}}}
	if err := stream.Send(arb); err != nil {
		return false, err
	}
	// From here on only packet-outs (SendPacket) and Close (CloseSend)
	// send, one at a time (packetIO.send), so that the server ends the
	// stream and drops us from the election before Close returns.
	c.mu.Lock()
	closing := c.closing
	if !closing {
		c.stream = stream
	}
	c.mu.Unlock()
	if closing {
		_ = stream.CloseSend()
	}
	defer func() {
		c.mu.Lock()
		c.stream = nil
		c.mu.Unlock()
	}()
	hb := make(chan error, 1)
	if c.opts.Heartbeat > 0 {
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() { defer close(done); c.heartbeat(sctx, cancel, hb) }()
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			select {
			case herr := <-hb:
				err = fmt.Errorf("%w: no answer to a heartbeat within %s (%w)", ErrUnreachable, c.opts.HeartbeatTimeout, herr)
			default:
			}
			if status.Code(err) == codes.InvalidArgument && !reachedPrimary {
				// The only INVALID_ARGUMENT a server ends a stream with for
				// our first arbitration (non-zero election ID, no role
				// config) is a duplicate election ID.
				err = fmt.Errorf("device %d role %q: election ID %d:%d: %w: %w", c.opts.DeviceID, c.opts.Role, c.opts.ElectionHigh, c.opts.ElectionLow, ErrElectionIDInUse, err)
			}
			return reachedPrimary, err
		}
		if p := msg.GetPacket(); p != nil {
			c.pkt.deliver(p)
			continue
		}
		if a := msg.GetArbitration(); a != nil {
			c.mu.Lock()
			c.answered, c.lost = true, nil
			c.mu.Unlock()
			code := codes.Code(a.GetStatus().GetCode())
			mine := a.GetElectionId().GetHigh() == c.opts.ElectionHigh && a.GetElectionId().GetLow() == c.opts.ElectionLow
			if code == codes.OK && mine {
				reachedPrimary = true
				c.setState(true, nil)
				continue
			}
			var reason error
			switch {
			case a.GetElectionId() != nil && !mine:
				reason = fmt.Errorf("device %d role %q: controller with election ID %d:%d is primary (ours %d:%d)",
					c.opts.DeviceID, c.opts.Role, a.GetElectionId().GetHigh(), a.GetElectionId().GetLow(), c.opts.ElectionHigh, c.opts.ElectionLow)
			default:
				reason = fmt.Errorf("device %d role %q: arbitration %s: %s", c.opts.DeviceID, c.opts.Role, code, a.GetStatus().GetMessage())
			}
			c.setState(false, reason)
		}
		if e := msg.GetError(); e != nil {
			c.log.Warn("stream error", "code", codes.Code(e.CanonicalCode), "message", e.Message)
		}
	}
}

// stampUnary and stampStream record each answer of the server (see
// lastAnswer).
func (c *Client) stampUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		c.lastAnswer.Store(time.Now().UnixNano())
	}
	return err
}

func (c *Client) stampStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return stampedStream{s, c}, nil
}

type stampedStream struct {
	grpc.ClientStream
	c *Client
}

func (s stampedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || err == io.EOF {
		s.c.lastAnswer.Store(time.Now().UnixNano())
	}
	return err
}

// answeredSince reports whether the server answered any RPC after t.
func (c *Client) answeredSince(t time.Time) bool {
	return c.lastAnswer.Load() > t.UnixNano()
}

// heartbeat calls Capabilities every Heartbeat while ctx lasts; the first
// that fails or takes longer than HeartbeatTimeout while the server
// answers nothing else is sent on failed and ends the session (cancel).
// A server that answers other RPCs meanwhile (a long read streaming in, a
// Write batch) is alive but busy: its late heartbeat is logged and the
// session stays (issue 31, item 2: BMv2 under a full read-back answered
// a heartbeat late while healthy). A server without Capabilities
// (UNIMPLEMENTED) is not checked.
func (c *Client) heartbeat(ctx context.Context, cancel context.CancelFunc, failed chan<- error) {
	t := time.NewTicker(c.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		hctx, hcancel := context.WithTimeout(ctx, c.opts.HeartbeatTimeout)
		_, err := c.rt.Capabilities(hctx, &p4v1.CapabilitiesRequest{})
		hcancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case status.Code(err) == codes.Unimplemented:
			c.log.Debug("the server has no Capabilities RPC: no heartbeat", "err", err)
			return
		case status.Code(err) == codes.DeadlineExceeded && c.answeredSince(sent):
			c.log.Debug("heartbeat late, but the switch answered other RPCs meanwhile: busy, not lost", "timeout", c.opts.HeartbeatTimeout)
		default:
			failed <- err
			cancel()
			return
		}
	}
}

// UpdateError is the failure of one update of a batch.
type UpdateError struct {
	Index   int
	Code    codes.Code
	Message string
}

// WriteError is a Write RPC that failed as a whole (Updates empty) or in
// some of its updates (one UpdateError per failed update, in batch order).
type WriteError struct {
	Code    codes.Code
	Message string
	Updates []UpdateError
	Total   int
}

func (e *WriteError) Error() string {
	if len(e.Updates) == 0 {
		return fmt.Sprintf("write rejected: %s: %s", CodeName(e.Code), e.Message)
	}
	u := e.Updates[0]
	more := ""
	if len(e.Updates) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(e.Updates)-1)
	}
	return fmt.Sprintf("%d of %d updates failed; update %d: %s: %s%s", len(e.Updates), e.Total, u.Index, CodeName(u.Code), u.Message, more)
}

// decodeWriteError turns a Write status into a *WriteError, decoding the
// per-update p4.v1.Error details the spec puts in the status.
func decodeWriteError(err error, total int) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	we := &WriteError{Code: st.Code(), Message: st.Message(), Total: total}
	i := 0
	for _, d := range st.Details() {
		pe, ok := d.(*p4v1.Error)
		if !ok {
			continue
		}
		if codes.Code(pe.CanonicalCode) != codes.OK {
			we.Updates = append(we.Updates, UpdateError{Index: i, Code: codes.Code(pe.CanonicalCode), Message: pe.Message})
		}
		i++
	}
	return we
}

// Write sends updates in one RPC with CONTINUE_ON_ERROR atomicity. It
// refuses when this client is not primary; a PERMISSION_DENIED answer
// marks mastership lost.
func (c *Client) Write(ctx context.Context, updates []*p4v1.Update) error {
	if ok, err := c.Primary(); !ok {
		return err
	}
	_, err := c.rt.Write(ctx, &p4v1.WriteRequest{DeviceId: c.opts.DeviceID, Role: c.opts.Role, ElectionId: c.ElectionID(),
		Updates: updates, Atomicity: p4v1.WriteRequest_CONTINUE_ON_ERROR})
	if err == nil {
		return nil
	}
	if status.Code(err) == codes.PermissionDenied {
		c.setState(false, err)
		return fmt.Errorf("%w: %w", ErrNotPrimary, err)
	}
	return decodeWriteError(err, len(updates))
}

// Read runs one Read RPC (entities may be wildcards) and gathers the
// streamed responses.
func (c *Client) Read(ctx context.Context, entities ...*p4v1.Entity) ([]*p4v1.Entity, error) {
	var out []*p4v1.Entity
	err := c.readEach(ctx, func(ents []*p4v1.Entity) { out = append(out, ents...) }, entities...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readEach runs one Read RPC and calls fn with each streamed response's
// entities as it arrives.
func (c *Client) readEach(ctx context.Context, fn func([]*p4v1.Entity), entities ...*p4v1.Entity) error {
	stream, err := c.rt.Read(ctx, &p4v1.ReadRequest{DeviceId: c.opts.DeviceID, Role: c.opts.Role, Entities: entities})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		fn(resp.Entities)
	}
}

// ReadTable reads every entry of a table (wildcard read).
func (c *Client) ReadTable(ctx context.Context, tableID uint32) ([]*p4v1.TableEntry, error) {
	ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: tableID}}})
	if err != nil {
		return nil, err
	}
	out := make([]*p4v1.TableEntry, 0, len(ents))
	for _, e := range ents {
		if te := e.GetTableEntry(); te != nil {
			out = append(out, te)
		}
	}
	return out, nil
}

// ReadDefault reads a table's default entry.
func (c *Client) ReadDefault(ctx context.Context, tableID uint32) (*p4v1.TableEntry, error) {
	ents, err := c.Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: &p4v1.TableEntry{TableId: tableID, IsDefaultAction: true}}})
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if te := e.GetTableEntry(); te != nil {
			return te, nil
		}
	}
	return nil, fmt.Errorf("no default entry for table %#x", tableID)
}

// Counter is one counter cell.
type Counter struct {
	Index          int64
	Packets, Bytes int64
}

// ReadCounter reads every cell of an indexed counter.
func (c *Client) ReadCounter(ctx context.Context, counterID uint32) ([]Counter, error) {
	return c.readCounter(ctx, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: counterID}}})
}

// ReadCounterCells reads the cells of an indexed counter at indexes, in one
// request. A reader that needs a few cells of a large array asks for those:
// a wildcard read of 65,536 cells every few seconds is most of what a
// controller allocates (docs/controller.md, "Soak").
func (c *Client) ReadCounterCells(ctx context.Context, counterID uint32, indexes []int64) ([]Counter, error) {
	if len(indexes) == 0 {
		return nil, nil
	}
	q := make([]*p4v1.Entity, len(indexes))
	for i, x := range indexes {
		q[i] = &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{CounterId: counterID, Index: &p4v1.Index{Index: x}}}}
	}
	return c.readCounter(ctx, q...)
}

// readCounter converts each response's cells as it arrives, so that the
// read holds one response's messages at a time, not the whole array's.
func (c *Client) readCounter(ctx context.Context, q ...*p4v1.Entity) ([]Counter, error) {
	var out []Counter
	err := c.readEach(ctx, func(ents []*p4v1.Entity) {
		if out == nil {
			out = make([]Counter, 0, len(ents))
		}
		for _, e := range ents {
			if ce := e.GetCounterEntry(); ce != nil {
				out = append(out, Counter{Index: ce.GetIndex().GetIndex(), Packets: ce.GetData().GetPacketCount(), Bytes: ce.GetData().GetByteCount()})
			}
		}
	}, q...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Pipeline is a forwarding-pipeline configuration.
type Pipeline struct {
	P4Info       *p4configv1.P4Info
	DeviceConfig []byte
	Cookie       uint64
}

// PipelineCookie returns the cookie of the device's pipeline; ok is false
// when the device has none.
func (c *Client) PipelineCookie(ctx context.Context) (cookie uint64, ok bool, err error) {
	resp, err := c.rt.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: c.opts.DeviceID,
		ResponseType: p4v1.GetForwardingPipelineConfigRequest_COOKIE_ONLY})
	if status.Code(err) == codes.FailedPrecondition {
		return 0, false, nil // no pipeline yet
	}
	if err != nil {
		return 0, false, err
	}
	if ck := resp.GetConfig().GetCookie(); ck != nil {
		return ck.Cookie, true, nil
	}
	return 0, false, nil
}

// GetP4Info returns the P4Info the device runs.
func (c *Client) GetP4Info(ctx context.Context) (*p4configv1.P4Info, error) {
	resp, err := c.rt.GetForwardingPipelineConfig(ctx, &p4v1.GetForwardingPipelineConfigRequest{DeviceId: c.opts.DeviceID,
		ResponseType: p4v1.GetForwardingPipelineConfigRequest_P4INFO_AND_COOKIE})
	if err != nil {
		return nil, err
	}
	if resp.GetConfig().GetP4Info() == nil {
		return nil, fmt.Errorf("device %d runs no P4 program", c.opts.DeviceID)
	}
	return resp.GetConfig().GetP4Info(), nil
}

// EnsurePipeline pushes p with VERIFY_AND_COMMIT unless the device already
// runs a pipeline with the same cookie. It reports whether it pushed.
func (c *Client) EnsurePipeline(ctx context.Context, p Pipeline) (bool, error) {
	cookie, ok, err := c.PipelineCookie(ctx)
	if err != nil {
		return false, fmt.Errorf("get pipeline config: %w", err)
	}
	if ok && cookie == p.Cookie {
		return false, nil
	}
	if ok, err := c.Primary(); !ok {
		return false, err
	}
	_, err = c.rt.SetForwardingPipelineConfig(ctx, &p4v1.SetForwardingPipelineConfigRequest{
		DeviceId: c.opts.DeviceID, Role: c.opts.Role, ElectionId: c.ElectionID(),
		Action: p4v1.SetForwardingPipelineConfigRequest_VERIFY_AND_COMMIT,
		Config: &p4v1.ForwardingPipelineConfig{P4Info: p.P4Info, P4DeviceConfig: p.DeviceConfig,
			Cookie: &p4v1.ForwardingPipelineConfig_Cookie{Cookie: p.Cookie}},
	})
	if err != nil {
		return false, fmt.Errorf("set pipeline config: %w", err)
	}
	return true, nil
}

// CodeName spells a gRPC code as the P4Runtime spec does: RESOURCE_EXHAUSTED.
func CodeName(c codes.Code) string {
	s := c.String()
	var b []byte
	for i := 0; i < len(s); i++ {
		if i > 0 && s[i] >= 'A' && s[i] <= 'Z' && s[i-1] >= 'a' {
			b = append(b, '_')
		}
		b = append(b, s[i]&^0x20)
	}
	return string(b)
}
