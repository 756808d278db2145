package health

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// kernelPing sends one ICMP echo request to ip and waits for its reply. It
// tries an unprivileged ping socket first (net.ipv4.ping_group_range), then
// a raw socket (root or CAP_NET_RAW); when neither opens it returns an
// *unavailableError so that the caller falls back with a logged reason.
func kernelPing(ctx context.Context, ip netip.Addr, timeout time.Duration) error {
	v6 := ip.Is6() && !ip.Is4In6()
	type sock struct{ network, listen string }
	socks := []sock{{"udp4", "0.0.0.0"}, {"ip4:icmp", "0.0.0.0"}}
	if v6 {
		socks = []sock{{"udp6", "::"}, {"ip6:ipv6-icmp", "::"}}
	}
	var conn *icmp.PacketConn
	var raw bool
	var errs []error
	for i, s := range socks {
		c, err := icmp.ListenPacket(s.network, s.listen)
		if err == nil {
			conn, raw = c, i == 1
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.network, err))
	}
	if conn == nil {
		return &unavailableError{fmt.Errorf("no ICMP socket: %v", errs)}
	}
	defer conn.Close()

	token := make([]byte, 16)
	_, _ = rand.Read(token)
	id := os.Getpid() & 0xffff
	var typ icmp.Type = ipv4.ICMPTypeEcho
	proto := 1
	if v6 {
		typ, proto = ipv6.ICMPTypeEchoRequest, 58
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: token}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	var dst net.Addr = &net.UDPAddr{IP: ip.AsSlice()}
	if raw {
		dst = &net.IPAddr{IP: ip.AsSlice()}
	}
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetDeadline(dl)
	if _, err := conn.WriteTo(b, dst); err != nil {
		return fmt.Errorf("send echo: %w", err)
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply: %w", err)
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && (m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) && bytes.Equal(e.Data, token) {
			return nil
		}
	}
}
