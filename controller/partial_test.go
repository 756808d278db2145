package controller_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	"google.golang.org/grpc/codes"
)

// Issue 25, items 4 and 5: a push that stops part-way, because the switch
// failed one update of a batch or because the controller was killed, never
// makes a half-written ring half active, and the next push (or the next
// controller) finishes the job writing only what is missing.

// ringWatch checks after every update the switch applies that each
// service's active half holds one of the complete rings allowed.
type ringWatch struct {
	allowed   [][]uint32
	violation error
	updates   int
}

func (w *ringWatch) check(v p4rt.View) {
	w.updates++
	if w.violation != nil {
		return
	}
	tr, err := bmv2.NewTranslator(v.Schema())
	if err != nil {
		w.violation = err
		return
	}
	tabs := bmv2.Tables{}
	for _, n := range []string{"vip_port", "vip_proto", "vip_addr", "service", "ring", "backend"} {
		tabs[n] = v.Entries(n)
	}
	ir, err := tr.IR(tabs, nil)
	if err != nil {
		w.violation = err
		return
	}
	for i := range ir.Services {
		s := &ir.Services[i]
		have := ir.ActiveRing(s)
		if !slices.ContainsFunc(w.allowed, func(r []uint32) bool { return slices.Equal(r, have) }) {
			w.violation = fmt.Errorf("after update %d service %q looks up half %d, which holds no complete ring the controller compiled", w.updates, s.Name, s.ActiveHalf)
			return
		}
	}
}

// loadConfig reads the rig's lb.yaml as the controller does.
func loadConfig(t *testing.T, path string) *compiler.Config {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := compiler.Load(path, raw)
	if err != nil {
		t.Fatal(err)
	}
	return dec.Config
}

func compileWith(t *testing.T, cfg *compiler.Config, prev *compiler.IR, down ...string) *compiler.IR {
	t.Helper()
	st := compiler.State{}
	for _, n := range down {
		st.SetHealthy(n, false)
	}
	res, err := compiler.Compile(compiler.Input{Config: cfg, State: st, Prev: prev})
	if err != nil {
		t.Fatal(err)
	}
	return res.IR
}

// boundaries returns, for a diff, the 1-based position of the first, a
// middle and the last update of each run of one table and operation.
func boundaries(d compiler.Diff) []int {
	var out []int
	start := 0
	for i := range d.Changes {
		if i == len(d.Changes)-1 || d.Changes[i+1].Table != d.Changes[i].Table || d.Changes[i+1].Op != d.Changes[i].Op {
			for _, n := range []int{start + 1, (start+i)/2 + 1, i + 1} {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
			start = i + 1
		}
	}
	return out
}

func probeAndSync(r *switchRig) error {
	r.c.Monitor().ProbeAll(r.ctx)
	return r.c.Sync(r.ctx)
}

// TestPartialPushThenRetryOrNewChange (item 4, in the controller): vm-a1
// fails; the switch fails update n of that push (a backend row, ring
// slots of the inactive half, the flip). Then either the retry runs with
// nothing changed, and writes exactly what is missing, or vm-d1 fails too
// before it, and the push of that newer ring must not write it into the
// half the switch still serves (the controller believed the failed flip
// had happened). Either way the switch ends holding what was compiled.
func TestPartialPushThenRetryOrNewChange(t *testing.T) {
	// The failover push's diff, to choose the updates to fail.
	srv := emptySwitch(t, "127.0.0.1:0")
	r, _ := healthyRigRing(t, embeddedSwitchOptions(srv.Addr()), 257)
	cfg := loadConfig(t, r.cfg)
	before := r.held(t)
	d1 := compiler.DiffIR(before, compileWith(t, cfg, before, "vm-a1"))
	r.stop()
	srv.Stop()

	for _, n := range boundaries(d1) {
		c := d1.Changes[n-1]
		for _, then := range []string{"retry", "vm-d1 fails before the retry"} {
			t.Run(fmt.Sprintf("update %d of %d (%s %s), %s", n, len(d1.Changes), c.Op, c.Table, then), func(t *testing.T) {
				srv := emptySwitch(t, "127.0.0.1:0")
				r, f := healthyRigRing(t, embeddedSwitchOptions(srv.Addr()), 257)
				before := r.held(t)
				ir1 := compileWith(t, cfg, before, "vm-a1")
				ir2 := compileWith(t, cfg, before, "vm-a1", "vm-d1")
				// A later change, pushed from where each path left.
				ir3 := map[bool]*compiler.IR{true: compileWith(t, cfg, before, "vm-a1", "vm-d2"), false: compileWith(t, cfg, before, "vm-a1", "vm-d1", "vm-d2")}
				w := &ringWatch{}
				for _, ir := range []*compiler.IR{before, ir1, ir2, ir3[true], ir3[false]} {
					w.allowed = append(w.allowed, ir.ActiveRing(ir.ServiceByName("web")))
				}
				srv.OnUpdate(w.check)
				srv.FailUpdate(n, codes.Internal)
				srv.ResetLog()

				f.Get(seedIPs["vm-a1"]).SetStatus(503)
				err := probeAndSync(r)
				if err == nil || !strings.Contains(err.Error(), "INTERNAL: injected failure") || !strings.Contains(err.Error(), c.Op.String()+" "+c.Table) {
					t.Fatalf("push error %v, want the injected failure of update %d (%s %s)\n%s", err, n, c.Op, c.Table, r.logs)
				}
				if w.violation != nil {
					t.Fatalf("%v\n%s", w.violation, r.logs)
				}
				applied := len(srv.Log())
				srv.ResetLog()
				want := ir1
				if then == "retry" {
					if err := r.c.Sync(r.ctx); err != nil {
						t.Fatalf("retry: %v\n%s", err, r.logs)
					}
					if got, missing := len(srv.Log()), len(d1.Changes)-applied; got != missing {
						t.Fatalf("the retry wrote %d updates, %d were missing\n%s", got, missing, r.logs)
					}
				} else {
					want = ir2
					f.Get(seedIPs["vm-d1"]).SetStatus(503)
					if err := probeAndSync(r); err != nil {
						t.Fatalf("push of the newer change: %v\n%s", err, r.logs)
					}
				}
				if w.violation != nil {
					t.Fatalf("%v\n%s", w.violation, r.logs)
				}
				converged(t, r, want)
				// The next change is pushed from there as hitlessly.
				f.Get(seedIPs["vm-d2"]).SetStatus(503)
				if err := probeAndSync(r); err != nil {
					t.Fatalf("push of a later change: %v\n%s", err, r.logs)
				}
				if w.violation != nil {
					t.Fatalf("later change: %v\n%s", w.violation, r.logs)
				}
				converged(t, r, ir3[then == "retry"])
				// Converged: nothing more to write, nothing drifted.
				srv.ResetLog()
				if err := r.c.Verify(r.ctx); err != nil {
					t.Fatal(err)
				}
				if err := r.c.Sync(r.ctx); err != nil || len(srv.Log()) != 0 {
					t.Fatalf("after convergence a sync wrote %d updates (%v)\n%s", len(srv.Log()), err, r.logs)
				}
			})
		}
	}
}

// converged checks that the switch serves web's ring of want and that the
// controller's view of the switch is what it holds.
func converged(t *testing.T, r *switchRig, want *compiler.IR) {
	t.Helper()
	held := r.held(t)
	if have := held.ActiveRing(held.ServiceByName("web")); !slices.Equal(have, want.ActiveRing(want.ServiceByName("web"))) {
		t.Fatalf("the switch serves another ring than the one compiled\n%s", r.logs)
	}
	if st := r.c.Status(r.ctx).Targets[0]; st.Digest != controller.Digest(held) || st.LastError != "" {
		t.Fatalf("controller believes digest %s (error %q), the switch holds %s\n%s", st.Digest, st.LastError, controller.Digest(held), r.logs)
	}
}
