package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/controller/internal/fakeclock"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	"github.com/lbc-dev/lbc/testbench/p4rt/readback"
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
	mu        sync.Mutex // the server's goroutines check, the test reads
	violation error
	updates   int
}

// err returns the first violation seen.
func (w *ringWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.violation
}

func (w *ringWatch) check(v p4rt.View) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.updates++
	if w.violation != nil {
		return
	}
	ir, err := readback.IR(v)
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
// slots of the half packets do not look up, the flip, the deletes of the
// half it left: the first, a middle and the last update of each). Then
// either the retry runs with nothing changed, and writes exactly what is
// missing (a push that failed after its flip has its old half deleted),
// or vm-d1 fails too before it, and the push of that newer ring must not
// write it into the half the switch still serves (the controller believed
// the failed flip had happened). Either way the switch ends holding what
// was compiled, with one half of the ring at rest.
func TestPartialPushThenRetryOrNewChange(t *testing.T) {
	// The failover push's diff, to choose the updates to fail.
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
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
				srv := p4rt.StartEmpty(t, "127.0.0.1:0")
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
				if err := w.err(); err != nil {
					t.Fatalf("%v\n%s", err, r.logs)
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
				if err := w.err(); err != nil {
					t.Fatalf("%v\n%s", err, r.logs)
				}
				converged(t, r, want)
				// The next change is pushed from there as hitlessly.
				f.Get(seedIPs["vm-d2"]).SetStatus(503)
				if err := probeAndSync(r); err != nil {
					t.Fatalf("push of a later change: %v\n%s", err, r.logs)
				}
				if err := w.err(); err != nil {
					t.Fatalf("later change: %v\n%s", err, r.logs)
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

// converged checks that the switch serves web's ring of want, holds one
// half of every ring at rest (a push cut after its flip has had the old
// half deleted since), and that the controller's view of the switch is
// what it holds.
func converged(t *testing.T, r *switchRig, want *compiler.IR) {
	t.Helper()
	held := r.held(t)
	oneHalfAtRest(t, held, r.logs)
	if have := held.ActiveRing(held.ServiceByName("web")); !slices.Equal(have, want.ActiveRing(want.ServiceByName("web"))) {
		t.Fatalf("the switch serves another ring than the one compiled\n%s", r.logs)
	}
	if st := r.c.Status(r.ctx).Targets[0]; st.Digest != controller.Digest(held) || st.LastError != "" {
		t.Fatalf("controller believes digest %s (error %q), the switch holds %s\n%s", st.Digest, st.LastError, controller.Digest(held), r.logs)
	}
}

// killedController runs a controller over srv and kills it (cancels its
// context) at the k-th update the switch applies after arm is called; the
// switch refuses every later update (StopAfter), so it holds exactly k of
// them whatever was in flight — what a controller killed there leaves,
// cut at any update, not only between batches. wait returns once Run has
// returned and the connection is closed.
type killedController struct {
	c      *controller.Controller
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
	tg     *bmv2.Target
	logs   *syncBuffer
}

// runController starts a controller over srv; first runs before it does
// (to arm a kill during its first push: after Run started, the push could
// be over before the kill is armed).
func runController(t *testing.T, srv *p4rt.Server, cfgPath string, first func(*killedController)) *killedController {
	t.Helper()
	kc := &killedController{done: make(chan error, 1), logs: &syncBuffer{}}
	kc.ctx, kc.cancel = context.WithCancel(context.Background())
	octx, ocancel := context.WithTimeout(kc.ctx, waitBudget(t))
	defer ocancel()
	tg, err := bmv2.OpenShared(octx, embeddedSwitchOptions(srv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	kc.tg = tg
	kc.c, err = controller.New(controller.Options{
		ConfigPath: cfgPath, Targets: []targets.Target{tg},
		Logger: slog.New(slog.NewTextHandler(kc.logs, nil)),
		Clock:  fakeclock.New(time.Unix(1_800_000_000, 0)), Debounce: time.Hour, WatchInterval: -1, VerifyInterval: -1,
		RetryInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if first != nil {
		first(kc)
	}
	go func() { kc.done <- kc.c.Run(kc.ctx) }()
	t.Cleanup(kc.wait)
	return kc
}

// arm kills the controller at the k-th update from now, checking w's
// invariant after each.
func (kc *killedController) arm(srv *p4rt.Server, w *ringWatch, k int) {
	n := 0
	srv.ResetLog()
	srv.StopAfter(k, codes.Unavailable)
	srv.OnUpdate(func(v p4rt.View) {
		w.check(v)
		if n++; n == k {
			kc.cancel()
		}
	})
}

func (kc *killedController) wait() {
	if kc.tg == nil {
		return
	}
	kc.cancel()
	<-kc.done
	kc.tg.Close()
	kc.tg = nil
}

// TestControllerKilledMidPush (issue 25, item 5): the controller is killed
// after its k-th update: in a first push inside the ring, with the ring
// written and no service row, and with the row and no VIP; in a failover
// push after the backend row, inside the new ring (written into the half
// packets do not look up), just before the flip, just after it (the old
// half not yet deleted), inside the old half's deletes and before the last
// one. The switch keeps serving a complete ring (the old one, or nothing
// for a service whose row was not written; the new one once flipped), and
// a new controller started on it finishes the job: it converges to the
// compiled state with one half at rest, never makes a half-written half
// active, and writes only what is missing. The cut points are found in the
// push's own diff, and a case whose cut lies beyond the push fails at once
// instead of waiting for a kill that never comes.
func TestControllerKilledMidPush(t *testing.T) {
	const ring = 257
	cases := []struct {
		name   string
		during string // "first push" or "failover"
		cut    func(t *testing.T, d compiler.Diff) int
	}{
		{"inside the ring", "first push", func(t *testing.T, d compiler.Diff) int {
			first := changeAt(t, d, compiler.TableRing, compiler.Insert)
			return first + (changeAt(t, d, compiler.TableService, compiler.Insert)-first)/2
		}},
		{"ring written, no service row", "first push", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableService, compiler.Insert)
		}},
		{"service row written, no VIP", "first push", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableService, compiler.Insert) + 1
		}},
		{"after the backend row", "failover", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableRing, compiler.Insert)
		}},
		{"inside the new ring", "failover", func(t *testing.T, d compiler.Diff) int {
			first := changeAt(t, d, compiler.TableRing, compiler.Insert)
			return first + (changeAt(t, d, compiler.TableService, compiler.Modify)-first)/2
		}},
		{"new ring written, before the flip", "failover", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableService, compiler.Modify)
		}},
		{"flipped, the old half not deleted", "failover", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableService, compiler.Modify) + 1
		}},
		{"inside the old half's deletes", "failover", func(t *testing.T, d compiler.Diff) int {
			first := changeAt(t, d, compiler.TableRing, compiler.Delete)
			return first + (len(d.Changes)-first)/2
		}},
		{"one delete left", "failover", func(t *testing.T, d compiler.Diff) int {
			return len(d.Changes) - 1
		}},
	}
	for _, tc := range cases {
		t.Run(tc.during+", "+tc.name, func(t *testing.T) {
			f := backendtest.Start(t, allSeedIPs()...)
			cfgPath := filepath.Join(t.TempDir(), "lb.yaml")
			if err := os.WriteFile(cfgPath, []byte(strings.Replace(patientProbes(seedConfig(f.Port, true, 0, 1, 1)), "ringSize: 1021", fmt.Sprintf("ringSize: %d", ring), 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := loadConfig(t, cfgPath)
			srv := p4rt.StartEmpty(t, "127.0.0.1:0")
			w := &ringWatch{}
			var before, want *compiler.IR
			var d compiler.Diff // the push the kill cuts
			var total, k int
			var kc *killedController
			// cut places the kill in the push's diff: after its k-th
			// update, with at least one update left (a kill at the last
			// update may land after the push has ended).
			cut := func(push compiler.Diff) {
				t.Helper()
				d = push
				total, k = len(d.Changes), tc.cut(t, d)
				if k < 1 || k >= total {
					t.Fatalf("the cut after update %d is not inside the push of %d updates:\n%s", k, total, d.Summary())
				}
				t.Logf("killed after update %d of %d (%s)", k, total, d.Changes[k-1])
			}
			if tc.during == "first push" {
				want = compileWith(t, cfg, nil)
				cut(compiler.DiffIR(nil, want))
				w.allowed = [][]uint32{want.ActiveRing(want.ServiceByName("web"))}
				kc = runController(t, srv, cfgPath, func(kc *killedController) { kc.arm(srv, w, k) })
				select {
				case err := <-kc.done:
					if err == nil {
						t.Fatalf("the killed controller's first push returned no error\n%s", kc.logs)
					}
				case <-kc.c.Ready():
					// Ready closes only when the first push worked: the kill
					// never cut it.
					t.Fatalf("the first push ended after %d updates without the kill at update %d\n%s", len(srv.Log()), k, kc.logs)
				case <-time.After(waitBudget(t)):
					t.Fatalf("the controller was not killed during its first push\n%s", kc.logs)
				}
				kc.done <- nil
				kc.wait()
			} else {
				kc = runController(t, srv, cfgPath, nil)
				select {
				case <-kc.c.Ready():
				case err := <-kc.done:
					t.Fatalf("controller: %v\n%s", err, kc.logs)
				}
				before = readSwitch(t, kc.tg)
				oneHalfAtRest(t, before, kc.logs)
				want = compileWith(t, cfg, before, "vm-a1")
				cut(compiler.DiffIR(before, want))
				w.allowed = [][]uint32{before.ActiveRing(before.ServiceByName("web")), want.ActiveRing(want.ServiceByName("web"))}
				kc.arm(srv, w, k)
				f.Get(seedIPs["vm-a1"]).SetStatus(503)
				kc.c.Monitor().ProbeAll(kc.ctx)
				if err := kc.c.Sync(kc.ctx); err == nil {
					t.Fatalf("the killed controller's push returned no error\n%s", kc.logs)
				}
				kc.wait()
			}
			if err := w.err(); err != nil {
				t.Fatalf("%v\n%s", err, kc.logs)
			}
			if got := len(srv.Log()); got != k {
				t.Fatalf("the switch applied %d updates, want the kill after %d", got, k)
			}
			// The switch keeps serving the old ring until the flip, the new
			// one after it; on a first push, a service whose row was
			// written serves its complete ring.
			serving := want
			if before != nil && k <= changeAt(t, d, compiler.TableService, compiler.Modify) {
				serving = before
			}
			srv.Snapshot(func(v p4rt.View) {
				for id, have := range activeRingsOf(t, v) {
					if s := serving.Service(id); s == nil || !slices.Equal(have, serving.ActiveRing(s)) {
						t.Fatalf("after the kill service %d serves another ring than the complete one it served", id)
					}
				}
			})

			// A new controller on the same switch finishes the job.
			srv.StopAfter(-1, codes.OK)
			srv.OnUpdate(w.check)
			srv.ResetLog()
			r := startSwitchRig(t, embeddedSwitchOptions(srv.Addr()), string(mustRead(t, cfgPath)))
			if err := w.err(); err != nil {
				t.Fatalf("new controller: %v\n%s", err, r.logs)
			}
			converged(t, r, want)
			writes := 0
			for _, e := range srv.Log() {
				if e.Table != "tunnel_source" && e.Table != "egress_mtu" {
					writes++
				}
			}
			// A controller that finds no service row compiles from scratch,
			// so the killed first push's IDs come out again and the rows it
			// wrote are kept.
			if d := compiler.DiffIR(want, r.held(t)); !d.Empty() {
				t.Fatalf("the switch does not hold the compiled state:\n%s", d.Summary())
			}
			if missing := total - k; writes != missing {
				t.Fatalf("the new controller wrote %d updates, %d were missing\n%s", writes, missing, r.logs)
			}
			srv.ResetLog()
			if err := r.c.Sync(r.ctx); err != nil || len(srv.Log()) != 0 {
				t.Fatalf("after convergence a sync wrote %d updates (%v)\n%s", len(srv.Log()), err, r.logs)
			}
		})
	}
}

// changeAt is the index in d of its first change of table by op: the
// number of updates a switch has applied just before it.
func changeAt(t *testing.T, d compiler.Diff, table string, op compiler.Op) int {
	t.Helper()
	i := slices.IndexFunc(d.Changes, func(c compiler.Change) bool { return c.Table == table && c.Op == op })
	if i < 0 {
		t.Fatalf("the push has no %s of %s:\n%s", op, table, d.Summary())
	}
	return i
}

func activeRingsOf(t *testing.T, v p4rt.View) map[uint32][]uint32 {
	t.Helper()
	ir := irOfView(t, v)
	out := map[uint32][]uint32{}
	for i := range ir.Services {
		out[ir.Services[i].ID] = slices.Clone(ir.ActiveRing(&ir.Services[i]))
	}
	return out
}

// irOfView is what the server holds, read as the target reads it back.
func irOfView(t *testing.T, v p4rt.View) *compiler.IR {
	t.Helper()
	ir, err := readback.IR(v)
	if err != nil {
		t.Fatal(err)
	}
	return ir
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
