package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
	tbnetns "github.com/lbc-dev/lbc/testbench/netns"
)

// The VIP of the scenario's service on the namespace topology.
var netnsVIP = netip.MustParseAddr("10.99.100.1")

// netnsEnv is fallback-only mode: the XDP datapath alone on the LB's veth
// (testbench/tbnetns.LBTopology), backends decapsulating with XDP.
type netnsEnv struct {
	set     *netns.Set
	topo    *tbnetns.LBTopology
	clients []netip.Addr
	hosts   []Host
	helpers *fallback.Datapath
	links   []link.Link
	opts    xdp.Options
	dir     string // the XDP state and bpffs (pins)
	bpffs   string
}

// NewNetnsEnv builds the namespace topology with n backends and the given
// number of client addresses. Namespaces are named prefix-*; use a prefix
// unique to the process (it includes the PID by default).
func NewNetnsEnv(ctx context.Context, prefix string, n, clients int) (Env, error) {
	if err := netns.Available(); err != nil {
		return nil, fmt.Errorf("namespace topology: %w", err)
	}
	e := &netnsEnv{set: netns.NewSet(prefix)}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	topo, err := tbnetns.NewLBTopology(e.set, n, []netip.Addr{netnsVIP})
	if err != nil {
		return nil, err
	}
	e.topo = topo
	// Extra client addresses 10.99.0.100.. on the client's interface: the
	// backends answer them directly (same L2 segment).
	e.clients = []netip.Addr{topo.ClientIP}
	for i := 1; i < clients; i++ {
		a := netip.AddrFrom4([4]byte{10, 99, 0, byte(99 + i)})
		if _, err := e.set.IP(topo.Client, "addr", "add", a.String()+"/24", "dev", topo.ClientIf); err != nil {
			return nil, err
		}
		e.clients = append(e.clients, a)
	}
	for i, ns := range topo.Backends {
		e.hosts = append(e.hosts, Host{NS: ns, IP: topo.BackendIPs[i], MAC: topo.BackendMACs[i]})
	}
	// XDP_PASS on the bridge port facing the LB (native XDP_TX on a veth
	// needs a program on the peer); decapsulation on the backends.
	if e.helpers, err = fallback.Load(fallback.LoadOptions{}); err != nil {
		return nil, err
	}
	attach := func(ns, ifname string, prog *ebpf.Program) error {
		l, err := attachHelper(ns, ifname, prog)
		if err == nil {
			e.links = append(e.links, l)
		}
		return err
	}
	if err := attach(topo.SW, topo.LBPeer, e.helpers.Pass); err != nil {
		return nil, err
	}
	for _, ns := range topo.Backends {
		if err := attach(ns, topo.BackendIf, e.helpers.Decap); err != nil {
			return nil, err
		}
	}
	if e.dir, err = os.MkdirTemp("", prefix+"-xdp-"); err != nil {
		return nil, err
	}
	if e.bpffs, err = mountBPFFS(e.dir); err != nil {
		return nil, err
	}
	e.opts = xdp.Options{Iface: topo.LBIf, Mode: xdp.ModeNative,
		PinDir: filepath.Join(e.bpffs, "xdp"), StateDir: filepath.Join(e.dir, "state"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ok = true
	return e, nil
}

func (e *netnsEnv) Name() string { return "netns" }
func (e *netnsEnv) Describe() string {
	return fmt.Sprintf("network namespaces, fallback-only mode: XDP datapath (native) on %s in %s; %d backends decapsulating IP-in-IP with XDP; client %s with %d source addresses",
		e.topo.LBIf, e.topo.LB, len(e.hosts), e.topo.Client, len(e.clients))
}
func (e *netnsEnv) ClientNS() string          { return e.topo.Client }
func (e *netnsEnv) ClientAddrs() []netip.Addr { return e.clients }
func (e *netnsEnv) Hosts() []Host             { return e.hosts }
func (e *netnsEnv) VIP() netip.Addr           { return netnsVIP }
func (e *netnsEnv) TunnelSource() netip.Addr  { return e.topo.LBIP }
func (e *netnsEnv) ProbeNS() string           { return e.topo.LB }

func (e *netnsEnv) OpenTargets(ctx context.Context) ([]targets.Target, error) {
	var t *xdp.Target
	err := netns.Do(e.topo.LB, func() error {
		var err error
		t, err = xdp.Attach(ctx, e.opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []targets.Target{t}, nil
}

// RunArgs: the XDP datapath, from the LB's namespace.
func (e *netnsEnv) RunArgs() (string, []string) { return e.topo.LB, xdpRunArgs(e.opts) }

func (e *netnsEnv) HasSwitch() bool                     { return false }
func (e *netnsEnv) RestartSwitch(context.Context) error { return ErrNoSwitch }

func (e *netnsEnv) KillSwitch(context.Context) error { return ErrNoSwitch }
func (e *netnsEnv) BlockP4Runtime(bool) error        { return ErrNoSwitch }

func (e *netnsEnv) DetachXDP(ctx context.Context) error {
	return detachXDP(ctx, e.topo.LB, e.topo.LBIf)
}

func (e *netnsEnv) RemovePins() error { return removePins(e.opts.PinDir) }

func (e *netnsEnv) DetachLink() error { return detachLink(e.opts.PinDir) }

// detachLink detaches the BPF link pinned in dir, as `bpftool link
// detach` does: the program leaves the interface, the link object and its
// pin stay (defunct).
func detachLink(dir string) error {
	l, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil)
	if err != nil {
		return fmt.Errorf("pinned link in %s: %w", dir, err)
	}
	defer l.Close()
	if err := l.Detach(); err != nil {
		return fmt.Errorf("detach the link pinned in %s: %w", dir, err)
	}
	return nil
}

// removePins removes a pin directory on bpffs: the pinned objects stay
// alive while something holds them open.
func removePins(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("pins %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove pins %s: %w", dir, err)
	}
	return nil
}

// detachXDP runs ip link set dev ifname xdp off in ns: what another tool
// does when it takes the interface's XDP hook.
func detachXDP(ctx context.Context, ns, ifname string) error {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "ip", "link", "set", "dev", ifname, "xdp", "off").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip link set dev %s xdp off in %s: %v: %s", ifname, ns, err, bytes.TrimSpace(out))
	}
	return nil
}

func (e *netnsEnv) Counters(ctx context.Context) (Counters, error) {
	t, err := xdp.Open(e.opts)
	if err != nil {
		return Counters{}, err
	}
	defer t.Close()
	return xdpCounters(t)
}

func xdpCounters(t *xdp.Target) (Counters, error) {
	s, err := t.Datapath().ReadStats()
	if err != nil {
		return Counters{}, err
	}
	c := Counters{Packets: map[string]uint64{}, NewConns: map[uint32]uint64{}}
	for _, sv := range s.Services {
		c.Packets["xdp"] += sv.Packets
	}
	for id, b := range s.Backends {
		c.NewConns[id] += b.NewConns
	}
	return c, nil
}

func (e *netnsEnv) Close() error {
	if e.opts.PinDir != "" && e.topo != nil {
		netns.Do(e.topo.LB, func() error { return xdp.Detach(e.opts, false) })
	}
	for _, l := range e.links {
		l.Close()
	}
	if e.helpers != nil {
		e.helpers.Close()
	}
	unmountBPFFS(e.bpffs)
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
	return e.set.Close()
}
