package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
	"github.com/urfave/cli/v2"
)

var (
	ifaceFlag  = &cli.StringFlag{Name: "iface", Usage: "xdp: `INTERFACE` the program is attached to (packets to the VIPs arrive there)"}
	modeFlag   = &cli.StringFlag{Name: "mode", Value: xdp.ModeAuto, Usage: "xdp: attach `MODE`: native (in the driver), generic (after the skb is built; any interface), auto (native, else generic with the reason logged; generic on a veth whose peer runs no native XDP program, where native XDP_TX drops every forwarded packet)"}
	pinFlag    = &cli.StringFlag{Name: "pin-dir", Usage: "xdp: bpffs `DIR` for the pinned maps and link (default /sys/fs/bpf/lbc/<iface>)"}
	stateFlag  = &cli.StringFlag{Name: "state-dir", Usage: "xdp: `DIR` of meta.json, the names the maps do not hold (default /run/lbc/xdp/<iface>)"}
	egressFlag = &cli.StringFlag{Name: "egress", Usage: "xdp: redirect forwarded packets out of `INTERFACE` (XDP_REDIRECT); default: back out of --iface (XDP_TX)"}
	gwFlag     = &cli.StringFlag{Name: "gateway-mac", Usage: "xdp: next-hop `MAC` of IP-in-IP packets whose backend has no mac: in lb.yaml; default: the MAC the packet came from"}
	keepFlag   = &cli.BoolFlag{Name: "keep-maps", Usage: "xdp detach: keep the pinned tables and conntrack, so that the next push resumes with them"}
)

var xdpAdapter = &adapter{
	Usage:    "XDP program on a Linux interface (fallback-only mode or behind a P4 switch's fallback port)",
	Flags:    []cli.Flag{ifaceFlag, modeFlag, pinFlag, stateFlag, egressFlag, gwFlag},
	Open:     func(c *cli.Context) (targets.Target, error) { return openXDP(c, true) },
	OpenRead: func(c *cli.Context) (targets.Target, error) { return openXDP(c, false) },
	OpenPreview: func(c *cli.Context) (targets.Target, error) {
		t, err := openXDP(c, false)
		if !errors.Is(err, xdp.ErrNotAttached) {
			return t, err
		}
		// Nothing attached yet: the first push writes everything.
		iface := c.String(ifaceFlag.Name)
		if _, err := net.InterfaceByName(iface); err != nil {
			return nil, fmt.Errorf("xdp: interface %q: %w", iface, err)
		}
		return emptyTarget{name: "xdp " + iface + " (nothing attached yet)"}, nil
	},
	Detach: func(c *cli.Context) error {
		opts, err := xdpOptions(c)
		if err != nil {
			return err
		}
		if err := xdp.Detach(opts, c.Bool(keepFlag.Name)); err != nil {
			return err
		}
		what := "program, tables and conntrack"
		if c.Bool(keepFlag.Name) {
			what = "program (tables and conntrack kept)"
		}
		fmt.Fprintf(c.App.Writer, "xdp: detached from %s: %s removed\n", opts.Iface, what)
		return nil
	},
	Counters: func(t targets.Target) (*counters, error) {
		xt, ok := t.(*xdp.Target)
		if !ok {
			return nil, nil
		}
		s, err := xt.Datapath().ReadStats()
		if err != nil {
			return nil, err
		}
		out := &counters{Global: s.Global, Services: map[uint32]map[string]uint64{}, Backends: map[uint32]map[string]uint64{}}
		for id, v := range s.Services {
			out.Services[id] = map[string]uint64{"packets": v.Packets, "bytes": v.Bytes, "new": v.NewConns, "drops": v.Drops, "icmp_error_misses": v.ICMPErrorMisses}
		}
		for id, v := range s.Backends {
			out.Backends[id] = map[string]uint64{"packets": v.Packets, "new": v.NewConns}
		}
		return out, nil
	},
}

func xdpOptions(c *cli.Context) (xdp.Options, error) {
	opts := xdp.Options{Iface: c.String(ifaceFlag.Name), Mode: c.String(modeFlag.Name), PinDir: c.String(pinFlag.Name),
		StateDir: c.String(stateFlag.Name), Egress: c.String(egressFlag.Name),
		Logger: slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))}
	if opts.Iface == "" {
		return opts, fmt.Errorf("--target xdp needs --iface INTERFACE (e.g. --iface eth1)")
	}
	if s := c.String(gwFlag.Name); s != "" {
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 {
			return opts, fmt.Errorf("--gateway-mac %q: want a MAC like 02:00:00:00:00:01", s)
		}
		opts.GatewayMAC = hw
	}
	if os.Geteuid() != 0 {
		return opts, fmt.Errorf("--target xdp needs root (CAP_BPF and CAP_NET_ADMIN) to load and read BPF maps")
	}
	return opts, nil
}

func openXDP(c *cli.Context, write bool) (targets.Target, error) {
	opts, err := xdpOptions(c)
	if err != nil {
		return nil, err
	}
	if write {
		return xdp.Attach(c.Context, opts)
	}
	return xdp.Open(opts)
}

// emptyTarget is a datapath nobody has programmed: it reads as an empty IR
// and refuses writes (push --dry-run previews a first push with it).
type emptyTarget struct{ name string }

func (e emptyTarget) Name() string                               { return e.name }
func (e emptyTarget) Read(context.Context) (*compiler.IR, error) { return &compiler.IR{}, nil }
func (e emptyTarget) Close() error                               { return nil }
func (e emptyTarget) Apply(context.Context, compiler.Diff) (targets.ApplyStats, error) {
	return targets.ApplyStats{}, fmt.Errorf("%s: a preview cannot be written", e.name)
}
