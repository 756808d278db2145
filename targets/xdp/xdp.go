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

	"github.com/cilium/ebpf"
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
	// PinDir holds the pinned maps and link; default /sys/fs/bpf/lbc/<iface>,
	// or /sys/fs/bpf/lbc/netns/<netns>/<iface> outside PID 1's network
	// namespace. Where pins would not outlive the command (ip netns exec
	// without a bpffs mounted on the host: nsview.go), nothing is pinned.
	PinDir string
	// StateDir holds meta.json (names); default /run/lbc/xdp/<iface>, or
	// /run/lbc/xdp/netns/<netns>/<iface> outside PID 1's network namespace.
	StateDir string
	// Egress, when set, is the interface forwarded packets are redirected
	// to (XDP_REDIRECT); without it they leave where they came in (XDP_TX).
	Egress string
	// GatewayMAC is the next hop of IP-in-IP packets whose backend has no
	// MAC in the configuration; without it, packets go back to the router
	// that sent them (their source MAC).
	GatewayMAC net.HardwareAddr
	// ConntrackEntries, RingEntries, ServiceEntries and BackendEntries
	// size the maps when Attach creates them (fallback.LoadOptions; 0:
	// the program's own sizes). Maps that exist already (pinned, or held
	// by the attached program) keep their sizes.
	ConntrackEntries, RingEntries, ServiceEntries, BackendEntries uint32
	// Check, when set, is called by Attach with the sizes of the maps the
	// target will use, before anything is loaded, attached or written:
	// those of the maps that exist already (existing true), or those a
	// load will create. An error refuses the attach, and Attach returns
	// it as it is (`lbc push` compares the sizes with its flags and the
	// configuration, and names the commands that resize the maps).
	Check func(s fallback.Sizes, existing bool) error
	// Clock reads the compile clock, from which backend deadlines are
	// mapped onto the program's (default targets.WallClock).
	Clock  targets.Clock
	Logger *slog.Logger

	view         nsView   // where this process runs (set by defaults)
	netns        *os.File // the network namespace of the interface (netnsthread.go)
	pinDefault   bool     // PinDir is the default
	stateDefault bool     // StateDir is the default
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
	o.view = currentView()
	pins, state := filepath.Join(BPFFS, "lbc"), "/run/lbc/xdp"
	if o.view.netns != "" {
		pins, state = filepath.Join(pins, "netns", o.view.netns), filepath.Join(state, "netns", o.view.netns)
	}
	if o.PinDir == "" {
		o.PinDir = filepath.Join(pins, o.Iface)
		o.pinDefault = true
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Join(state, o.Iface)
		o.stateDefault = true
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = targets.WallClock
	}
	return nil
}

// check calls o.Check, if any.
func (o *Options) check(s fallback.Sizes, existing bool) error {
	if o.Check == nil {
		return nil
	}
	return o.Check(s, existing)
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

	// progID is the program the interface must run (0: a replay).
	progID uint32
	// pinned: maps and link are pinned in opts.PinDir; otherwise the
	// program was attached through netlink and its maps are found
	// through it (pins would not have outlived the command).
	pinned bool
	// made: this process loaded and attached the program; mapsNew and
	// metaNew: it created the pinned maps, meta.json. undo removes them.
	made, mapsNew, metaNew bool
}

var _ targets.Target = (*Target)(nil)

// Attach makes sure the program is attached to opts.Iface and returns the
// target. If a previous push left the program attached (its link pinned,
// or, where pins cannot outlive a command, the interface running lbc's
// program), its maps are reused as they are and nothing is reloaded, so
// conntrack survives; otherwise the program is loaded, its maps created or
// reused from PinDir, and attached in opts.Mode. Either way the interface
// is asked which program it runs before Attach returns: lbc's, or an error
// and nothing left behind.
func Attach(ctx context.Context, opts Options) (*Target, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return withNetns(opts, attachTarget)(ctx)
}

func attachTarget(ctx context.Context, opts Options) (*Target, error) {
	ifc, err := net.InterfaceByName(opts.Iface)
	if err != nil {
		return nil, fmt.Errorf("xdp: interface %q: %w", opts.Iface, err)
	}
	pinned, why, err := pinsOutlive(opts.PinDir, opts.view)
	if err != nil {
		return nil, err
	}
	m, err := loadMeta(opts.metaPath())
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(opts.metaPath())
	metaNew := errors.Is(statErr, fs.ErrNotExist)
	if pinned {
		if l, err := link.LoadPinnedLink(opts.linkPin(), nil); err == nil {
			info, ierr := l.Info()
			l.Close() // the pin keeps it attached
			if ierr != nil {
				return nil, fmt.Errorf("xdp: link pinned at %s: %w", opts.linkPin(), ierr)
			}
			dp, err := fallback.OpenPinned(opts.PinDir)
			if err != nil {
				return nil, err
			}
			if err := opts.check(dp.Sizes(), true); err != nil {
				dp.Close()
				return nil, err
			}
			t := &Target{opts: opts, dp: dp, meta: m, progID: uint32(info.Program), pinned: true}
			if err := t.verify(); err != nil {
				dp.Close()
				return nil, fmt.Errorf("%w; the link pinned at %s does not keep lbc's program on %s (was the interface re-created?): run `lbc detach --target xdp --iface %s --keep-maps` to drop it and keep the tables, then push again", err, opts.linkPin(), opts.Iface, opts.Iface)
			}
			return t, t.setConfig()
		}
	} else {
		opts.Logger.Info("pins would not outlive this command: the program is attached through netlink, so that it stays on the interface, and later commands find it and its maps there",
			"iface", opts.Iface, "why", why)
		a, err := attachedProg(ifc.Index)
		if err != nil {
			return nil, fmt.Errorf("xdp: %s: %w", opts.Iface, err)
		}
		if a.progID != 0 {
			dp, err := openAttached(opts.Iface, a.progID)
			if err != nil {
				return nil, err
			}
			if err := opts.check(dp.Sizes(), true); err != nil {
				dp.Close()
				return nil, err
			}
			t := &Target{opts: opts, dp: dp, meta: m, progID: a.progID}
			return t, t.setConfig()
		}
	}
	lo := fallback.LoadOptions{ConntrackEntries: opts.ConntrackEntries, RingEntries: opts.RingEntries,
		ServiceEntries: opts.ServiceEntries, BackendEntries: opts.BackendEntries}
	mapsNew := false
	sizes, err := lo.Sizes()
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	existing := false
	if pinned {
		lo.PinDir = opts.PinDir
		_, err := os.Stat(filepath.Join(opts.PinDir, "services"))
		mapsNew = errors.Is(err, fs.ErrNotExist)
		// Pinned maps are reused with the sizes they have.
		pins, ok, err := fallback.PinnedSizes(opts.PinDir)
		if err != nil {
			return nil, fmt.Errorf("xdp: %w", err)
		}
		sizes, existing = pins.Or(sizes), ok
	}
	if err := opts.check(sizes, existing); err != nil {
		return nil, err
	}
	dp, err := fallback.Load(lo)
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.E2BIG) {
		return nil, fmt.Errorf("%w: the kernel could not make maps this large; lower --ring-entries or --conntrack-entries (docs/xdp.md#map-sizes)", err)
	}
	if err != nil {
		return nil, err
	}
	if len(dp.CountersReset) > 0 {
		opts.Logger.Warn("pinned counters of an older layout replaced: they restart from zero (tables and conntrack kept)", "maps", dp.CountersReset, "pins", opts.PinDir)
	}
	t := &Target{opts: opts, dp: dp, meta: m, pinned: pinned, made: true, mapsNew: mapsNew, metaNew: metaNew}
	if err := t.setConfig(); err != nil {
		t.undo()
		dp.Close()
		return nil, err
	}
	info, err := dp.Prog.Info()
	if err != nil {
		t.undo()
		dp.Close()
		return nil, fmt.Errorf("xdp: program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		t.undo()
		dp.Close()
		return nil, errors.New("xdp: the kernel does not give program IDs (Linux 4.13 or later needed)")
	}
	t.progID = uint32(id)
	mode, err := t.attachProg(ifc.Index)
	if err != nil {
		t.undo()
		dp.Close()
		return nil, err
	}
	if err := t.verify(); err != nil {
		t.undo()
		dp.Close()
		return nil, err
	}
	t.mode = mode
	pins := opts.PinDir
	if !pinned {
		pins = "none (held by the interface)"
	}
	opts.Logger.Info("xdp program attached", "iface", opts.Iface, "mode", mode, "prog_id", t.progID, "pins", pins)
	return t, nil
}

// attachProg attaches t.dp.Prog to ifindex in the mode the options ask
// for: through a BPF link pinned at the link pin path where pins outlive
// the command, else through netlink. It returns the mode in effect.
func (t *Target) attachProg(ifindex int) (string, error) {
	try := func(mode string) error { return netlinkAttach(ifindex, t.dp.Prog.FD(), mode) }
	if t.pinned {
		try = func(mode string) error {
			l, err := link.AttachXDP(link.XDPOptions{Program: t.dp.Prog, Interface: ifindex, Flags: link.XDPAttachFlags(modeFlag(mode))})
			if err != nil {
				return err
			}
			defer l.Close()
			if err := l.Pin(t.opts.linkPin()); err != nil {
				return fmt.Errorf("pin link at %s: %w", t.opts.linkPin(), err)
			}
			return nil
		}
	}
	return attach(ifindex, t.opts, try)
}

// openAttached opens the datapath of the XDP program id that iface runs.
func openAttached(iface string, id uint32) (*fallback.Datapath, error) {
	dp, err := fallback.OpenAttached(ebpf.ProgramID(id))
	if errors.Is(err, fallback.ErrNotLBC) {
		return nil, fmt.Errorf("xdp: %s runs another XDP program (id %d): %w; remove it first (ip link set dev %s xdp off; xdpgeneric off for a program attached in generic mode)", iface, id, err, iface)
	}
	if err != nil {
		return nil, fmt.Errorf("xdp: %s: %w", iface, err)
	}
	return dp, nil
}

// VerifyAttached asks the interface which XDP program it runs: it must be
// the one this target writes to, and it must stay attached once this
// process exits (its link pinned on a bpffs that outlives the command, or
// attached through netlink). When this process attached it and the check
// fails, what it made (attachment, pins, meta.json) is removed, so that a
// failed push leaves nothing half-done. `lbc push` calls it before saying
// the push succeeded.
func (t *Target) VerifyAttached() error {
	if t.progID == 0 {
		return fmt.Errorf("xdp: %s: a test run is attached nowhere", t.Name())
	}
	err := t.inNetns(t.verify)
	if err != nil && t.made {
		t.undo()
		return fmt.Errorf("%w (the attachment, pins and meta.json this process made are removed; push again)", err)
	}
	return err
}

func (t *Target) verify() error {
	ifc, err := net.InterfaceByName(t.opts.Iface)
	if err != nil {
		return fmt.Errorf("xdp: verify the attachment: interface %q: %w", t.opts.Iface, err)
	}
	a, err := attachedProg(ifc.Index)
	if err != nil {
		return fmt.Errorf("xdp: verify the attachment to %s: %w", t.opts.Iface, err)
	}
	switch {
	case a.progID == 0:
		return fmt.Errorf("xdp: %s runs no XDP program, lbc's (id %d) is not attached: %w", t.opts.Iface, t.progID, ErrNotAttached)
	case a.progID != t.progID:
		return fmt.Errorf("xdp: %s runs XDP program id %d, not lbc's (id %d)", t.opts.Iface, a.progID, t.progID)
	}
	if !t.pinned {
		return nil
	}
	if _, err := os.Stat(t.opts.linkPin()); err != nil {
		return fmt.Errorf("xdp: %s: the link that keeps the program attached is not pinned: %w", t.opts.Iface, err)
	}
	ok, why, err := pinsOutlive(t.opts.PinDir, t.opts.view)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("xdp: %s: the program would be detached when this command exits: %s", t.opts.Iface, why)
	}
	return nil
}

// undo removes what this process made: the attachment, the pinned maps it
// created, and meta.json if it wrote the first one.
func (t *Target) undo() {
	if !t.made {
		return
	}
	if t.pinned {
		if l, err := link.LoadPinnedLink(t.opts.linkPin(), nil); err == nil {
			if info, err := l.Info(); err == nil && uint32(info.Program) == t.progID {
				l.Unpin()
			}
			l.Close()
		}
		if t.mapsNew {
			for _, name := range fallback.PinnedMaps {
				os.Remove(filepath.Join(t.opts.PinDir, name))
			}
			os.Remove(t.opts.PinDir)
		}
	} else if ifc, err := net.InterfaceByName(t.opts.Iface); err == nil && t.dp.Prog != nil {
		if a, err := attachedProg(ifc.Index); err == nil && a.progID == t.progID {
			if err := netlinkDetach(ifc.Index, t.dp.Prog.FD(), a.mode); err != nil {
				t.opts.Logger.Warn("could not remove the program attached by this failed push", "iface", t.opts.Iface, "prog_id", t.progID, "err", err)
			}
		}
	}
	if t.metaNew {
		os.Remove(t.opts.metaPath())
		os.Remove(t.opts.StateDir)
	}
	t.made = false
}

// attach attaches in opts.Mode with try, which attaches in one mode.
func attach(ifindex int, opts Options, try func(mode string) error) (string, error) {
	// A veth drops native XDP_TX frames unless its peer runs a native XDP
	// program (veth.go): auto picks generic mode there, native warns.
	veth, verr := vethInfo(opts.Iface, ifindex)
	if verr != nil {
		opts.Logger.Warn("cannot tell whether the interface is a veth", "iface", opts.Iface, "err", verr)
	}
	txDropped := veth.veth && (!veth.peerKnown || !veth.peerNative) && opts.Egress == ""
	switch opts.Mode {
	case ModeNative:
		err := try(ModeNative)
		if err != nil {
			return "", fmt.Errorf("xdp: attach to %s in native mode: %w (the driver may not support XDP; try --mode generic)", opts.Iface, err)
		}
		switch {
		case txDropped && veth.peerKnown:
			opts.Logger.Warn("native mode on a veth: forwarded packets (XDP_TX) are dropped unless the peer runs an XDP program in native mode; attach one there (any program, even XDP_PASS) or use --mode generic",
				"iface", opts.Iface, "why", veth.describe(opts.Iface))
		case txDropped:
			opts.Logger.Info("native mode on a veth whose peer is in another network namespace: forwarded packets (XDP_TX) are dropped unless the peer runs an XDP program in native mode (any program, even XDP_PASS)",
				"iface", opts.Iface)
		}
		return ModeNative, nil
	case ModeGeneric:
		err := try(ModeGeneric)
		if err != nil {
			return "", fmt.Errorf("xdp: attach to %s in generic mode: %w", opts.Iface, err)
		}
		return ModeGeneric, nil
	}
	if txDropped {
		opts.Logger.Warn("auto mode picks generic: native XDP_TX on this veth would drop every forwarded packet; for native mode, attach an XDP program to the peer in native mode (any program, even XDP_PASS) and push with --mode native",
			"iface", opts.Iface, "why", veth.describe(opts.Iface))
		err := try(ModeGeneric)
		if err != nil {
			return "", fmt.Errorf("xdp: attach to %s in generic mode: %w", opts.Iface, err)
		}
		return ModeGeneric, nil
	}
	err := try(ModeNative)
	if err == nil {
		return ModeNative, nil
	}
	opts.Logger.Warn("native XDP attach failed; falling back to generic mode", "iface", opts.Iface, "reason", err)
	err2 := try(ModeGeneric)
	if err2 != nil {
		return "", fmt.Errorf("xdp: attach to %s: native: %v; generic: %w", opts.Iface, err, err2)
	}
	return ModeGeneric, nil
}

// ErrNotAttached says that no datapath is attached to the interface: no
// push has attached one yet (or it was detached).
var ErrNotAttached = errors.New("nothing attached")

// Open opens the maps of an attached datapath, for status and for
// writes, without loading or attaching anything: the maps pinned in
// PinDir, else those of the lbc program the interface runs (attached
// where pins would not outlive a command); ErrNotAttached (wrapped) when
// there is none.
func Open(opts Options) (*Target, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return withNetns(opts, func(_ context.Context, opts Options) (*Target, error) { return openTarget(opts) })(context.Background())
}

func openTarget(opts Options) (*Target, error) {
	var (
		dp     *fallback.Datapath
		progID uint32
	)
	_, err := os.Stat(filepath.Join(opts.PinDir, "services"))
	switch {
	case err == nil:
		if dp, err = fallback.OpenPinned(opts.PinDir); err != nil {
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("xdp: pinned maps of %s in %s: %w", opts.Iface, opts.PinDir, err)
	default:
		ifc, err := net.InterfaceByName(opts.Iface)
		if err != nil {
			return nil, fmt.Errorf("xdp: no datapath pinned for %s in %s, and the interface cannot be asked: %w", opts.Iface, opts.PinDir, err)
		}
		a, err := attachedProg(ifc.Index)
		if err != nil {
			return nil, fmt.Errorf("xdp: %s: %w", opts.Iface, err)
		}
		if a.progID == 0 {
			return nil, fmt.Errorf("xdp: no datapath pinned for %s in %s and no XDP program on it (push one with `lbc push --target xdp --iface %s`): %w", opts.Iface, opts.PinDir, opts.Iface, ErrNotAttached)
		}
		if dp, err = openAttached(opts.Iface, a.progID); err != nil {
			return nil, err
		}
		progID = a.progID
	}
	m, err := loadMeta(opts.metaPath())
	if err != nil {
		dp.Close()
		return nil, err
	}
	return &Target{opts: opts, dp: dp, meta: m, progID: progID, pinned: progID == 0}, nil
}

// Detach removes the program from the interface. Unless keepMaps, it also
// removes the pinned maps (tables, conntrack, counters) and meta.json. A
// program attached through netlink (pins would not have outlived the
// push) takes its maps with it, so keepMaps is refused for it.
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
	default:
		detached, err := detachNetlink(opts, keepMaps)
		if err != nil {
			return err
		}
		found = detached
	}
	if keepMaps {
		if !found {
			return fmt.Errorf("xdp: nothing attached to %s (no link pinned at %s, no lbc program on the interface)", opts.Iface, opts.linkPin())
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
	if opts.pinDefault && opts.view.netns != "" {
		os.Remove(filepath.Dir(opts.PinDir)) // the namespace's, once empty
	}
	if err := os.Remove(opts.metaPath()); err == nil {
		found = true
	}
	os.Remove(opts.StateDir)
	if opts.stateDefault && opts.view.netns != "" {
		os.Remove(filepath.Dir(opts.StateDir)) // the namespace's, once empty
	}
	if !found {
		return fmt.Errorf("xdp: nothing to detach from %s (nothing pinned in %s, no lbc program on the interface)", opts.Iface, opts.PinDir)
	}
	return nil
}

// detachNetlink removes lbc's program from the interface when it was
// attached through netlink; it reports whether there was one.
func detachNetlink(opts Options, keepMaps bool) (bool, error) {
	ifc, err := net.InterfaceByName(opts.Iface)
	if err != nil {
		return false, nil // gone with its program; the pins and meta.json may remain
	}
	a, err := attachedProg(ifc.Index)
	if err != nil {
		return false, fmt.Errorf("xdp: %s: %w", opts.Iface, err)
	}
	if a.progID == 0 {
		return false, nil
	}
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(a.progID))
	if err != nil {
		return false, fmt.Errorf("xdp: %s: open XDP program id %d: %w", opts.Iface, a.progID, err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return false, fmt.Errorf("xdp: %s: XDP program id %d: %w", opts.Iface, a.progID, err)
	}
	if info.Name != fallback.ProgName {
		return false, fmt.Errorf("xdp: %s runs XDP program id %d (%q), not lbc's: left alone (remove it with ip link set dev %s xdp off; xdpgeneric off for a program attached in generic mode)", opts.Iface, a.progID, info.Name, opts.Iface)
	}
	if keepMaps {
		if _, err := os.Stat(filepath.Join(opts.PinDir, "services")); err != nil {
			return false, fmt.Errorf("xdp: --keep-maps: the tables of %s are not pinned in %s: they live only as long as the program (the push ran where pins would not outlive it, e.g. under ip netns exec); detach without --keep-maps, or push with --pin-dir on a bpffs mounted in the host's mount namespace", opts.Iface, opts.PinDir)
		}
	}
	if err := netlinkDetach(ifc.Index, p.FD(), a.mode); err != nil {
		return false, fmt.Errorf("xdp: remove XDP program id %d from %s: %w", a.progID, opts.Iface, err)
	}
	return true, nil
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
// meta.json. A target attached to an interface first checks that the
// interface runs its program (verify): maps that are intact are no
// datapath if another tool detached the program or removed the pins that
// kept it attached, and the controller's verify then marks the target
// failing and EnsureProgram attaches it again.
func (t *Target) Read(ctx context.Context) (*compiler.IR, error) {
	if t.progID != 0 {
		if err := t.inNetns(t.verify); err != nil {
			return nil, err
		}
	}
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
// At each of the diff's barriers it waits until no packet that may have
// read what the writes before made unreachable is still in the program
// (fallback.Datapath.Grace: an RCU grace period, a fraction of a
// millisecond), so that a packet that chose a backend from the old ring
// finds its row.
func (t *Target) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	t.meta.merge(d)
	if err := t.meta.save(t.metaPathOrEmpty()); err != nil {
		return targets.ApplyStats{}, fmt.Errorf("xdp: save %s: %w", t.metaPathOrEmpty(), err)
	}
	st := targets.ApplyStats{Counts: d.Counts()}
	var err error
	for i, seg := range d.Segments() {
		if i > 0 {
			if err = t.dp.Grace(); err != nil {
				break
			}
		}
		var res fallback.ApplyResult
		res, err = t.dp.Apply(seg, t.opts.Clock)
		st.Writes += res.Writes
		st.Batches += res.Batches
		if err != nil {
			break
		}
	}
	st.Duration = time.Since(start)
	if err != nil {
		return st, fmt.Errorf("xdp: %w", t.fullHint(err))
	}
	// Every change was applied, so the deletes say exactly which names to
	// drop; reading every table back here would make a two-write flip cost
	// as much as the whole configuration.
	t.meta.forget(d)
	err = t.meta.save(t.metaPathOrEmpty())
	st.Duration = time.Since(start)
	return st, err
}

// RingEntries implements targets.RingRoom: the size of the rings map, so
// that a push takes the changing rings in waves it holds beside the
// others (compiler.DiffWithin).
func (t *Target) RingEntries() int { return int(t.dp.Rings.MaxEntries()) }

// Capacity is the size of the maps the datapath holds (targets.Sized).
func (t *Target) Capacity() (compiler.Capacity, error) {
	return Capacity(fallback.Sizes{
		ServiceEntries:   t.dp.Services.MaxEntries(),
		RingEntries:      t.dp.Rings.MaxEntries(),
		BackendEntries:   t.dp.Backends.MaxEntries(),
		ConntrackEntries: t.dp.Conntrack.MaxEntries(),
	}, nil)
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
// else the interface's; a replay, on no interface, the one ReplayOptions
// gives (compiler.DefaultMTU, as the reference model's, by default).
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
func (t *Target) Close() error {
	if t.opts.netns != nil {
		t.opts.netns.Close()
	}
	return t.dp.Close()
}
