package proximity

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Method is how an RTT is measured.
type Method string

const (
	Auto Method = "auto" // ICMP if this process may send it, else TCP
	ICMP Method = "icmp" // echo request / reply
	TCP  Method = "tcp"  // time to connect (a refusal also takes one RTT)
)

// Prober measures the RTT to one address.
type Prober interface {
	RTT(ctx context.Context, addr netip.Addr, m Method, tcpPort int) (time.Duration, Method, error)
}

// NetProber probes over the network from this host.
type NetProber struct{}

var echoSeq atomic.Uint32

// RTT measures the round trip to addr; ctx bounds it.
func (NetProber) RTT(ctx context.Context, addr netip.Addr, m Method, tcpPort int) (time.Duration, Method, error) {
	addr = addr.Unmap()
	switch m {
	case ICMP:
		d, err := echo(ctx, addr)
		return d, ICMP, err
	case TCP:
		d, err := connect(ctx, addr, tcpPort)
		return d, TCP, err
	case Auto, "":
		d, err := echo(ctx, addr)
		if err == nil {
			return d, ICMP, nil
		}
		if errors.Is(err, errNoICMP) {
			d, err := connect(ctx, addr, tcpPort)
			return d, TCP, err
		}
		return 0, ICMP, err
	}
	return 0, m, fmt.Errorf("unknown probe method %q; use auto, icmp or tcp", m)
}

var errNoICMP = errors.New("ICMP not permitted (no raw or ping socket)")

// listenICMP opens an unprivileged ping socket if allowed, else a raw
// socket (root or CAP_NET_RAW).
func listenICMP(v6 bool) (*icmp.PacketConn, bool, error) {
	nets := [][2]string{{"udp4", "0.0.0.0"}, {"ip4:icmp", "0.0.0.0"}}
	if v6 {
		nets = [][2]string{{"udp6", "::"}, {"ip6:ipv6-icmp", "::"}}
	}
	var last error
	for i, n := range nets {
		c, err := icmp.ListenPacket(n[0], n[1])
		if err == nil {
			return c, i == 0, nil
		}
		last = err
	}
	if errors.Is(last, os.ErrPermission) || errors.Is(last, syscall.EPERM) || errors.Is(last, syscall.EACCES) || errors.Is(last, syscall.EPROTONOSUPPORT) {
		return nil, false, errNoICMP
	}
	return nil, false, fmt.Errorf("%w: %v", errNoICMP, last)
}

func echo(ctx context.Context, addr netip.Addr) (time.Duration, error) {
	v6 := addr.Is6()
	c, dgram, err := listenICMP(v6)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(time.Second))
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	id := os.Getpid() & 0xffff
	seq := int(echoSeq.Add(1) & 0xffff)
	var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	proto := 1
	if v6 {
		typ, reply, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("lbc-gslb-rtt")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return 0, err
	}
	var dst net.Addr = &net.IPAddr{IP: addr.AsSlice()}
	if dgram {
		dst = &net.UDPAddr{IP: addr.AsSlice()}
	}
	start := time.Now()
	if _, err := c.WriteTo(b, dst); err != nil {
		return 0, fmt.Errorf("icmp echo to %s: %w", addr, err)
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("icmp echo to %s: %w", addr, ctx.Err())
			}
			return 0, fmt.Errorf("icmp echo to %s: %w", addr, err)
		}
		rtt := time.Since(start)
		if !sameIP(from, addr) {
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != reply {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		// A ping socket rewrites the ID; match the sequence only there.
		if !ok || e.Seq != seq || (!dgram && e.ID != id) {
			continue
		}
		return rtt, nil
	}
}

func sameIP(a net.Addr, want netip.Addr) bool {
	var ip net.IP
	switch x := a.(type) {
	case *net.IPAddr:
		ip = x.IP
	case *net.UDPAddr:
		ip = x.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == want
}

func connect(ctx context.Context, addr netip.Addr, port int) (time.Duration, error) {
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("tcp probe to %s: port %d out of range 1..65535", addr, port)
	}
	var d net.Dialer
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	rtt := time.Since(start)
	if err == nil {
		c.Close()
		return rtt, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) { // the RST came back: one RTT
		return rtt, nil
	}
	return 0, fmt.Errorf("tcp probe to %s: %w", addr, err)
}
