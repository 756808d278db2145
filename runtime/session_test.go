package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
)

// waitSession waits for c's session to satisfy ok, at every arbitration
// change (no polling), within a minute.
func waitSession(t *testing.T, c *runtime.Client, what string, ok func(primary bool, term uint64, lost error) bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		ch := c.Changed()
		p, term, lost := c.Session()
		if ok(p, term, lost) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: not reached (primary %v, term %d, lost %v)", what, p, term, lost)
		}
	}
}

// TestSessionLostAndNewTerm (issue 25): the switch dies: the session is
// lost at once (not primary, lost says why); it comes back on the same
// address: a new session, primary again, in a new term.
func TestSessionLostAndNewTerm(t *testing.T) {
	srv := startServer(t)
	addr := srv.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dialPrimary(t, ctx, runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, term, lost := c.Session()
	if !p || term != 1 || lost != nil {
		t.Fatalf("after the first arbitration: primary %v, term %d, lost %v", p, term, lost)
	}
	srv.Stop()
	waitSession(t, c, "switch gone", func(p bool, _ uint64, lost error) bool { return !p && lost != nil })
	srv2, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv2.StartAgain(addr); err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop()
	waitSession(t, c, "switch back", func(p bool, term uint64, lost error) bool { return p && lost == nil && term == 2 })
}

// hangingServer answers arbitration and Capabilities until hung: then it
// keeps every connection open and answers nothing, as a hung switch.
type hangingServer struct {
	p4v1.UnimplementedP4RuntimeServer
	mu   sync.Mutex
	hung chan struct{} // closed while answering; replaced by an open one to hang
	// late, when set, receives each heartbeat the client gave up on.
	late chan struct{}
}

// Read answers at once, hung or not: with hang, a switch too busy to
// answer its heartbeat in time that still answers other RPCs.
func (s *hangingServer) Read(_ *p4v1.ReadRequest, stream p4v1.P4Runtime_ReadServer) error {
	return stream.Send(&p4v1.ReadResponse{})
}

func (s *hangingServer) gate() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hung
}

func (s *hangingServer) hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.hung: // answering
		if on {
			s.hung = make(chan struct{})
		}
	default:
		if !on {
			close(s.hung)
		}
	}
}

func (s *hangingServer) Capabilities(ctx context.Context, _ *p4v1.CapabilitiesRequest) (*p4v1.CapabilitiesResponse, error) {
	select {
	case <-s.gate():
	case <-ctx.Done():
		select {
		case s.late <- struct{}{}: // nil or full: nobody counts
		default:
		}
		return nil, ctx.Err()
	}
	return &p4v1.CapabilitiesResponse{P4RuntimeApiVersion: "1.5.0"}, nil
}

func (s *hangingServer) StreamChannel(stream p4v1.P4Runtime_StreamChannelServer) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	select {
	case <-s.gate():
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	a := m.GetArbitration()
	if err := stream.Send(&p4v1.StreamMessageResponse{Update: &p4v1.StreamMessageResponse_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: a.GetDeviceId(), ElectionId: a.GetElectionId(), Status: &status.Status{}}}}); err != nil {
		return err
	}
	for { // until the client closes its side or goes
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// serveHanging serves hs (answering at first) on loopback until the test
// ends, and returns its address.
func serveHanging(t *testing.T, hs *hangingServer) string {
	t.Helper()
	close(hs.hung)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p4v1.RegisterP4RuntimeServer(gs, hs)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// TestHeartbeatDropsSilentSession (issue 25, item 2): a switch that stops
// answering but keeps its connection open is found out by the heartbeat:
// the session is lost with ErrUnreachable; when it answers again, a new
// session in a new term.
func TestHeartbeatDropsSilentSession(t *testing.T) {
	hs := &hangingServer{hung: make(chan struct{})}
	addr := serveHanging(t, hs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dialPrimary(t, ctx, runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Heartbeat: 20 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs.hang(true)
	start := time.Now()
	waitSession(t, c, "switch silent", func(p bool, _ uint64, lost error) bool { return !p && errors.Is(lost, runtime.ErrUnreachable) })
	t.Logf("silent switch found out in %v (heartbeat 20 ms + timeout 100 ms)", time.Since(start))
	hs.hang(false)
	waitSession(t, c, "switch answering again", func(p bool, term uint64, lost error) bool { return p && lost == nil && term >= 2 })
}

// TestHeartbeatLateWhileSwitchAnswers (issue 31, item 2): a switch that
// answers its heartbeat late while it answers other RPCs (BMv2 busy with
// a long read) is busy, not lost: the session stays through several late
// heartbeats. Once nothing else answers either, the late heartbeat drops
// it as before.
func TestHeartbeatLateWhileSwitchAnswers(t *testing.T) {
	hs := &hangingServer{hung: make(chan struct{}), late: make(chan struct{}, 100)}
	addr := serveHanging(t, hs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dialPrimary(t, ctx, runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Heartbeat: 20 * time.Millisecond, HeartbeatTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	changed := c.Changed()
	_, term, _ := c.Session()

	// Reads answered back to back while every heartbeat goes unanswered.
	stop := make(chan struct{})
	reading := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				reading <- nil
				return
			default:
			}
			if _, err := c.Read(ctx); err != nil {
				reading <- err
				return
			}
		}
	}()
	hs.hang(true)
	for late := 0; late < 3; {
		select {
		case <-changed:
			p, tm, lost := c.Session()
			t.Fatalf("after %d late heartbeats while reads were answered: the session changed (primary %v, term %d→%d, lost %v)", late, p, term, tm, lost)
		case err := <-reading:
			t.Fatalf("a read failed: %v", err)
		case <-hs.late:
			late++
		case <-ctx.Done():
			t.Fatal("three heartbeats not late within a minute")
		}
	}
	close(stop)
	if err := <-reading; err != nil {
		t.Fatalf("a read failed: %v", err)
	}
	if p, tm, lost := c.Session(); !p || tm != term || lost != nil {
		t.Fatalf("after 3 late heartbeats while reads were answered: primary %v, term %d→%d, lost %v", p, term, tm, lost)
	}
	// Nothing answers now: the next late heartbeat is a loss.
	waitSession(t, c, "switch silent", func(p bool, _ uint64, lost error) bool { return !p && errors.Is(lost, runtime.ErrUnreachable) })
	hs.hang(false)
}

// TestCloseWhileSwitchDown: with no switch to talk to, the session waits
// for the connection (it opens as soon as the switch is back); Close does
// not wait for a server to end a stream that was never opened.
func TestCloseWhileSwitchDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	var logs syncLog
	c, err := runtime.Dial(context.Background(), runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, lost := c.Session(); lost == nil {
		t.Fatal("a client with no switch reports a session")
	}
	// Let the session start waiting for the connection (had Close come
	// first, the session would not have started, and the test would prove
	// nothing; it cannot fail because of this sleep).
	time.Sleep(200 * time.Millisecond)
	c.Close()
	if strings.Contains(logs.String(), "did not end the stream") {
		t.Fatalf("Close waited for a stream that was never opened:\n%s", logs.String())
	}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWaitPrimarySaysWhyNoAnswer (issue 36): when no switch answers before
// the deadline, the error says whether anything accepts connections at the
// address, instead of only "no arbitration answer".
func TestWaitPrimarySaysWhyNoAnswer(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()                                // nothing listens there
	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks HTTP/2
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct{ addr, want string }{
		{refused, "nothing accepts connections at " + refused},
		{mute.Addr().String(), mute.Addr().String() + " accepts connections but answered no P4Runtime arbitration"},
	} {
		c, err := runtime.Dial(context.Background(), runtime.Options{Addr: tc.addr, DeviceID: 1, ElectionLow: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err = c.WaitPrimary(ctx)
		cancel()
		c.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WaitPrimary at %s: %v, want %q", tc.addr, err, tc.want)
		}
	}
}

// TestDialRefusesMalformedAddr (issue 36): an address no switch can be at
// is refused at once, naming the form to use, not waited on.
func TestDialRefusesMalformedAddr(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"foo", "missing port in address; want HOST:PORT"},
		{"127.0.0.1:99999", `port "99999" is not 1..65535`},
		{"127.0.0.1:0", `port "0" is not 1..65535`},
		{"127.0.0.1:p4", `port "p4" is not 1..65535`},
		{"unix:", "unix: needs a socket path"},
		{"localhost:9559", ""},
		{"[::1]:9559", ""},
		{"unix:/run/p4rt.sock", ""},
	} {
		c, err := runtime.Dial(context.Background(), runtime.Options{Addr: tc.addr, DeviceID: 1, ElectionLow: 1})
		if c != nil {
			c.Close()
		}
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Dial(%q): %v, want %q", tc.addr, err, tc.want)
		}
	}
}
