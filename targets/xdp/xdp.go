package xdp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets"
)

// Attach modes.
const (
	ModeNative  = "native"  // in the driver (XDP_FLAGS_DRV_MODE)
	ModeGeneric = "generic" // in the stack after the skb is built (XDP_FLAGS_SKB_MODE)
	ModeAuto    = "auto"    // native, else generic with the reason logged; generic on a veth whose peer has no native XDP program
)

// BPFFS is where bpffs is mounted (and mounted if missing).
const BPFFS = "/sys/fs/bpf"

// Options locate and shape the datapath of one interface.
type Options struct {
	// Iface is the interface the program is attached to.
	Iface string
	// Mode is ModeNative, ModeGeneric or ModeAuto (default).
	Mode string
	// PinDir holds the pinned maps and link; default /sys/fs/bpf/lbc/<iface>.
	PinDir string
	// StateDir holds meta.json (names); default /run/lbc/xdp/<iface>.
	StateDir string
	// Egress, when set, is the interface forwarded packets are redirected
	// to (XDP_REDIRECT); without it they leave where they came in (XDP_TX).
	Egress string
	// GatewayMAC is the next hop of IP-in-IP packets whose backend has no
	// MAC in the configuration; without it, packets go back to the router
	// that sent them (their source MAC).
	GatewayMAC net.HardwareAddr
	// ConntrackEntries and RingEntries size the maps when they are created.
	ConntrackEntries, RingEntries uint32
	// Clock reads the compile clock, from which backend deadlines are
	// mapped onto the program's (default targets.WallClock).
	Clock  targets.Clock
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	if o.Iface == "" {
		return errors.New("xdp: no interface given (--iface)")
	}
	if o.Mode == "" {
		o.Mode = ModeAuto
	}
	switch o.Mode {
	case ModeNative, ModeGeneric, ModeAuto:
	default:
		return fmt.Errorf("xdp: mode %q: use native, generic or auto", o.Mode)
	}
	if o.PinDir == "" {
		o.PinDir = filepath.Join(BPFFS, "lbc", o.Iface)
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join("/run/lbc/xdp", o.Iface)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = targets.WallClock
	}
	return nil
}

func (o *Options) metaPath() string { return filepath.Join(o.StateDir, "meta.json") }
func (o *Options) linkPin() string  { return filepath.Join(o.PinDir, "link") }

// Target is the XDP datapath of one interface.
type Target struct {
	opts Options
	dp   *fallback.Datapath
	meta *meta
	mode string // the attach mode in effect, when this process attached
	// ownMTU is the egress MTU when the IR gives none: the interface's,
	// or the replay's (R-MTU).
	ownMTU uint16
}

var _ targets.Target = (*Target)(nil)

// Attach makes sure the program is attached to opts.Iface and returns the
// target. If a previous push left the program attached (its link pinned),
// the pinned maps are reused as they are and nothing is reloaded, so
// conntrack survives; otherwise the program is loaded, its maps created or
// reused from PinDir, and attached in opts.Mode.
func Attach(ctx context.Context, opts Options) (*Target, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	ifc, err := net.InterfaceByName(opts.Iface)
	if err != nil {
		return nil, fmt.Errorf("xdp: interface %q: %w", opts.Iface, err)
	}
	if err := ensureBPFFS(opts.PinDir); err != nil {
		return nil, err
	}
	m, err := loadMeta(opts.metaPath())
	if err != nil {
		return nil, err
	}
	if l, err := link.LoadPinnedLink(opts.linkPin(), nil); err == nil {
		l.Close() // the pin keeps it attached
		dp, err := fallback.OpenPinned(opts.PinDir)
		if err != nil {
			return nil, err
		}
		t := &Target{opts: opts, dp: dp, meta: m}
		return t, t.setConfig()
	}
	dp, err := fallback.Load(fallback.LoadOptions{PinDir: opts.PinDir, ConntrackEntries: opts.ConntrackEntries, RingEntries: opts.RingEntries})
	if err != nil {
		return nil, err
	}
	t := &Target{opts: opts, dp: dp, meta: m}
	if err := t.setConfig(); err != nil {
		dp.Close()
		return nil, err
	}
	l, mode, err := attach(dp, ifc.Index, opts)
	if err != nil {
		dp.Close()
		return nil, err
	}
	defer l.Close()
	if err := l.Pin(opts.linkPin()); err != nil {
		return nil, fmt.Errorf("xdp: pin link at %s: %w", opts.linkPin(), err)
	}
	t.mode = mode
	opts.Logger.Info("xdp program attached", "iface", opts.Iface, "mode", mode, "pins", opts.PinDir)
	return t, nil
}

func attach(dp *fallback.Datapath, ifindex int, opts Options) (link.Link, string, error) {
	try := func(flags link.XDPAttachFlags) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: dp.Prog, Interface: ifindex, Flags: flags})
	}
	// A veth drops native XDP_TX frames unless its peer runs a native XDP
	// program (veth.go): auto picks generic mode there, native warns.
	veth, verr := vethInfo(opts.Iface, ifindex)
	if verr != nil {
		opts.Logger.Warn("cannot tell whether the interface is a veth", "iface", opts.Iface, "err", verr)
	}
	txDropped := veth.veth && (!veth.peerKnown || !veth.peerNative) && opts.Egress == ""
	switch opts.Mode {
	case ModeNative:
		l, err := try(link.XDPDriverMode)
		if err != nil {
			return nil, "", fmt.Errorf("xdp: attach to %s in native mode: %w (the driver may not support XDP; try --mode generic)", opts.Iface, err)
		}
		switch {
		case txDropped && veth.peerKnown:
			opts.Logger.Warn("native mode on a veth: forwarded packets (XDP_TX) are dropped unless the peer runs an XDP program in native mode; attach one there (any program, even XDP_PASS) or use --mode generic",
				"iface", opts.Iface, "why", veth.describe(opts.Iface))
		case txDropped:
			opts.Logger.Info("native mode on a veth whose peer is in another network namespace: forwarded packets (XDP_TX) are dropped unless the peer runs an XDP program in native mode (any program, even XDP_PASS)",
				"iface", opts.Iface)
		}
		return l, ModeNative, nil
	case ModeGeneric:
		l, err := try(link.XDPGenericMode)
		if err != nil {
			return nil, "", fmt.Errorf("xdp: attach to %s in generic mode: %w", opts.Iface, err)
		}
		return l, ModeGeneric, nil
	}
	if txDropped {
		opts.Logger.Warn("auto mode picks generic: native XDP_TX on this veth would drop every forwarded packet; for native mode, attach an XDP program to the peer in native mode (any program, even XDP_PASS) and push with --mode native",
			"iface", opts.Iface, "why", veth.describe(opts.Iface))
		l, err := try(link.XDPGenericMode)
		if err != nil {
			return nil, "", fmt.Errorf("xdp: attach to %s in generic mode: %w", opts.Iface, err)
		}
		return l, ModeGeneric, nil
	}
	l, err := try(link.XDPDriverMode)
	if err == nil {
		return l, ModeNative, nil
	}
	opts.Logger.Warn("native XDP attach failed; falling back to generic mode", "iface", opts.Iface, "reason", err)
	l, err2 := try(link.XDPGenericMode)
	if err2 != nil {
		return nil, "", fmt.Errorf("xdp: attach to %s: native: %v; generic: %w", opts.Iface, err, err2)
	}
	return l, ModeGeneric, nil
}

// ErrNotAttached says that no datapath is pinned for the interface: no
// push has attached one yet (or it was detached).
var ErrNotAttached = errors.New("nothing attached")

// Open opens the pinned maps of an attached datapath, for status and for
// writes, without loading or attaching anything; ErrNotAttached (wrapped)
// when there is none.
func Open(opts Options) (*Target, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(opts.PinDir, "services")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = ErrNotAttached
		}
		return nil, fmt.Errorf("xdp: no datapath pinned for %s in %s (push one with `lbc push --target xdp --iface %s`): %w", opts.Iface, opts.PinDir, opts.Iface, err)
	}
	dp, err := fallback.OpenPinned(opts.PinDir)
	if err != nil {
		return nil, err
	}
	m, err := loadMeta(opts.metaPath())
	if err != nil {
		dp.Close()
		return nil, err
	}
	return &Target{opts: opts, dp: dp, meta: m}, nil
}

// Detach removes the program from the interface. Unless keepMaps, it also
// removes the pinned maps (tables, conntrack, counters) and meta.json.
func Detach(opts Options, keepMaps bool) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	found := false
	l, err := link.LoadPinnedLink(opts.linkPin(), nil)
	switch {
	case err == nil:
		found = true
		if err := l.Unpin(); err != nil {
			l.Close()
			return fmt.Errorf("xdp: unpin link: %w", err)
		}
		l.Close() // last reference: the program leaves the interface
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("xdp: open pinned link %s: %w", opts.linkPin(), err)
	}
	if keepMaps {
		if !found {
			return fmt.Errorf("xdp: nothing attached to %s (no link pinned at %s)", opts.Iface, opts.linkPin())
		}
		return nil
	}
	for _, name := range fallback.PinnedMaps {
		err := os.Remove(filepath.Join(opts.PinDir, name))
		if err == nil {
			found = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("xdp: remove pinned map: %w", err)
		}
	}
	os.Remove(opts.PinDir)
	if err := os.Remove(opts.metaPath()); err == nil {
		found = true
	}
	os.Remove(opts.StateDir)
	if !found {
		return fmt.Errorf("xdp: nothing to detach from %s (nothing pinned in %s)", opts.Iface, opts.PinDir)
	}
	return nil
}

// ensureBPFFS mounts bpffs on /sys/fs/bpf when dir is below it and it is
// not mounted (it is not at boot on some systems).
func ensureBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFS, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if rel, err := filepath.Rel(BPFFS, dir); err != nil || rel == ".." || len(rel) >= 3 && rel[:3] == "../" {
		return nil // the caller chose another place; loading will say if it is not bpffs
	}
	if err := os.MkdirAll(BPFFS, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("bpf", BPFFS, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("xdp: bpffs is not mounted on %s and mounting it failed: %w (mount -t bpf bpf %s)", BPFFS, err, BPFFS)
	}
	return nil
}

// Name implements targets.Target.
func (t *Target) Name() string {
	if t.opts.Iface == "" {
		return "xdp (test run)"
	}
	return "xdp " + t.opts.Iface
}

// Mode is the attach mode, when this process attached the program ("" if
// it reused an attachment).
func (t *Target) Mode() string { return t.mode }

// Datapath gives access to the loaded program and maps (tests, benchmarks).
func (t *Target) Datapath() *fallback.Datapath { return t.dp }

func (t *Target) setConfig() error {
	c, err := t.dp.ReadConfig()
	if err != nil {
		return err
	}
	ifc, err := net.InterfaceByName(t.opts.Iface)
	if err != nil {
		return fmt.Errorf("xdp: interface %q: %w", t.opts.Iface, err)
	}
	// An MTU beyond an IP packet's largest (lo's is 65536) limits nothing.
	t.ownMTU = uint16(min(ifc.MTU, 0xffff))
	c.MTU = t.egressMTU(t.meta.MTU)
	if len(t.opts.GatewayMAC) != 0 {
		c.GatewayMAC = t.opts.GatewayMAC
	}
	c.EgressIfindex = 0
	if t.opts.Egress != "" {
		e, err := net.InterfaceByName(t.opts.Egress)
		if err != nil {
			return fmt.Errorf("xdp: egress interface %q: %w", t.opts.Egress, err)
		}
		c.EgressIfindex = uint32(e.Index)
	}
	return t.dp.SetConfig(c)
}

// Read implements targets.Target: the tables in the maps, with names from
// meta.json.
func (t *Target) Read(ctx context.Context) (*compiler.IR, error) {
	ir, err := t.dp.ReadTables()
	if err != nil {
		return nil, err
	}
	c, err := t.dp.ReadConfig()
	if err != nil {
		return nil, err
	}
	ir.TunnelSource4, ir.TunnelSource6 = c.TunnelSource4, c.TunnelSource6
	ir.MTU = t.meta.MTU // the configuration's; the program holds the one in effect
	// Names of rows the kernel no longer holds (a push interrupted after
	// its deletes) are dropped here, where the tables are read anyway.
	t.meta.prune(ir)
	t.meta.fill(ir)
	return ir, nil
}

// Apply implements targets.Target. Map writes follow the diff's order;
// meta.json is written before (with the union of old and new names) and
// after (without the deleted rows), so a crash in between never loses a name.
func (t *Target) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	t.meta.merge(d)
	if err := t.meta.save(t.metaPathOrEmpty()); err != nil {
		return targets.ApplyStats{}, fmt.Errorf("xdp: save %s: %w", t.metaPathOrEmpty(), err)
	}
	res, err := t.dp.Apply(d.Changes, t.opts.Clock)
	st := targets.ApplyStats{Counts: d.Counts(), Writes: res.Writes, Batches: res.Batches, Duration: time.Since(start)}
	if err != nil {
		return st, fmt.Errorf("xdp: %w", err)
	}
	// Every change was applied, so the deletes say exactly which names to
	// drop; reading every table back here would make a two-write flip cost
	// as much as the whole configuration.
	t.meta.forget(d)
	err = t.meta.save(t.metaPathOrEmpty())
	st.Duration = time.Since(start)
	return st, err
}

// Commit records what a diff does not carry: every row's name and
// informational fields, the ID allocators, and the tunnel sources. `lbc
// push` calls it after Apply with the IR it pushed.
func (t *Target) Commit(ir *compiler.IR) error {
	c, err := t.dp.ReadConfig()
	if err != nil {
		return err
	}
	c.TunnelSource4, c.TunnelSource6 = ir.TunnelSource4, ir.TunnelSource6
	c.MTU = t.egressMTU(ir.MTU)
	if err := t.dp.SetConfig(c); err != nil {
		return fmt.Errorf("xdp: %w", err)
	}
	t.meta = metaFromIR(ir)
	return t.meta.save(t.metaPathOrEmpty())
}

// egressMTU is the MTU the program checks (R-MTU): the configuration's,
// else the interface's; a replay, on no interface, checks only the
// configuration's (ReplayOptions.MTU aside). 0 checks nothing.
func (t *Target) egressMTU(configured uint16) uint16 {
	if configured != 0 {
		return configured
	}
	return t.ownMTU
}

func (t *Target) metaPathOrEmpty() string {
	if t.opts.StateDir == "" {
		return ""
	}
	return t.opts.metaPath()
}

// Close implements targets.Target: the datapath stays attached.
func (t *Target) Close() error { return t.dp.Close() }
