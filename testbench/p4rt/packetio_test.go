package p4rt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/runtime"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// opMetadata is packet_out's metadata for op.
func opMetadata(t *testing.T, s *runtime.Schema, op uint64) []*p4v1.PacketMetadata {
	t.Helper()
	out, err := s.PacketMetadata("packet_out")
	if err != nil {
		t.Fatal(err)
	}
	md, err := out.Encode(runtime.U("op", op))
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// probe sends a packet-out with op and returns the packet-in that answers
// it, or nil when none comes within wait.
func probe(t *testing.T, c *runtime.Client, s *runtime.Schema, op uint64, payload []byte, wait time.Duration) *p4v1.PacketIn {
	t.Helper()
	md := opMetadata(t, s, op)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	p, err := c.Exchange(ctx, &p4v1.PacketOut{Payload: payload, Metadata: md}, nil)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	return p
}

// Exchange returns the answer its filter accepts (here, among the answers
// to a burst of probes sent just before it), and ctx's error when none
// comes.
func TestExchangeTakesItsAnswer(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	srv.SetSwitchClock(func() uint64 { return 7 })
	md := opMetadata(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 8; i++ {
		if err := c.SendPacket(ctx, &p4v1.PacketOut{Payload: []byte("other"), Metadata: md}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.Exchange(ctx, &p4v1.PacketOut{Payload: []byte("mine"), Metadata: md}, func(p *p4v1.PacketIn) bool { return string(p.GetPayload()) == "mine" })
	if err != nil || string(p.GetPayload()) != "mine" {
		t.Fatalf("Exchange = %v, %v; want the answer with payload mine", p, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if p, err := c.Exchange(short, &p4v1.PacketOut{Payload: []byte("x"), Metadata: md}, func(*p4v1.PacketIn) bool { return false }); p != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exchange with no acceptable answer = %v, %v; want ctx's deadline", p, err)
	}
}

// The server plays lb.p4's clock probe: packet_out op 1 comes back to the
// primary as a packet-in with the same payload and {op 1, timestamp};
// other ops, and any probe while the switch clock is off, get no answer.
func TestClockProbe(t *testing.T) {
	srv, s := start(t, true, Options{})
	c := dial(t, srv, 1)
	in, err := s.PacketMetadata("packet_in")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetSwitchClock(func() uint64 { return 0xabcdef123456 })
	p := probe(t, c, s, 1, []byte("nonce-1"), 5*time.Second)
	if p == nil {
		t.Fatal("no answer to a clock probe")
	}
	v, err := in.Decode(p.GetMetadata())
	if err != nil || v["op"] != 1 || v["timestamp"] != 0xabcdef123456 || string(p.GetPayload()) != "nonce-1" {
		t.Fatalf("answer %v (%v) payload %q; want op 1, timestamp 0xabcdef123456, payload nonce-1", v, err, p.GetPayload())
	}
	if srv.Probes() != 1 {
		t.Fatalf("Probes() = %d, want 1", srv.Probes())
	}
	if p := probe(t, c, s, 2, []byte("x"), 200*time.Millisecond); p != nil {
		t.Fatalf("op 2 answered: %v", p)
	}
	srv.SetSwitchClock(nil)
	if p := probe(t, c, s, 1, []byte("x"), 200*time.Millisecond); p != nil {
		t.Fatalf("probe answered with the switch clock off: %v", p)
	}
	if srv.Probes() != 1 {
		t.Fatalf("Probes() = %d, want 1", srv.Probes())
	}
}

// Only the primary may send packet-outs (P4Runtime: packet I/O belongs to
// the primary); a backup is refused before anything is sent.
func TestPacketOutNeedsPrimary(t *testing.T) {
	srv, s := start(t, true, Options{})
	dial(t, srv, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	backup, err := runtime.Dial(ctx, runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer backup.Close()
	if err := backup.WaitPrimary(ctx); !errors.Is(err, runtime.ErrNotPrimary) {
		t.Fatalf("backup WaitPrimary: %v, want ErrNotPrimary", err)
	}
	md := opMetadata(t, s, 1)
	if err := backup.SendPacket(ctx, &p4v1.PacketOut{Payload: []byte("x"), Metadata: md}); !errors.Is(err, runtime.ErrNotPrimary) {
		t.Fatalf("backup SendPacket: %v, want ErrNotPrimary", err)
	}
	if srv.Probes() != 0 {
		t.Fatalf("Probes() = %d, want 0", srv.Probes())
	}
}
