package xdp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/internal/netns"
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
	set := needNetns(t)
	ns, err := set.Add("attach")
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
