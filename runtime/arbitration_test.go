package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func startServer(t *testing.T) *p4rt.Server {
	t.Helper()
	srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func dialPrimary(t *testing.T, ctx context.Context, o runtime.Options) (*runtime.Client, error) {
	t.Helper()
	c, err := runtime.Dial(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return c, c.WaitPrimary(ctx)
}

// Close ends the stream and returns only once the server has dropped the
// controller from its election (P4Runtime §"Client Arbitration": a
// controller is live as long as its stream), so a controller restarted
// with the same election ID is never refused as a duplicate of itself.
// The retry of a refusal is switched off to check the cause, not the cure.
func TestCloseLeavesTheElectionBeforeReturning(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 1, ElectionIDInUseWait: -1}
	for i := 0; i < 20; i++ {
		c, err := dialPrimary(t, ctx, o)
		if err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		if got := srv.Controllers(""); len(got) != 1 {
			t.Fatalf("restart %d: server holds %d controllers, want 1", i, len(got))
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := srv.Controllers(""); len(got) != 0 {
			t.Fatalf("restart %d: server still holds %v after Close returned", i, got)
		}
	}
}

// A controller that died without closing (a crash: its connection drops
// with no end of stream) may still be live on the server when its
// successor arbitrates with the same election ID; the server refuses the
// successor with INVALID_ARGUMENT until it notices. The client re-arbitrates
// and WaitPrimary waits that out, within Options.ElectionIDInUseWait.
func TestElectionIDInUseWaitedOutAfterACrash(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old := crashableController(t, ctx, srv.Addr(), 1)

	c, err := runtime.Dial(ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 1,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, ElectionIDInUseWait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Wait for the first refusal, so that the test covers the retry.
	for {
		ch := c.Changed()
		if _, err := c.Primary(); errors.Is(err, runtime.ErrElectionIDInUse) {
			break
		} else if err == nil {
			t.Fatal("primary while another live controller holds the same election ID")
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("no refusal of the duplicate election ID")
		}
	}
	old.Close() // the crash: the TCP connection goes, no CloseSend
	if err := c.WaitPrimary(ctx); err != nil {
		t.Fatalf("after the old session ended: %v", err)
	}
}

// An election ID that stays in use (two controllers configured alike) is
// reported once the wait is over, naming the cause.
func TestElectionIDInUseReported(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := dialPrimary(t, ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dialPrimary(t, ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 7,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, ElectionIDInUseWait: 100 * time.Millisecond})
	defer b.Close()
	if !errors.Is(err, runtime.ErrNotPrimary) || !errors.Is(err, runtime.ErrElectionIDInUse) {
		t.Fatalf("duplicate election ID: %v", err)
	}
	if ok, _ := a.Primary(); !ok {
		t.Fatal("the refused duplicate took mastership from the live controller")
	}
}

// crashableController arbitrates on a raw stream; Close drops its
// connection without ending the stream, as a killed process does.
func crashableController(t *testing.T, ctx context.Context, addr string, election uint64) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := p4v1.NewP4RuntimeClient(conn).StreamChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&p4v1.StreamMessageRequest{Update: &p4v1.StreamMessageRequest_Arbitration{Arbitration: &p4v1.MasterArbitrationUpdate{
		DeviceId: 1, ElectionId: &p4v1.Uint128{Low: election}}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetArbitration().GetStatus().GetCode() != 0 {
		t.Fatalf("raw controller not primary: %v %v", m, err)
	}
	return conn
}
