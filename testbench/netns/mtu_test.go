package netns_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets/xdp"
	tbnetns "github.com/lbc-dev/lbc/testbench/netns"
)

// TestRMTU_PathMTUDiscovery: a client with MTU 1500 behind a load
// balancer whose underlay to the backends is 1500 bytes too. Every full
// TCP segment is 20 bytes too big once encapsulated in IPv4; the XDP
// program answers the first ones with ICMP fragmentation needed (next-hop
// MTU 1480) from the VIP, the client's kernel lowers its path MTU to the
// VIP, and an 8 MB upload completes with every byte intact. Without R-MTU
// the segments are dropped at the underlay and the transfer stalls (what a
// client MTU of 1400 used to hide).
func TestRMTU_PathMTUDiscovery(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skipf("namespace testbench needs root and iproute2: %v (R-MTU is covered by the BPF_PROG_TEST_RUN tests in targets/xdp)", err)
	}
	vip := netip.MustParseAddr("10.99.100.3")
	set := netns.NewSet(fmt.Sprintf("lbcmtu%d", os.Getpid()))
	var opts xdp.Options
	var topo *tbnetns.LBTopology
	t.Cleanup(func() {
		if opts.PinDir != "" {
			netns.Do(topo.LB, func() error { return xdp.Detach(opts, false) })
		}
		if err := set.Close(); err != nil {
			t.Error(err)
		}
	})
	topo, err := tbnetns.NewLBTopologyMTU(set, 2, []netip.Addr{vip}, 1500)
	if err != nil {
		t.Fatal(err)
	}
	helpers, err := fallback.Load(fallback.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helpers.Close() })
	attach := func(ns, ifname string, prog func() *fallback.Datapath, decap bool) {
		err := netns.Do(ns, func() error {
			ifc, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			p := prog().Pass
			if decap {
				p = prog().Decap
			}
			l, err := link.AttachXDP(link.XDPOptions{Program: p, Interface: ifc.Index, Flags: link.XDPDriverMode})
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
			return nil
		})
		if err != nil {
			t.Fatalf("%s %s: %v", ns, ifname, err)
		}
	}
	h := func() *fallback.Datapath { return helpers }
	attach(topo.SW, topo.LBPeer, h, false)
	// The server: reads until EOF, answers the byte count and SHA-256.
	for _, ns := range topo.Backends {
		attach(ns, topo.BackendIf, h, true)
		var ln net.Listener
		if err := netns.Do(ns, func() (err error) { ln, err = net.Listen("tcp4", "0.0.0.0:9000"); return }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(60 * time.Second))
					sum := sha256.New()
					n, _ := io.Copy(sum, c)
					fmt.Fprintf(c, "%d %x\n", n, sum.Sum(nil))
				}()
			}
		}()
	}
	var ends []string
	for i := range topo.Backends {
		ends = append(ends, fmt.Sprintf("          - {name: b%d, ip: %s, mac: \"%s\"}", i+1, topo.BackendIPs[i], topo.BackendMACs[i]))
	}
	cfg := fmt.Sprintf(`
tunnel: {sourceIPv4: 10.99.0.2}
services:
  - name: bulk
    vip: %s
    protocol: TCP
    ports: [9000]
    backends:
      - name: pool
        endpoints:
%s
`, vip, strings.Join(ends, "\n"))
	dec, err := compiler.Load("mtu.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	opts = xdp.Options{Iface: topo.LBIf, Mode: xdp.ModeNative,
		PinDir:   filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-mtu-%d", os.Getpid())),
		StateDir: t.TempDir()}
	ctx := context.Background()
	err = netns.Do(topo.LB, func() error {
		tgt, err := xdp.Attach(ctx, opts)
		if err != nil {
			return err
		}
		defer tgt.Close()
		res, err := compiler.Compile(compiler.Input{Config: dec.Config})
		if err != nil {
			return err
		}
		if _, err := tgt.Apply(ctx, compiler.DiffIR(nil, res.IR)); err != nil {
			return err
		}
		return tgt.Commit(res.IR)
	})
	if err != nil {
		t.Fatal(err)
	}

	// 8 MB from the client, whose MTU (1500) says nothing of the tunnel.
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	want := fmt.Sprintf("%d %x", len(data), sha256.Sum256(data))
	var reply string
	start := time.Now()
	err = netns.Do(topo.Client, func() error {
		c, err := net.DialTimeout("tcp4", vip.String()+":9000", 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		if _, err := c.Write(data); err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		c.(*net.TCPConn).CloseWrite()
		b, err := io.ReadAll(c)
		reply = strings.TrimSpace(string(b))
		return err
	})
	elapsed := time.Since(start)
	var stats fallback.Stats
	netns.Do(topo.LB, func() error {
		tgt, err := xdp.Open(opts)
		if err != nil {
			return err
		}
		defer tgt.Close()
		stats, err = tgt.Datapath().ReadStats()
		return err
	})
	route, _ := set.IP(topo.Client, "route", "get", vip.String())
	if err != nil || reply != want {
		t.Fatalf("8 MB upload through the LB: %v; reply %q, want %q\ncounters %v\nclient route: %s", err, reply, want, stats.Global, route)
	}
	if stats.Global["too-big"] == 0 {
		t.Fatalf("the transfer completed without a single ICMP answer from the LB (counters %v): was the path MTU not exceeded?", stats.Global)
	}
	if !strings.Contains(route, "mtu 1480") {
		t.Fatalf("the client's route to the VIP does not show the learned MTU 1480:\n%s", route)
	}
	t.Logf("R-MTU: 8 MB uploaded at client MTU 1500 over a 1500-byte underlay in %v; the LB answered %d packets with ICMP fragmentation needed; client route: %s",
		elapsed.Round(time.Millisecond), stats.Global["too-big"], strings.TrimSpace(route))
}
