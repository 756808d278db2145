package proximity

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var loop = netip.MustParseAddr("127.0.0.1")

func loopbackOnly(a netip.Addr) bool { return a.IsLoopback() }

func TestG3_TCPConnectProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, m, err := NetProber{}.RTT(ctx, loop, TCP, port)
	if err != nil || d <= 0 || m != TCP {
		t.Fatalf("open port: %v %v %v", d, m, err)
	}
	ln.Close()
	// A refused connection also took one round trip.
	d, _, err = NetProber{}.RTT(ctx, loop, TCP, port)
	if err != nil || d <= 0 {
		t.Fatalf("closed port: %v %v", d, err)
	}
	if _, _, err := (NetProber{}).RTT(ctx, loop, TCP, 0); err == nil {
		t.Fatal("port 0 accepted")
	}
}

func TestG3_ICMPEchoProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, _, err := NetProber{}.RTT(ctx, loop, ICMP, 0)
	if errors.Is(err, errNoICMP) {
		t.Skipf("ICMP not permitted here (%v); the TCP probe (TestG3_TCPConnectProbe) and auto fallback cover G-3", err)
	}
	if err != nil || d <= 0 {
		t.Fatalf("echo to 127.0.0.1: %v %v", d, err)
	}
	// auto uses ICMP when it is permitted.
	if _, m, err := (NetProber{}).RTT(ctx, loop, Auto, 9); err != nil || m != ICMP {
		t.Fatalf("auto: %v %v", m, err)
	}
}

// slowProber adds a fixed delay to a real TCP probe, to make sites differ.
type slowProber struct {
	delay time.Duration
	calls atomic.Int32
}

func (p *slowProber) RTT(ctx context.Context, a netip.Addr, m Method, port int) (time.Duration, Method, error) {
	p.calls.Add(1)
	d, used, err := NetProber{}.RTT(ctx, a, TCP, port)
	select {
	case <-time.After(p.delay):
	case <-ctx.Done():
		return 0, used, ctx.Err()
	}
	return d + p.delay, used, err
}

func TestHandlerChecksInput(t *testing.T) {
	srv := httptest.NewServer(Handler(NetProber{}, loopbackOnly))
	defer srv.Close()
	ctx := context.Background()
	// Tests only ever probe loopback; the handler refuses anything else
	// before any packet is sent.
	if _, err := Ask(ctx, srv.Client(), srv.URL, netip.MustParseAddr("198.51.100.7"), TCP, 53, time.Second); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("non-loopback target: %v", err)
	}
	for _, q := range []string{"?target=nope", "?target=127.0.0.1&port=70000", "?target=127.0.0.1&timeout=-1s"} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s", q, resp.Status)
		}
	}
	if d, err := Ask(ctx, srv.Client(), srv.URL, loop, TCP, 9, time.Second); err != nil || d <= 0 {
		t.Fatalf("loopback: %v %v", d, err)
	}
}

func TestG3_SitesBudgetAndCache(t *testing.T) {
	near, far := &slowProber{delay: time.Millisecond}, &slowProber{delay: 800 * time.Millisecond}
	a := httptest.NewServer(Handler(near, loopbackOnly))
	b := httptest.NewServer(Handler(far, loopbackOnly))
	defer a.Close()
	defer b.Close()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewSites(SitesConfig{Budget: 250 * time.Millisecond, ProbeTimeout: 2 * time.Second, CacheTTL: time.Minute, Method: TCP, TCPPort: 9, Now: func() time.Time { return now }},
		[]Site{{"near", a.URL}, {"far", b.URL}})
	ctx := context.Background()

	rtt, note := s.Measure(ctx, loop)
	if _, ok := rtt["near"]; !ok {
		t.Fatalf("near site missing: %v (%s)", rtt, note)
	}
	if _, ok := rtt["far"]; ok || !strings.Contains(note, "far: no answer within") {
		t.Fatalf("far site should miss the budget: %v (%s)", rtt, note)
	}
	// The late answer still fills the cache; the same /24 reuses it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rtt, _ = s.Measure(ctx, netip.MustParseAddr("127.0.0.99"))
		if len(rtt) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(rtt) != 2 || rtt["far"] <= rtt["near"] {
		t.Fatalf("cached: %v", rtt)
	}
	if near.calls.Load() != 1 || far.calls.Load() != 1 {
		t.Fatalf("probes sent: near %d far %d, want 1 each (cache per prefix)", near.calls.Load(), far.calls.Load())
	}
	// Another prefix, or the TTL passing, probes again.
	s.Measure(ctx, netip.MustParseAddr("127.0.1.1"))
	now = now.Add(2 * time.Minute)
	s.Measure(ctx, loop)
	if near.calls.Load() != 3 {
		t.Fatalf("near probes %d, want 3", near.calls.Load())
	}
}
