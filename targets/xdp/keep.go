package xdp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"github.com/cilium/ebpf/link"

	"github.com/lbc-dev/lbc/fallback"
)

// Another tool can take lbc's program off the interface while lbc run
// keeps its maps open: `ip link set dev IF xdp off` where it was attached
// through netlink, `rm -r` of the pin directory (the pinned link was the
// last reference that kept it attached), a link detached with bpftool.
// The maps, and so the tables and conntrack, live on in this process.
// EnsureProgram attaches the program to them again.

// EnsureProgram attaches lbc's program to the interface again if it runs
// none: the program this target holds (or, if it holds none, one loaded
// anew on its maps), through a BPF link pinned at the link pin path with
// the maps pinned again by their names, or through netlink where pins
// would not outlive the command. It reports whether it attached; the
// tables are those the maps hold, so the controller reads them back and
// writes only what they lack (controller.ProgramKeeper). Another
// program on the interface is left alone: that is an error.
func (t *Target) EnsureProgram(ctx context.Context) (bool, error) {
	if t.progID == 0 {
		return false, nil // a replay: attached nowhere
	}
	var attached bool
	err := t.inNetns(func() error {
		var err error
		attached, err = t.ensureProgram()
		return err
	})
	return attached, err
}

func (t *Target) ensureProgram() (bool, error) {
	err := t.verify()
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, ErrNotAttached) && !t.linkPinGone() {
		return false, err // another program runs there, or the interface is gone
	}
	ifc, ierr := net.InterfaceByName(t.opts.Iface)
	if ierr != nil {
		return false, fmt.Errorf("xdp: attach again: interface %q: %w", t.opts.Iface, ierr)
	}
	if t.pinned {
		pinned, perr := t.dp.Repin(t.opts.PinDir)
		if perr != nil {
			return false, fmt.Errorf("xdp: %s: pin the maps again: %w", t.opts.Iface, perr)
		}
		if len(pinned) > 0 {
			t.opts.Logger.Warn("the datapath's pins were removed: pinned its maps again (tables and conntrack intact)", "iface", t.opts.Iface, "pins", t.opts.PinDir, "maps", pinned)
		}
		if t.dp.Prog == nil {
			// Opened from pins another process made: no program handle.
			if err := t.loadProg(); err != nil {
				return false, err
			}
		}
		if err := t.dropLinkPin(); err != nil {
			return false, err
		}
	}
	a, aerr := attachedProg(ifc.Index)
	if aerr == nil && a.progID != 0 && a.progID != t.progID {
		off := "xdp"
		if a.mode == ModeGeneric {
			off = "xdpgeneric"
		}
		return false, fmt.Errorf("xdp: %s runs XDP program id %d, not lbc's (id %d): left alone; remove it (ip link set dev %s %s off) and lbc attaches its own", t.opts.Iface, a.progID, t.progID, t.opts.Iface, off)
	}
	if a.progID != t.progID {
		mode, err := t.attachProg(ifc.Index)
		if err != nil {
			return false, err
		}
		t.mode = mode
	}
	if err := t.verify(); err != nil {
		return false, err
	}
	pins := t.opts.PinDir
	if !t.pinned {
		pins = "none (held by the interface)"
	}
	t.opts.Logger.Warn("xdp program attached again", "iface", t.opts.Iface, "mode", t.mode, "prog_id", t.progID, "pins", pins, "why", err.Error())
	return true, nil
}

// linkPinGone reports whether the link that keeps a pinned attachment is
// no longer pinned (the program may still run until the link's last
// handle closes).
func (t *Target) linkPinGone() bool {
	if !t.pinned {
		return false
	}
	_, err := os.Stat(t.opts.linkPin())
	return errors.Is(err, fs.ErrNotExist)
}

// dropLinkPin removes a pinned link that no longer keeps this target's
// program attached (detached by another tool), so that a new one can be
// pinned there.
func (t *Target) dropLinkPin() error {
	l, err := link.LoadPinnedLink(t.opts.linkPin(), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		// A pin the kernel cannot open as a link: not lbc's to remove.
		return fmt.Errorf("xdp: %s: open the pinned link %s: %w", t.opts.Iface, t.opts.linkPin(), err)
	}
	defer l.Close()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("xdp: %s: remove the stale link pin %s: %w", t.opts.Iface, t.opts.linkPin(), err)
	}
	return nil
}

// loadProg loads lbc's program on the maps pinned in PinDir (this
// target's, pinned again) and makes it this target's datapath.
func (t *Target) loadProg() error {
	dp, err := fallback.Load(fallback.LoadOptions{PinDir: t.opts.PinDir})
	if err != nil {
		return fmt.Errorf("xdp: %s: load the program again: %w", t.opts.Iface, err)
	}
	info, err := dp.Prog.Info()
	if err != nil {
		dp.Close()
		return fmt.Errorf("xdp: program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		dp.Close()
		return errors.New("xdp: the kernel does not give program IDs (Linux 4.13 or later needed)")
	}
	t.dp.Close()
	t.dp, t.progID = dp, uint32(id)
	return nil
}
