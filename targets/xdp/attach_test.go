package xdp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

func needNetns(t *testing.T) *netns.Set {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("network namespaces unavailable: %v (the replay tests cover the program without them)", err)
	}
	s := netns.NewSet(fmt.Sprintf("lbcx%d", os.Getpid()))
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// vethNS makes the namespace name (in a set removed at cleanup) with the
// veth pair lbv0–lbv1, both up.
func vethNS(t *testing.T, name string) (*netns.Set, string) {
	t.Helper()
	set := needNetns(t)
	ns, err := set.Add(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.IP(ns, "link", "add", "lbv0", "type", "veth", "peer", "name", "lbv1"); err != nil {
		t.Fatal(err)
	}
	for _, ifc := range []string{"lbv0", "lbv1"} {
		if _, err := set.IP(ns, "link", "set", ifc, "up"); err != nil {
			t.Fatal(err)
		}
	}
	return set, ns
}

func compileExample(t *testing.T, name string, prev *compiler.IR) *compiler.IR {
	t.Helper()
	data, err := examples.Files.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := compiler.Load(name, data)
	if err != nil {
		t.Fatal(err)
	}
	st := compiler.State{}
	for _, s := range dec.Config.Services {
		if s.Weighted() {
			for _, g := range s.Backends {
				for _, e := range g.Endpoints {
					st.SetWeight(e.Name, 10)
				}
			}
		}
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config, State: st, Prev: prev})
	if err != nil {
		t.Fatal(err)
	}
	return res.IR
}

// TestAttachModes loads the production program, attaches it to a veth in
// both modes, pushes a configuration, reopens the pinned datapath as a new
// process would, and checks that Read recompiles to zero writes; then
// detaches and checks the interface has no program left.
func TestAttachModes(t *testing.T) {
	set, ns := vethNS(t, "attach")
	for _, mode := range []string{xdp.ModeNative, xdp.ModeGeneric} {
		t.Run(mode, func(t *testing.T) {
			opts := xdp.Options{Iface: "lbv0", Mode: mode,
				PinDir:   filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-%s", os.Getpid(), mode)),
				StateDir: t.TempDir()}
			ctx := context.Background()
			err := netns.Do(ns, func() error {
				tgt, err := xdp.Attach(ctx, opts)
				if err != nil {
					return err
				}
				if tgt.Mode() != mode {
					return fmt.Errorf("attached in %q, want %q", tgt.Mode(), mode)
				}
				held, err := tgt.Read(ctx)
				if err != nil {
					return err
				}
				if len(held.Services) != 0 {
					return fmt.Errorf("fresh datapath holds %d services", len(held.Services))
				}
				ir := compileExample(t, "weighted.yaml", held)
				if _, err := tgt.Apply(ctx, compiler.DiffIR(held, ir)); err != nil {
					return err
				}
				if err := tgt.Commit(ir); err != nil {
					return err
				}
				tgt.Close()

				// A later process: the program stays attached, maps are pinned.
				tgt2, err := xdp.Attach(ctx, opts)
				if err != nil {
					return err
				}
				defer tgt2.Close()
				if tgt2.Mode() != "" {
					return fmt.Errorf("second Attach re-attached (%s) instead of reusing the pinned link", tgt2.Mode())
				}
				back, err := tgt2.Read(ctx)
				if err != nil {
					return err
				}
				again := compileExample(t, "weighted.yaml", back)
				if d := compiler.DiffIR(back, again); !d.Empty() {
					return fmt.Errorf("recompiling against what the kernel holds gives %d writes, want 0:\n%s", len(d.Changes), d.Summary())
				}
				if back.ServiceByName("api") == nil || back.TunnelSource4.String() != "192.0.2.1" {
					return fmt.Errorf("names or tunnel source lost across processes: %+v", back.Services)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			out, _ := set.IP(ns, "link", "show", "lbv0")
			if !strings.Contains(out, "xdp") {
				t.Fatalf("no XDP program on lbv0 after push:\n%s", out)
			}
			if err := netns.Do(ns, func() error { return xdp.Detach(opts, false) }); err != nil {
				t.Fatal(err)
			}
			out, _ = set.IP(ns, "link", "show", "lbv0")
			if strings.Contains(out, "xdp") {
				t.Fatalf("XDP program still on lbv0 after detach:\n%s", out)
			}
			if _, err := os.Stat(opts.PinDir); !os.IsNotExist(err) {
				t.Fatalf("pin directory %s left behind (%v)", opts.PinDir, err)
			}
		})
	}
}

// TestAutoModeOnVeth (issue 16): on a veth whose peer runs no native XDP
// program, native XDP_TX drops every forwarded frame. With a real veth
// pair in a namespace: --mode auto picks generic there (and says why), and
// a SYN sent in through the peer comes back encapsulated; once the peer
// runs a native XDP program, auto picks native and frames come back too;
// --mode native without one attaches, warns, and (the reason for all of
// this) the frame is lost.
func TestAutoModeOnVeth(t *testing.T) {
	_, ns := vethNS(t, "veth")
	vip := netip.MustParseAddr("203.0.113.10")
	ir := mtuIR(vip, netip.MustParseAddr("10.0.0.1"))
	for i, tc := range []struct {
		name       string
		mode       string
		peerNative bool
		wantMode   string
		forwarded  bool
		warning    string
	}{
		{"auto, bare peer", xdp.ModeAuto, false, xdp.ModeGeneric, true, "auto mode picks generic"},
		{"auto, peer with a native program", xdp.ModeAuto, true, xdp.ModeNative, true, ""},
		{"native, bare peer", xdp.ModeNative, false, xdp.ModeNative, false, "native mode on a veth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			opts := xdp.Options{Iface: "lbv0", Mode: tc.mode,
				PinDir:   filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-veth%d", os.Getpid(), i)),
				StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			err := netns.Do(ns, func() error {
				if tc.peerNative {
					pass, err := fallback.Load(fallback.LoadOptions{})
					if err != nil {
						return err
					}
					defer pass.Close()
					l, err := link.AttachXDP(link.XDPOptions{Program: pass.Pass, Interface: ifindex("lbv1"), Flags: link.XDPDriverMode})
					if err != nil {
						return err
					}
					defer l.Close()
				}
				tgt, err := xdp.Attach(t.Context(), opts)
				if err != nil {
					return err
				}
				defer xdp.Detach(opts, false)
				defer tgt.Close()
				if tgt.Mode() != tc.wantMode {
					return fmt.Errorf("attached in %q, want %q (log: %s)", tgt.Mode(), tc.wantMode, logs.String())
				}
				if tc.warning != "" && !strings.Contains(logs.String(), tc.warning) {
					return fmt.Errorf("log %q lacks %q", logs.String(), tc.warning)
				}
				if tc.warning == "" && strings.Contains(logs.String(), "WARN") {
					return fmt.Errorf("unexpected warning: %s", logs.String())
				}
				if _, err := tgt.Apply(t.Context(), compiler.DiffIR(nil, ir)); err != nil {
					return err
				}
				if err := tgt.Commit(ir); err != nil {
					return err
				}
				got, err := roundTrip(vip, uint16(30000+i))
				if err != nil {
					return err
				}
				if got != tc.forwarded {
					return fmt.Errorf("forwarded frame came back: %v, want %v", got, tc.forwarded)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func ifindex(name string) int {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0
	}
	return ifc.Index
}

// roundTrip sends a TCP SYN to vip:80 into lbv0 through its peer lbv1 and
// reports whether an IP-in-IP frame to the backend (10.0.0.1) came back
// out of lbv0 within a second.
func roundTrip(vip netip.Addr, sport uint16) (bool, error) {
	const ethPAll = 0x0300 // htons(ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, ethPAll)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	peer := ifindex("lbv1")
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: peer}); err != nil {
		return false, err
	}
	tv := unix.Timeval{Usec: 100000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return false, err
	}
	frame, err := xdp.BuildPacket(targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: sport, DstPort: 80, Flags: targets.FlagSYN})
	if err != nil {
		return false, err
	}
	if err := unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: peer, Halen: 6}); err != nil {
		return false, err
	}
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			continue // timeout: look again until the deadline
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own SYN
		}
		// Outer IPv4, protocol 4 (IPIP), to the backend.
		if n >= 34 && buf[12] == 0x08 && buf[13] == 0 && buf[23] == 4 && netip.AddrFrom4([4]byte(buf[30:34])) == netip.MustParseAddr("10.0.0.1") {
			return true, nil
		}
	}
	return false, nil
}

// TestVerifyAttachedUndoes (issue 24): VerifyAttached asks the interface
// which program it runs. While lbc's is attached it passes; once the
// program is gone (here its pinned link is removed behind the target's
// back, as a vanished bpffs did under ip netns exec), it fails with
// ErrNotAttached naming the interface, and removes what the process made:
// the pinned maps and the meta.json its push wrote.
func TestVerifyAttachedUndoes(t *testing.T) {
	set := needNetns(t)
	ns, err := set.Add("verify")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.IP(ns, "link", "add", "lbv0", "type", "veth", "peer", "name", "lbv1"); err != nil {
		t.Fatal(err)
	}
	opts := xdp.Options{Iface: "lbv0", Mode: xdp.ModeGeneric,
		PinDir:   filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-verify", os.Getpid())),
		StateDir: filepath.Join(t.TempDir(), "state")}
	ctx := context.Background()
	err = netns.Do(ns, func() error {
		tgt, err := xdp.Attach(ctx, opts)
		if err != nil {
			return err
		}
		defer tgt.Close()
		ir := compileExample(t, "weighted.yaml", nil)
		if _, err := tgt.Apply(ctx, compiler.DiffIR(nil, ir)); err != nil {
			return err
		}
		if err := tgt.Commit(ir); err != nil {
			return err
		}
		if err := tgt.VerifyAttached(); err != nil {
			return fmt.Errorf("attached program: %w", err)
		}
		l, err := link.LoadPinnedLink(filepath.Join(opts.PinDir, "link"), nil)
		if err != nil {
			return err
		}
		if err := l.Unpin(); err != nil {
			return err
		}
		l.Close() // the program leaves lbv0
		err = tgt.VerifyAttached()
		if !errors.Is(err, xdp.ErrNotAttached) || !strings.Contains(err.Error(), "lbv0 runs no XDP program") {
			return fmt.Errorf("VerifyAttached with the program gone: %v, want ErrNotAttached naming lbv0", err)
		}
		return nil
	})
	if err != nil {
		xdp.Detach(opts, false)
		t.Fatal(err)
	}
	if _, err := os.Stat(opts.PinDir); !os.IsNotExist(err) {
		t.Errorf("pin directory %s left behind (%v)", opts.PinDir, err)
	}
	if _, err := os.Stat(filepath.Join(opts.StateDir, "meta.json")); !os.IsNotExist(err) {
		t.Errorf("meta.json left behind (%v)", err)
	}
}
