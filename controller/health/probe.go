package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Check types, as healthCheck.type spells them.
const (
	TypeHTTP = "HTTP"
	TypeTCP  = "TCP"
	TypeUDP  = "UDP"
	TypeICMP = "ICMP"
)

// Spec is one backend's health check with the defaults of the cloud API
// applied: interval 5 s, timeout 5 s, thresholds 2 and 2, GET /.
type Spec struct {
	Type      string
	Port      int
	Method    string
	Path      string
	Interval  time.Duration
	Timeout   time.Duration
	Healthy   int // consecutive successes that make an unhealthy backend healthy
	Unhealthy int // consecutive failures that make a healthy backend unhealthy
	// Weighted: the response must carry a weight (R-HC-1).
	Weighted bool
}

// Result is the outcome of one probe.
type Result struct {
	OK        bool
	Weight    int
	HasWeight bool
	Err       error // why the probe failed; nil when OK
	// Note says how a probe was done when it is not what was asked
	// (an ICMP check that fell back to TCP, or could not run).
	Note string
}

// Dialer opens connections for probes; *net.Dialer is one. Tests inject
// failures through it.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Prober runs one probe against ip per spec.
type Prober interface {
	Probe(ctx context.Context, ip netip.Addr, spec Spec) Result
}

// NetProber probes over the network through Dialer.
type NetProber struct {
	Dialer Dialer
	// ICMP opens echo sockets; nil uses the kernel's (unprivileged ping
	// sockets, else raw sockets, else a logged fallback).
	ICMP func(ctx context.Context, ip netip.Addr, timeout time.Duration) error
}

// Probe implements Prober.
func (p *NetProber) Probe(ctx context.Context, ip netip.Addr, spec Spec) Result {
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	d := p.Dialer
	if d == nil {
		d = &net.Dialer{}
	}
	addr := netip.AddrPortFrom(ip, uint16(spec.Port)).String()
	switch spec.Type {
	case TypeHTTP:
		return probeHTTP(ctx, d, addr, spec)
	case TypeTCP:
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fail(fmt.Errorf("tcp connect %s: %w", addr, err))
		}
		c.Close()
		return Result{OK: true}
	case TypeUDP:
		return probeUDP(ctx, d, addr)
	case TypeICMP:
		icmp := p.ICMP
		if icmp == nil {
			icmp = kernelPing
		}
		err := icmp(ctx, ip, spec.Timeout)
		var un *unavailableError
		if errors.As(err, &un) {
			return icmpFallback(ctx, d, ip, spec, un)
		}
		if err != nil {
			return fail(fmt.Errorf("icmp echo %s: %w", ip, err))
		}
		return Result{OK: true}
	}
	return fail(fmt.Errorf("unknown health check type %q", spec.Type))
}

func fail(err error) Result { return Result{Err: err} }

// icmpFallback is used when the kernel gives no ICMP socket: a TCP connect
// to the check's port when it has one, else the backend counts as healthy
// (unchecked), as it would with no health check at all.
func icmpFallback(ctx context.Context, d Dialer, ip netip.Addr, spec Spec, why error) Result {
	if spec.Port == 0 {
		return Result{OK: true, Note: fmt.Sprintf("ICMP unavailable (%v); backend left unchecked", why)}
	}
	addr := netip.AddrPortFrom(ip, uint16(spec.Port)).String()
	note := fmt.Sprintf("ICMP unavailable (%v); probed with TCP connect to %s", why, addr)
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Result{Err: fmt.Errorf("tcp connect %s (ICMP fallback): %w", addr, err), Note: note}
	}
	c.Close()
	return Result{OK: true, Note: note}
}

func probeHTTP(ctx context.Context, d Dialer, addr string, spec Spec) Result {
	tr := &http.Transport{
		DialContext:       d.DialContext,
		DisableKeepAlives: true, // each probe tests connection setup too
		Proxy:             nil,
	}
	defer tr.CloseIdleConnections()
	method := spec.Method
	if method == "" {
		method = http.MethodGet
	}
	path := spec.Path
	if path == "" {
		path = "/"
	}
	url := "http://" + addr + path
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return fail(fmt.Errorf("http %s %s: %w", method, url, err))
	}
	req.Header.Set("User-Agent", "lbc-health/1")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fail(fmt.Errorf("http %s %s: %w", method, url, err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("http %s %s: status %d, want 200", method, url, resp.StatusCode))
	}
	if !spec.Weighted {
		return Result{OK: true}
	}
	w, err := ParseWeight(resp.Header)
	if err != nil {
		return fail(fmt.Errorf("http %s %s: %w", method, url, err)) // R-HC-1
	}
	return Result{OK: true, Weight: w, HasWeight: true}
}

// udpPayload is what a UDP probe sends; any datagram back is a success.
var udpPayload = []byte("lbc-health")

func probeUDP(ctx context.Context, d Dialer, addr string) Result {
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return fail(fmt.Errorf("udp %s: %w", addr, err))
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write(udpPayload); err != nil {
		return fail(fmt.Errorf("udp %s: send: %w", addr, err))
	}
	buf := make([]byte, 1500)
	if _, err := c.Read(buf); err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fail(fmt.Errorf("udp %s: port unreachable", addr))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fail(fmt.Errorf("udp %s: no reply within the timeout", addr))
		}
		return fail(fmt.Errorf("udp %s: %w", addr, err))
	}
	return Result{OK: true}
}

// unavailableError: the kernel refused an ICMP socket.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }
