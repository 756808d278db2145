package xdp_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// ringIR is n services of ringSize ring with a backend each.
func ringIR(n int, ring uint32) *compiler.IR {
	ir := &compiler.IR{TunnelSource4: netip.MustParseAddr("192.0.2.1")}
	for id := uint32(1); id <= uint32(n); id++ {
		ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(id)}), Kind: compiler.MatchAnyProto}, ServiceID: id})
		row := compiler.ServiceRow{ID: id, Name: fmt.Sprint("s", id), RingSize: ring, IdleTimeoutSec: 60}
		for c := range row.Classes {
			row.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityClientIP, compiler.TrackPerConnection, compiler.PersistDefault)
		}
		ir.Services = append(ir.Services, row)
		half := make([]uint32, ring)
		for i := range half {
			half[i] = 100 + id
		}
		ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: id, Halves: [2][]uint32{half, nil}})
		ir.Backends = append(ir.Backends, compiler.BackendRow{ID: 100 + id, ServiceID: id, Name: fmt.Sprint("b", id), IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(id)}), Healthy: true})
	}
	ir.Sort()
	return ir
}

// TestAttachSizes: Attach creates the maps at the sizes Options ask and
// calls Check, before it loads anything, with the sizes of the maps the
// target will use: those it creates (existing false), or those that exist
// (pinned with the link, or pinned alone after detach --keep-maps), which
// keep their sizes whatever a later attach asks. A Check that refuses
// leaves nothing behind: no pins, no program on the interface, no
// meta.json. A push that the maps cannot hold names the flag that sizes
// the full map and the command that removes the maps.
func TestAttachSizes(t *testing.T) {
	set, ns := vethNS(t, "sizes")
	pins := filepath.Join(xdp.BPFFS, fmt.Sprintf("lbc-test-%d-sizes", os.Getpid()))
	state := t.TempDir()
	t.Cleanup(func() { os.RemoveAll(pins) })
	created := fallback.Sizes{ServiceEntries: 8, BackendEntries: 16, RingEntries: 60, ConntrackEntries: 64}
	opts := func(s fallback.Sizes, check func(fallback.Sizes, bool) error) xdp.Options {
		return xdp.Options{Iface: "lbv0", Mode: xdp.ModeGeneric, PinDir: pins, StateDir: state,
			ServiceEntries: s.ServiceEntries, BackendEntries: s.BackendEntries, RingEntries: s.RingEntries, ConntrackEntries: s.ConntrackEntries, Check: check}
	}
	refuse := errors.New("refused by Check")
	attached := func() bool {
		out, _ := set.IP(ns, "link", "show", "lbv0")
		return strings.Contains(out, "xdp")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ask  fallback.Sizes
		// before: what to do to the datapath first (nil: nothing)
		before       func() error
		refuse       bool
		wantExisting bool
		wantSizes    fallback.Sizes
	}{
		{"fresh, refused", created, nil, true, false, created},
		{"fresh", created, nil, false, false, created},
		{"link pinned, larger sizes asked", fallback.Sizes{ServiceEntries: 100, BackendEntries: 100, RingEntries: 1000, ConntrackEntries: 1000}, nil, false, true, created},
		{"link pinned, refused", created, nil, true, true, created},
		{"maps pinned alone (detach --keep-maps), other sizes asked", fallback.Sizes{ServiceEntries: 4, BackendEntries: 4, RingEntries: 30, ConntrackEntries: 32}, func() error { return xdp.Detach(opts(created, nil), true) }, false, true, created},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var called []string
			check := func(s fallback.Sizes, existing bool) error {
				called = append(called, fmt.Sprint(s, existing))
				if s != tc.wantSizes || existing != tc.wantExisting {
					t.Errorf("Check(%+v, existing %v), want (%+v, %v)", s, existing, tc.wantSizes, tc.wantExisting)
				}
				if tc.refuse {
					return refuse
				}
				return nil
			}
			wasAttached := attached()
			_, pinErr := os.Stat(pins)
			err := netns.Do(ns, func() error {
				if tc.before != nil {
					if err := tc.before(); err != nil {
						return err
					}
					wasAttached = attached()
				}
				tgt, err := xdp.Attach(ctx, opts(tc.ask, check))
				if err != nil {
					return err
				}
				defer tgt.Close()
				dp := tgt.Datapath()
				got := dp.Sizes()
				info, err := dp.Rings.Info() // the kernel's word
				if err != nil {
					return err
				}
				if got != tc.wantSizes || info.MaxEntries != tc.wantSizes.RingEntries {
					return fmt.Errorf("maps of %+v (rings %d by the kernel's map info), want %+v", got, info.MaxEntries, tc.wantSizes)
				}
				return nil
			})
			if len(called) != 1 {
				t.Errorf("Check called %d times (%v), want once", len(called), called)
			}
			if tc.refuse {
				if !errors.Is(err, refuse) {
					t.Fatalf("Attach: %v, want Check's refusal as it is", err)
				}
				if attached() != wasAttached {
					t.Errorf("a refused attach changed what lbv0 runs (attached before: %v)", wasAttached)
				}
				if _, err := os.Stat(pins); (err == nil) != (pinErr == nil) {
					t.Errorf("a refused attach changed the pins: %v (before: %v)", err, pinErr)
				}
				if _, err := os.Stat(filepath.Join(state, "meta.json")); pinErr != nil && err == nil {
					t.Errorf("a refused first attach wrote meta.json")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !attached() {
				t.Fatal("lbv0 runs no XDP program after Attach")
			}
		})
	}

	// What the maps cannot hold names the flag and the command.
	err := netns.Do(ns, func() error {
		tgt, err := xdp.Attach(ctx, opts(created, nil))
		if err != nil {
			return err
		}
		defer tgt.Close()
		held, err := tgt.Read(ctx)
		if err != nil {
			return err
		}
		_, err = tgt.Apply(ctx, compiler.DiffIR(held, ringIR(5, 13))) // 5 × 13 > 60: a ring holds one half at rest
		return err
	})
	want := fmt.Sprintf("the rings map of xdp lbv0 holds 60 entries, the size it was created with; to create it larger (the conntrack is lost with it, so established connections are re-selected): lbc detach --target xdp --iface lbv0 --pin-dir %s --state-dir %s, then push again with --ring-entries 65 or more", pins, state)
	var full *fallback.FullError
	if !errors.As(err, &full) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a push the rings cannot hold: %v\nwant it to contain %q", err, want)
	}

	// A target opened from the pins of another process holds no program:
	// when the pins are removed (and the program with the link), it loads
	// the program again on the maps it holds, whatever their sizes.
	err = netns.Do(ns, func() error {
		tgt, err := xdp.Attach(ctx, opts(fallback.Sizes{}, nil))
		if err != nil {
			return err
		}
		defer tgt.Close()
		if err := os.RemoveAll(pins); err != nil {
			return err
		}
		again, err := tgt.EnsureProgram(ctx)
		if err != nil || !again {
			return fmt.Errorf("EnsureProgram on maps of %+v: attached %v, %v", created, again, err)
		}
		if got := tgt.Datapath().Sizes(); got != created {
			return fmt.Errorf("after EnsureProgram: maps of %+v, want %+v", got, created)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !attached() {
		t.Fatal("lbv0 runs no XDP program after EnsureProgram")
	}
	if err := netns.Do(ns, func() error { return xdp.Detach(opts(created, nil), false) }); err != nil {
		t.Fatal(err)
	}
}
