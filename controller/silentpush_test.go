package controller_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	"google.golang.org/grpc/codes"
)

// TestSilentLossDuringPush (issue 25, items 2 and 4): the switch falls
// silent (no answer, no closed connection: a partition, a hung process)
// at the k-th update of a failover push, inside one of its Write RPCs: in
// its first batch, inside the new ring (written into the half packets do
// not look up), just before and just after the flip, inside the deletes of
// the half it left, and after the last update (the answer lost); the cut
// points are found in the push's own diff.
// The heartbeat's verdict ends the session, and the session's end cuts the
// Write in flight short: the push fails as cut short, /healthz is 503 and
// the VIPs are withdrawn within the heartbeat's bound, while the frozen
// connection is still open. The switch holds exactly k updates and never
// looks up a half-written ring half. When it answers again, the controller
// reads it back and writes exactly what is missing.
//
// Before, the Write waited until gRPC keepalive closed the connection
// (≈ 12 s), and the verdict with it: healthz said 200 meanwhile. The loss
// counts as lbc_errors_total{kind="connection"}, once; before issue 31
// item 2 it counted as kind push.
func TestSilentLossDuringPush(t *testing.T) {
	const ring, batch = 257, 10
	// The failover push's size (vm-a1 fails), to place k.
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	r, _ := healthyRigRing(t, embeddedSwitchOptions(srv.Addr()), ring)
	cfg := loadConfig(t, r.cfg)
	before := r.held(t)
	d := compiler.DiffIR(before, compileWith(t, cfg, before, "vm-a1"))
	total := len(d.Changes)
	r.stop()
	srv.Stop()
	if total < 4*batch {
		t.Fatalf("the failover push is %d updates; the cases need several batches of %d", total, batch)
	}
	ins, flip, del := changeAt(t, d, compiler.TableRing, compiler.Insert), changeAt(t, d, compiler.TableService, compiler.Modify), changeAt(t, d, compiler.TableRing, compiler.Delete)
	if !(0 < ins && ins < batch/2 && ins+batch < flip && flip < del && del+batch < total) {
		t.Fatalf("the failover push is not the backend row, the new ring, the flip, the old half's deletes:\n%s", d.Summary())
	}

	cases := []struct {
		name string
		k    int
	}{
		{"inside the first batch (the backend row written)", batch / 2},
		{"inside the new ring", (ins + flip) / 2},
		{"new ring written, before the flip", flip},
		{"flipped, the old half not deleted", flip + 1},
		{"inside the old half's deletes", (del + total) / 2},
		{"everything written, the answer lost", total},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("update %d of %d, %s", tc.k, total, tc.name), func(t *testing.T) {
			srv := p4rt.StartEmpty(t, "127.0.0.1:0")
			fz := startFreezer(t, srv.Addr())
			opts := embeddedSwitchOptions(fz.Addr())
			opts.BatchSize = batch
			r, f := healthyRigRing(t, opts, ring)
			before := r.held(t)
			want := compileWith(t, cfg, before, "vm-a1")
			if got := len(compiler.DiffIR(before, want).Changes); got != total {
				t.Fatalf("the failover push is %d updates here, %d in the first rig", got, total)
			}
			w := &ringWatch{allowed: [][]uint32{before.ActiveRing(before.ServiceByName("web")), want.ActiveRing(want.ServiceByName("web"))}}

			// The switch applies k updates, then falls silent inside that
			// Write RPC: its answer (and every later byte) is held.
			silent := make(chan time.Time, 1)
			n := 0
			srv.ResetLog()
			srv.StopAfter(tc.k, codes.Unavailable)
			srv.OnUpdate(func(v p4rt.View) {
				w.check(v)
				if n++; n == tc.k {
					fz.freeze()
					silent <- time.Now()
				}
			})
			f.Get(seedIPs["vm-a1"]).SetStatus(503)
			synced := make(chan error, 1)
			go func() { synced <- probeAndSync(r) }()

			var since time.Time
			select {
			case since = <-silent:
			case err := <-synced:
				t.Fatalf("the push ended (%v) before the switch fell silent\n%s", err, r.logs)
			case <-time.After(budgetTB(t)):
				t.Fatalf("the push never reached update %d\n%s", tc.k, r.logs)
			}
			r.ann.waitServing(t, false, r.logs)
			took := time.Since(since)
			code, body := healthz(r.c)
			if code != http.StatusServiceUnavailable {
				t.Fatalf("healthz once the VIPs are withdrawn: %d %q\n%s", code, body, r.logs)
			}
			// The push ended because the session did, not because the
			// connection closed (the freezer closes nothing; gRPC
			// keepalive would, after 12 s).
			select {
			case err := <-synced:
				if err == nil || !strings.Contains(err.Error(), "push cut short: the session with the switch ended") {
					t.Fatalf("the push in flight ended with %v, want it cut short by the session's end\n%s", err, r.logs)
				}
			case <-time.After(budgetTB(t)):
				t.Fatalf("the push in flight never ended\n%s", r.logs)
			}
			// A lost switch, counted once as such (docs/controller.md), not
			// as a push the switch refused (issue 31, item 2).
			metricsSay(t, r.m, `lbc_errors_total{kind="connection"} 1`, `lbc_errors_total{kind="push"} 0`)
			// An upper bound only, generous for a loaded machine: ten
			// times the heartbeat's (200 ms to the next check + 800 ms).
			bound := runtime.DefaultHeartbeat + runtime.DefaultHeartbeatTimeout
			t.Logf("silent at update %d → VIPs withdrawn, healthz %d in %v (heartbeat bound %v)", tc.k, code, took, bound)
			if took > 10*bound {
				t.Fatalf("the verdict took %v, over ten times the heartbeat's bound %v\n%s", took, bound, r.logs)
			}
			if err := w.err(); err != nil {
				t.Fatalf("%v\n%s", err, r.logs)
			}
			if got := len(srv.Log()); got != tc.k {
				t.Fatalf("the switch applied %d updates, want %d before it fell silent", got, tc.k)
			}

			// Back, with its tables: read back, and only what is missing
			// is written.
			srv.StopAfter(-1, codes.OK)
			srv.ResetLog()
			fz.thaw()
			r.ann.waitServing(t, true, r.logs)
			if err := w.err(); err != nil {
				t.Fatalf("after the switch came back: %v\n%s", err, r.logs)
			}
			converged(t, r, want)
			if d := compiler.DiffIR(want, r.held(t)); !d.Empty() {
				t.Fatalf("the switch does not hold the compiled state:\n%s", d.Summary())
			}
			if got, missing := len(srv.Log()), total-tc.k; got != missing {
				t.Fatalf("back: %d updates written, %d were missing\n%s", got, missing, r.logs)
			}
			if code, body := healthz(r.c); code != http.StatusOK {
				t.Fatalf("healthz after convergence: %d %q\n%s", code, body, r.logs)
			}
			srv.ResetLog()
			if err := r.c.Sync(r.ctx); err != nil || len(srv.Log()) != 0 {
				t.Fatalf("after convergence a sync wrote %d updates (%v)\n%s", len(srv.Log()), err, r.logs)
			}
		})
	}
}
