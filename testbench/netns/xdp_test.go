package netns_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets/xdp"
	tbnetns "github.com/lbc-dev/lbc/testbench/netns"
)

var (
	vipWeb   = netip.MustParseAddr("10.99.100.1")
	vipMedia = netip.MustParseAddr("10.99.100.2")
)

const benchConfig = `
tunnel: {sourceIPv4: 10.99.0.2}
services:
  - name: web
    vip: 10.99.100.1
    protocol: TCP
    ports: [80]
    localityLbPolicy: WEIGHTED_MAGLEV
    healthCheck: {type: HTTP, port: 80, requestPath: /w}
    ringSize: 4099
    backends:
      - name: pool
        endpoints:
%s
  - name: media
    vip: 10.99.100.2
    protocol: L3_DEFAULT
    ports: ALL
    sessionAffinity: CLIENT_IP_PROTO
    connectionTrackingPolicy: {trackingMode: PER_SESSION}
    ringSize: 1021
    backends:
      - name: media
        endpoints:
%s
`

type bench struct {
	t     *testing.T
	topo  *tbnetns.LBTopology
	opts  xdp.Options
	cfg   *compiler.Config
	ir    *compiler.IR
	names []string // backend names, index = backend namespace
}

func setup(t *testing.T) *bench {
	if err := netns.Available(); err != nil {
		t.Skipf("namespace testbench needs root and iproute2: %v (the XDP program is covered by the BPF_PROG_TEST_RUN tests in targets/xdp)", err)
	}
	set := netns.NewSet(fmt.Sprintf("lbctb%d", os.Getpid()))
	b := &bench{t: t}
	t.Cleanup(func() {
		if b.opts.PinDir != "" {
			netns.Do(b.topo.LB, func() error { return xdp.Detach(b.opts, false) })
		}
		if err := set.Close(); err != nil {
			t.Error(err)
		}
	})
	topo, err := tbnetns.NewLBTopology(set, 3, []netip.Addr{vipWeb, vipMedia})
	if err != nil {
		t.Fatal(err)
	}
	b.topo = topo
	var web, media []string
	for i := range topo.Backends {
		web = append(web, fmt.Sprintf("          - {name: w%d, ip: %s, mac: \"%s\"}", i+1, topo.BackendIPs[i], topo.BackendMACs[i]))
		media = append(media, fmt.Sprintf("          - {name: m%d, ip: %s, mac: \"%s\"}", i+1, topo.BackendIPs[i], topo.BackendMACs[i]))
		b.names = append(b.names, fmt.Sprintf("%d", i+1))
	}
	dec, err := compiler.Load("testbench.yaml", []byte(fmt.Sprintf(benchConfig, strings.Join(web, "\n"), strings.Join(media, "\n"))))
	if err != nil {
		t.Fatal(err)
	}
	b.cfg = dec.Config

	// Helper programs: XDP_PASS on the bridge port facing the LB (native
	// XDP_TX on a veth needs a program on the peer), decapsulation on the
	// backends (this kernel has no ipip device).
	helpers, err := fallback.Load(fallback.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helpers.Close() })
	attach := func(ns, ifname string, prog func() error) {
		if err := netns.Do(ns, prog); err != nil {
			t.Fatalf("%s %s: %v", ns, ifname, err)
		}
	}
	var links []link.Link
	t.Cleanup(func() {
		for _, l := range links {
			l.Close()
		}
	})
	xdpOn := func(ifname string, p *fallback.Datapath, decap bool) func() error {
		return func() error {
			ifc, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			prog := p.Pass
			if decap {
				prog = p.Decap
			}
			l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
			if err == nil {
				links = append(links, l)
			}
			return err
		}
	}
	attach(topo.SW, topo.LBPeer, xdpOn(topo.LBPeer, helpers, false))
	for i, ns := range topo.Backends {
		attach(ns, topo.BackendIf, xdpOn(topo.BackendIf, helpers, true))
		b.serve(ns, fmt.Sprintf("%d", i+1))
	}
	b.opts = xdp.Options{Iface: topo.LBIf, Mode: xdp.ModeNative,
		PinDir:   filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-testbench-%d", os.Getpid())),
		StateDir: t.TempDir()}
	return b
}

// serve starts a TCP server on :80 and a UDP server on :5000 in ns that
// answer with the backend's name ("w<n>"/"m<n>" are derived from the VIP).
func (b *bench) serve(ns, n string) {
	t := b.t
	var ln net.Listener
	var pc net.PacketConn
	err := netns.Do(ns, func() error {
		var err error
		if ln, err = net.Listen("tcp4", "0.0.0.0:80"); err != nil {
			return err
		}
		// Bound to the VIP: replies must leave from it (DSR).
		pc, err = net.ListenPacket("udp4", vipMedia.String()+":5000")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				name := "w" + n
				fmt.Fprintln(c, name)
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintln(c, name)
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 65536)
		for {
			k, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(fmt.Sprintf("m%s %d", n, k)), addr)
		}
	}()
}

// push compiles the configuration for st against what the LB holds and
// applies the difference, as `lbc push --target xdp` does.
func (b *bench) push(st compiler.State) {
	b.t.Helper()
	ctx := context.Background()
	err := netns.Do(b.topo.LB, func() error {
		tgt, err := xdp.Attach(ctx, b.opts)
		if err != nil {
			return err
		}
		defer tgt.Close()
		held, err := tgt.Read(ctx)
		if err != nil {
			return err
		}
		res, err := compiler.Compile(compiler.Input{Config: b.cfg, State: st, Prev: held, Now: time.Duration(time.Now().Unix()) * time.Second})
		if err != nil {
			return err
		}
		if _, err := tgt.Apply(ctx, compiler.DiffIR(held, res.IR)); err != nil {
			return err
		}
		b.ir = res.IR
		return tgt.Commit(res.IR)
	})
	if err != nil {
		b.t.Fatalf("push: %v", err)
	}
}

type conn struct {
	c       net.Conn
	r       *bufio.Reader
	backend string
}

func (b *bench) dial() (*conn, error) {
	var c net.Conn
	err := netns.Do(b.topo.Client, func() error {
		d := net.Dialer{Timeout: 3 * time.Second}
		var err error
		c, err = d.Dial("tcp4", vipWeb.String()+":80")
		return err
	})
	if err != nil {
		return nil, err
	}
	cn := &conn{c: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := cn.r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("greeting: %w", err)
	}
	cn.backend = strings.TrimSpace(line)
	return cn, nil
}

func (c *conn) ping() (string, error) {
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c.c, "ping"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimSpace(line), err
}

func (b *bench) stats() fallback.Stats {
	b.t.Helper()
	tgt, err := xdp.Open(b.opts)
	if err != nil {
		b.t.Fatal(err)
	}
	defer tgt.Close()
	s, err := tgt.Datapath().ReadStats()
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// TestNamespaceTestbench runs real TCP, fragmented UDP, ICMP and malformed
// frames through the XDP program attached natively to the LB's veth.
func TestNamespaceTestbench(t *testing.T) {
	b := setup(t)
	st := compiler.State{}
	weights := []int{1, 2, 3}
	for i := range b.topo.Backends {
		st.SetWeight(fmt.Sprintf("w%d", i+1), weights[i])
	}
	b.push(st)

	// R-MAGLEV-2 with real connections: 200 TCP connections spread by
	// weight. The bound: Pearson's chi-square of the per-backend counts
	// against the ring shares, df = 2, must stay under 13.82 (p = 0.001:
	// a correct datapath fails one run in a thousand).
	const n = 200
	conns := make([]*conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.c.Close()
		}
	})
	count := map[string]int{}
	for i := 0; i < n; i++ {
		c, err := b.dial()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		count[c.backend]++
	}
	web := b.ir.ServiceByName("web")
	slots := map[string]int{}
	for _, id := range b.ir.ActiveRing(web) {
		slots[b.ir.Backend(id).Name]++
	}
	chi := 0.0
	for name, s := range slots {
		exp := float64(n) * float64(s) / float64(web.RingSize)
		d := float64(count[name]) - exp
		chi += d * d / exp
	}
	t.Logf("R-MAGLEV-2: 200 connections %v for ring slots %v (weights 1:2:3); chi-square %.2f (bound 13.82)", count, slots, chi)
	if chi > 13.82 || len(count) != 3 {
		t.Fatalf("connections %v do not follow the weights (chi-square %.2f > 13.82)", count, chi)
	}
	// Every connection keeps its backend for its whole life.
	for i, c := range conns {
		for k := 0; k < 2; k++ {
			got, err := c.ping()
			if err != nil || got != c.backend {
				t.Fatalf("connection %d to %s: reply %q, %v", i, c.backend, got, err)
			}
		}
	}

	// R-PERSIST (DEFAULT_FOR_PROTOCOL, TCP): w3 turns unhealthy. After the
	// push returns, no new connection reaches it; its established
	// connections keep being served by it.
	st.SetHealthy("w3", false)
	b.push(st)
	for i := 0; i < 60; i++ {
		c, err := b.dial()
		if err != nil {
			t.Fatalf("new connection %d after w3 unhealthy: %v", i, err)
		}
		c.c.Close()
		if c.backend == "w3" {
			t.Fatalf("new connection %d reached unhealthy w3", i)
		}
	}
	kept := 0
	for _, c := range conns {
		if c.backend != "w3" {
			continue
		}
		got, err := c.ping()
		if err != nil || got != "w3" {
			t.Fatalf("established connection on unhealthy w3: reply %q, %v", got, err)
		}
		kept++
	}
	t.Logf("R-PERSIST: 60 new connections avoided unhealthy w3; its %d established connections continued", kept)

	// R-FRAG-CFG: 3000-byte datagrams leave the client (MTU 1400) as three
	// fragments each; under CLIENT_IP_PROTO + PER_SESSION all fragments,
	// and small datagrams from the same client, reach one backend whole.
	var replies []string
	err := netns.Do(b.topo.Client, func() error {
		for i := 0; i < 8; i++ {
			size := 3000
			if i%4 == 3 {
				size = 100
			}
			c, err := net.Dial("udp4", vipMedia.String()+":5000")
			if err != nil {
				return err
			}
			c.SetDeadline(time.Now().Add(3 * time.Second))
			if _, err := c.Write(make([]byte, size)); err != nil {
				c.Close()
				return err
			}
			buf := make([]byte, 100)
			k, err := c.Read(buf)
			c.Close()
			if err != nil {
				return fmt.Errorf("datagram %d (%d bytes): no reply (fragments split or lost?): %w", i, size, err)
			}
			replies = append(replies, string(buf[:k]))
			if want := fmt.Sprint(size); !strings.HasSuffix(replies[i], " "+want) {
				return fmt.Errorf("datagram %d: backend got %q, want %s bytes", i, replies[i], want)
			}
		}
		return nil
	})
	if err != nil {
		s := b.stats()
		var snmp []string
		for _, ns := range b.topo.Backends {
			out, _ := b.topo.Set.Exec(context.Background(), ns, "cat", "/proc/net/snmp")
			snmp = append(snmp, ns+":\n"+out)
		}
		t.Fatalf("%v\ncounters %v\nbackends %v\n%s", err, s.Global, s.Backends, strings.Join(snmp, "\n"))
	}
	first := strings.Fields(replies[0])[0]
	for _, r := range replies {
		if strings.Fields(r)[0] != first {
			t.Fatalf("R-FRAG: datagrams of one client reached several backends: %v", replies)
		}
	}
	if s := b.stats(); s.Global["fragments"] < 18 {
		t.Fatalf("the LB counted %d fragments, want ≥ 18 (6 datagrams × 3)", s.Global["fragments"])
	}
	t.Logf("R-FRAG-CFG: 6 fragmented + 2 small datagrams all reached %s whole: %v", first, replies)

	// ICMP: an echo to the L3_DEFAULT VIP is answered by a backend.
	err = netns.Do(b.topo.Client, func() error {
		pc, err := icmp.ListenPacket("ip4:icmp", b.topo.ClientIP.String())
		if err != nil {
			return err
		}
		defer pc.Close()
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 77, Seq: 1, Data: []byte("lbc")}}
		wb, _ := msg.Marshal(nil)
		if _, err := pc.WriteTo(wb, &net.IPAddr{IP: net.IP(vipMedia.AsSlice())}); err != nil {
			return err
		}
		pc.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("no echo reply from %s: %w", vipMedia, err)
			}
			m, err := icmp.ParseMessage(1, buf[:k])
			if err == nil && m.Type == ipv4.ICMPTypeEchoReply && from.String() == vipMedia.String() {
				return nil
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("ICMP echo to the L3_DEFAULT VIP answered through the LB")

	// Malformed frames: a TCP packet to the VIP cut inside its TCP header,
	// and an IPv4 header with a bad length. Dropped and counted; the LB
	// keeps serving.
	before := b.stats().Global["drop-malformed"]
	var lbMAC net.HardwareAddr
	netns.Do(b.topo.LB, func() error {
		ifc, err := net.InterfaceByName(b.topo.LBIf)
		if err == nil {
			lbMAC = ifc.HardwareAddr
		}
		return err
	})
	err = netns.Do(b.topo.Client, func() error {
		ifc, err := net.InterfaceByName(b.topo.ClientIf)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6, Protocol: htons(unix.ETH_P_IP)}
		copy(sa.Addr[:], lbMAC)
		for _, frame := range malformedFrames(lbMAC, ifc.HardwareAddr, b.topo.ClientIP, vipWeb) {
			if err := unix.Sendto(fd, frame, 0, sa); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var after uint64
	for i := 0; i < 50; i++ {
		if after = b.stats().Global["drop-malformed"]; after >= before+2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after < before+2 {
		t.Fatalf("malformed counter went %d → %d, want +2 (counters %v, LB MAC %s)", before, after, b.stats().Global, lbMAC)
	}
	c, err := b.dial()
	if err != nil {
		t.Fatalf("after malformed frames: %v", err)
	}
	c.c.Close()
	t.Logf("malformed frames: counter %d → %d, LB still serving", before, after)
}

func malformedFrames(dst, src net.HardwareAddr, from, to netip.Addr) [][]byte {
	eth := func() []byte {
		b := make([]byte, 14)
		copy(b, dst)
		copy(b[6:], src)
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		return b
	}
	ip := func(proto byte, ihl byte, payload int) []byte {
		h := make([]byte, 20)
		h[0] = 0x40 | ihl
		binary.BigEndian.PutUint16(h[2:], uint16(20+payload))
		h[8], h[9] = 64, proto
		f, t := from.As4(), to.As4()
		copy(h[12:], f[:])
		copy(h[16:], t[:])
		return h
	}
	// TCP to port 80 with 4 of its 20 header bytes.
	a := append(eth(), ip(6, 5, 4)...)
	a = append(a, 0x12, 0x34, 0, 80)
	// An IPv4 header claiming 60 bytes of header in a 20-byte packet.
	bb := append(eth(), ip(6, 15, 0)...)
	return [][]byte{a, bb}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
