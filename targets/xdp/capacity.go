package xdp

import (
	"errors"
	"fmt"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
)

// SizeFlags are the flags of `lbc push`, `lbc run` and `lbc validate`
// (--target xdp) that size each map when it is created, by map name
// (fallback.Sizes; fallback's errors name them too).
var SizeFlags = fallback.SizeFlags

// Capacity is the size of the XDP program's tables when its maps have
// sizes s (those a load creates with them, or those that exist already),
// for `lbc validate --target xdp` and the checks of push and run. raise
// says how to make map m larger, given the flag that sizes it (nil: name
// the flag). The vips map is sized when the program is built.
func Capacity(s fallback.Sizes, raise func(m, flag string) string) (compiler.Capacity, error) {
	sizes, err := fallback.MapSizes()
	if err != nil {
		return compiler.Capacity{}, err
	}
	if raise == nil {
		raise = func(_, flag string) string {
			return "raise it with " + flag + " when the maps are created (lbc push or lbc run --target xdp)"
		}
	}
	c := compiler.Capacity{Target: "xdp"}
	for _, t := range []struct {
		m, holds string
		n        uint32
	}{
		{"services", compiler.HoldsServices, s.ServiceEntries},
		{"vips", compiler.HoldsVIPs, sizes["vips"]},
		{"rings", compiler.HoldsRingEntries, s.RingEntries},
		{"backends", compiler.HoldsBackends, s.BackendEntries},
		{"conntrack", compiler.HoldsConnections, s.ConntrackEntries},
	} {
		if _, ok := sizes[t.m]; !ok {
			return compiler.Capacity{}, fmt.Errorf("the XDP program has no %q map (has fallback/bpf/lb.c changed?)", t.m)
		}
		var how string
		switch t.m {
		case "vips":
			how = "raise MAX_VIPS in fallback/bpf/lb.c and rebuild with make bpf"
		case "conntrack":
			how = raise(t.m, SizeFlags[t.m]) + "; an LRU map evicts its least recently used entry when full"
		default:
			how = raise(t.m, SizeFlags[t.m])
		}
		c.Tables = append(c.Tables, compiler.TableCapacity{Table: t.m + " map", Holds: t.holds, Size: int(t.n), Raise: how})
	}
	return c, nil
}

// DetachCommand is the command that removes the datapath of opts, maps
// and all, so that the next push creates its maps anew (at the sizes it
// asks).
func DetachCommand(opts Options) string {
	cmd := "lbc detach --target xdp --iface " + opts.Iface
	if opts.PinDir != "" && !opts.pinDefault {
		cmd += " --pin-dir " + opts.PinDir
	}
	if opts.StateDir != "" && !opts.stateDefault {
		cmd += " --state-dir " + opts.StateDir
	}
	return cmd
}

// fullHint says, for a map that had no room, how to make it larger.
func (t *Target) fullHint(err error) error {
	var fe *fallback.FullError
	if !errors.As(err, &fe) || t.progID == 0 && !t.pinned {
		return err // a replay: its maps live as long as it does
	}
	flag := SizeFlags[fe.Map]
	need := fe.Size + 1
	if fe.Map == "rings" {
		// A new map is written packed: what is in use and the ring that
		// did not fit. When the free entries would have held it but in
		// pieces, room for that ring beside a full map.
		need = fe.Used + fe.Need
		if fe.Short() == 0 {
			need = fe.Size + fe.Need
		}
	}
	return fmt.Errorf("%w: the %s map of %s holds %d entries, the size it was created with; to create it larger (the conntrack is lost with it, so established connections are re-selected): %s, then push again with %s %d or more (lbc validate -c lb.yaml --target xdp %s N tells whether N fits the whole configuration)",
		err, fe.Map, t.Name(), fe.Size, DetachCommand(t.opts), flag, need, flag)
}
