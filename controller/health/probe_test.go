package health_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
)

func httpSpec(port int, weighted bool) health.Spec {
	return health.Spec{Type: health.TypeHTTP, Port: port, Method: "GET", Path: "/healthz", Interval: time.Second, Timeout: time.Second, Healthy: 2, Unhealthy: 2, Weighted: weighted}
}

func TestProbeHTTP(t *testing.T) {
	f := backendtest.Start(t, "127.0.0.21")
	b := f.Get("127.0.0.21")
	p := &health.NetProber{}
	ip := netip.MustParseAddr("127.0.0.21")
	ctx := context.Background()

	if r := p.Probe(ctx, ip, httpSpec(f.Port, false)); !r.OK {
		t.Fatalf("200: %+v", r)
	}
	b.SetStatus(503)
	if r := p.Probe(ctx, ip, httpSpec(f.Port, false)); r.OK || !strings.Contains(r.Err.Error(), "status 503, want 200") {
		t.Fatalf("503: %+v", r)
	}
	// Nothing listens on 127.0.0.22 at that port: connection refused.
	if r := p.Probe(ctx, netip.MustParseAddr("127.0.0.22"), httpSpec(f.Port, false)); r.OK || !errors.Is(r.Err, errSyscallRefused()) {
		t.Fatalf("refused: %+v", r)
	}
}

// R-HC-1 against a real server: the header decides success on a weighted
// service, and an unweighted one ignores it.
func TestRHC1_ProbeHTTPWeightHeader(t *testing.T) {
	f := backendtest.Start(t, "127.0.0.23")
	b := f.Get("127.0.0.23")
	p := &health.NetProber{}
	ip := netip.MustParseAddr("127.0.0.23")
	for _, tc := range []struct {
		header string
		ok     bool
		weight int
	}{
		{"0", true, 0}, {"1", true, 1}, {"999", true, 999}, {"1000", true, 1000},
		{"1001", false, 0}, {"-1", false, 0}, {"abc", false, 0}, {"", false, 0},
	} {
		b.SetWeight(tc.header)
		r := p.Probe(context.Background(), ip, httpSpec(f.Port, true))
		if r.OK != tc.ok || (tc.ok && (!r.HasWeight || r.Weight != tc.weight)) {
			t.Errorf("header %q: %+v; want ok=%v weight %d", tc.header, r, tc.ok, tc.weight)
		}
		if !tc.ok && !strings.Contains(r.Err.Error(), health.WeightHeader) {
			t.Errorf("header %q: error %q does not name the header", tc.header, r.Err)
		}
		// Unweighted: the header is not read.
		if r := p.Probe(context.Background(), ip, httpSpec(f.Port, false)); !r.OK || r.HasWeight {
			t.Errorf("header %q on an unweighted service: %+v", tc.header, r)
		}
	}
}

func TestProbeTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.24:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	sp := health.Spec{Type: health.TypeTCP, Port: port, Timeout: time.Second}
	p := &health.NetProber{}
	if r := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.24"), sp); !r.OK {
		t.Fatalf("listening: %+v", r)
	}
	if r := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.25"), sp); r.OK {
		t.Fatalf("nothing listening: %+v", r)
	}
}

func TestProbeUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.26:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	port := pc.LocalAddr().(*net.UDPAddr).Port
	sp := health.Spec{Type: health.TypeUDP, Port: port, Timeout: 500 * time.Millisecond}
	p := &health.NetProber{}
	if r := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.26"), sp); !r.OK {
		t.Fatalf("echo server: %+v", r)
	}
	r := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.27"), sp)
	if r.OK || !strings.Contains(r.Err.Error(), "port unreachable") {
		t.Fatalf("no server: %+v; want port unreachable", r)
	}
}

func TestProbeICMP(t *testing.T) {
	p := &health.NetProber{}
	sp := health.Spec{Type: health.TypeICMP, Timeout: time.Second}
	r := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.28"), sp)
	if r.Note != "" {
		t.Logf("kernel has no ICMP socket for this user (%s); the fallback is tested in TestProbeICMPFallback", r.Note)
		return
	}
	if !r.OK {
		t.Fatalf("ping 127.0.0.28: %+v", r)
	}
}

func TestProbeICMPFallback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.29:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	p := &health.NetProber{ICMP: health.UnavailableICMP(errors.New("socket: operation not permitted"))}
	r := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.29"), health.Spec{Type: health.TypeICMP, Port: port, Timeout: time.Second})
	if !r.OK || !strings.Contains(r.Note, "operation not permitted") || !strings.Contains(r.Note, "TCP connect") {
		t.Fatalf("fallback to TCP: %+v", r)
	}
	r = p.Probe(context.Background(), netip.MustParseAddr("127.0.0.29"), health.Spec{Type: health.TypeICMP, Timeout: time.Second})
	if !r.OK || !strings.Contains(r.Note, "unchecked") {
		t.Fatalf("no port to fall back to: %+v", r)
	}
}

func errSyscallRefused() error { return syscall.ECONNREFUSED }
