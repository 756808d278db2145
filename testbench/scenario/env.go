package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
	"golang.org/x/sys/unix"
)

// Env is a running topology a scenario drives: a client namespace with
// several source addresses, backend hosts, and the datapaths the
// controller programs.
type Env interface {
	// Name is "netns" or "mininet".
	Name() string
	// Describe is one line for the report.
	Describe() string
	ClientNS() string
	ClientAddrs() []netip.Addr
	Hosts() []Host
	VIP() netip.Addr
	// TunnelSource is the outer source of IP-in-IP packets (lb.yaml tunnel).
	TunnelSource() netip.Addr
	// ProbeNS is the namespace health checks are sent from.
	ProbeNS() string
	// OpenTargets attaches or connects to the datapaths, for a controller;
	// the caller closes them.
	OpenTargets(ctx context.Context) ([]targets.Target, error)
	// RunArgs is how an lbc run process opens the same targets as
	// OpenTargets: the namespace it runs in (health probes leave from
	// there, as from ProbeNS) and its --target flags.
	RunArgs() (ns string, args []string)
	// HasSwitch reports whether there is a P4 switch to restart.
	HasSwitch() bool
	// RestartSwitch restarts the P4 switch (it comes back empty); the
	// caller stops its controller before and starts it after.
	RestartSwitch(ctx context.Context) error
	// KillSwitch SIGKILLs the P4 switch and starts it again empty (no
	// pipeline, no tables, as after a reboot) while the controller runs
	// on; it returns when the switch accepts P4Runtime connections again.
	// The controller must notice and program it by itself.
	KillSwitch(ctx context.Context) error
	// BlockP4Runtime cuts the controller's P4Runtime connection to the
	// switch (on) or restores it (off).
	BlockP4Runtime(on bool) error
	// DetachXDP detaches the XDP program from the datapath's interface,
	// as another tool would (ip link set dev IF xdp off).
	DetachXDP(ctx context.Context) error
	// RemovePins removes the XDP datapath's pins (maps and link) from
	// bpffs, as another tool would.
	RemovePins() error
	// DetachLink detaches the BPF link that keeps the XDP datapath's
	// program attached (bpftool link detach): the program leaves the
	// interface; the link and its pin remain, defunct.
	DetachLink() error
	// Counters reads the datapaths' counters.
	Counters(ctx context.Context) (Counters, error)
	Close() error
}

// xdpRunArgs are lbc run's flags for the XDP target o describes.
func xdpRunArgs(o xdp.Options) []string {
	args := []string{"--target", "xdp=" + o.Iface, "--mode", o.Mode, "--pin-dir", o.PinDir, "--state-dir", o.StateDir,
		// The program's own ring size, as the in-process controller
		// creates it: the scenarios' rings are small, and the default
		// (512 MiB) would cost each start half a second.
		"--ring-entries", "1048576"}
	if o.Egress != "" {
		args = append(args, "--egress", o.Egress)
	}
	return args
}

// mountBPFFS mounts a bpffs of its own on dir/bpffs and returns its path.
// XDP pins live there, outside /sys, as on a host whose /sys/fs/bpf
// outlives every lbc run: `ip netns exec` mounts a fresh /sys for the
// command it runs, where /sys/fs/bpf would be a private bpffs that dies
// with the process (a killed lbc run would take its pins along, and the
// testbench would not see them).
func mountBPFFS(dir string) (string, error) {
	p := filepath.Join(dir, "bpffs")
	if err := os.MkdirAll(p, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount("bpf", p, "bpf", 0, "mode=0700"); err != nil {
		return "", fmt.Errorf("mount bpffs on %s: %w", p, err)
	}
	return p, nil
}

// unmountBPFFS unmounts what mountBPFFS mounted ("": nothing).
func unmountBPFFS(p string) {
	if p != "" {
		unix.Unmount(p, unix.MNT_DETACH)
	}
}

// ErrNoSwitch is returned by RestartSwitch on a topology without a switch.
var ErrNoSwitch = errors.New("no P4 switch in this topology")

// Host is one backend host.
type Host struct {
	NS  string
	IP  netip.Addr
	MAC string
}

// Counters are the datapaths' counters, cumulative.
type Counters struct {
	// Packets of the service per datapath ("xdp", "switch").
	Packets map[string]uint64
	// New connections per backend ID, summed over the datapaths.
	NewConns map[uint32]uint64
}

// nsDialer dials from inside a namespace (health probes from the LB).
type nsDialer struct{ ns string }

func (d nsDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(d.ns, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// attachHelper attaches a helper XDP program (pass, decap) in native mode
// to an interface inside a namespace.
func attachHelper(ns, ifname string, prog *ebpf.Program) (link.Link, error) {
	var l link.Link
	err := netns.Do(ns, func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return fmt.Errorf("attach XDP helper to %s in %s: %w", ifname, ns, err)
		}
		return nil
	})
	return l, err
}
