package controller_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/controller/internal/fakeclock"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// p4infoPath is p4c's P4Info for p4/lb.p4, or the test server's fixture
// while p4/build/ is absent.
func p4infoPath(t testing.TB) string {
	built := filepath.Join("..", "p4", "build", "lb.p4info.txtpb")
	if _, err := os.Stat(built); err == nil {
		return built
	}
	return filepath.Join("..", "testbench", "p4rt", "testdata", "lb-fixture.p4info.txtpb")
}

// startSwitch starts the in-process P4Runtime server (real gRPC on
// loopback, arbitration by election ID) with lb.p4's pipeline installed.
func startSwitch(t *testing.T) *p4rt.Server {
	t.Helper()
	s, err := runtime.LoadP4Info(p4infoPath(t))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := p4rt.New(p4rt.Options{DeviceID: 1, P4Info: s.Info})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func openSwitch(t *testing.T, srv *p4rt.Server, election uint64) *bmv2.Target {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget(t))
	defer cancel()
	tg, err := bmv2.OpenShared(ctx, bmv2.Options{Options: runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: election,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, Name: "switch"})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// switchController runs a controller on a fake clock over one P4Runtime
// target; probes run when the test asks.
type switchController struct {
	c      *controller.Controller
	tg     *bmv2.Target
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
}

func startSwitchController(t *testing.T, srv *p4rt.Server, election uint64, cfg string) *switchController {
	t.Helper()
	return startControllerOn(t, openSwitch(t, srv, election), cfg)
}

// startControllerOn is startSwitchController on a target already open.
func startControllerOn(t *testing.T, tg *bmv2.Target, cfg string) *switchController {
	t.Helper()
	sc := &switchController{tg: tg, done: make(chan error, 1), logs: &syncBuffer{}}
	c, err := controller.New(controller.Options{
		ConfigPath: cfg, Targets: []targets.Target{sc.tg},
		Logger: slog.New(slog.NewTextHandler(sc.logs, nil)),
		Clock:  fakeclock.New(time.Unix(1_800_000_000, 0)), Debounce: time.Hour, WatchInterval: -1, VerifyInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	sc.c = c
	sc.ctx, sc.cancel = context.WithCancel(context.Background())
	go func() { sc.done <- c.Run(sc.ctx) }()
	select {
	case <-c.Ready():
	case err := <-sc.done:
		t.Fatalf("controller: %v\n%s", err, sc.logs)
	case <-time.After(waitBudget(t)):
		t.Fatalf("controller not ready\n%s", sc.logs)
	}
	t.Cleanup(sc.stop)
	return sc
}

// stop ends the controller and drops its P4Runtime session, as a crash or
// SIGTERM does; the switch keeps its tables.
func (sc *switchController) stop() {
	if sc.cancel == nil {
		return
	}
	sc.cancel()
	<-sc.done
	sc.tg.Close()
	sc.cancel = nil
}

func (sc *switchController) probeAndSync(t *testing.T) {
	t.Helper()
	sc.c.Monitor().ProbeAll(sc.ctx)
	if err := sc.c.Sync(sc.ctx); err != nil {
		t.Fatalf("sync: %v\n%s", err, sc.logs.String())
	}
}

func readSwitch(t *testing.T, tg *bmv2.Target) *compiler.IR {
	t.Helper()
	ir, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ir
}

// Restart against a real P4Runtime server: the second controller reads
// the switch back and writes nothing.
func TestRestartWritesNothingP4Runtime(t *testing.T) {
	f := backendtest.Start(t, allSeedIPs()...)
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(patientProbes(seedConfig(f.Port, true, 30, 1, 1))), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startSwitch(t)
	a := startSwitchController(t, srv, 1, cfg)
	f.Get(seedIPs["vm-a1"]).SetStatus(503)
	f.Get(seedIPs["vm-d1"]).SetStatus(503)
	f.Get(seedIPs["vm-a2"]).SetStatus(503) // failover: epoch 1
	a.probeAndSync(t)
	if svc := readSwitch(t, a.tg).ServiceByName("web"); svc == nil || svc.Epoch != 1 {
		t.Fatalf("switch holds %+v; want web at epoch 1", svc)
	}
	a.stop()
	rpcs, updates := srv.WriteRPCs(), len(srv.Log())

	b := startSwitchController(t, srv, 1, cfg)
	// The same election ID: a's Close returned once the server had dropped
	// a's stream, so b is primary from the start.
	if !b.tg.Primary() {
		t.Fatalf("the restarted controller is not primary\n%s", b.logs)
	}
	b.probeAndSync(t) // nothing changed: still nothing to write
	if r, u := srv.WriteRPCs(), len(srv.Log()); r != rpcs || u != updates {
		t.Fatalf("restart wrote %d updates in %d RPCs, want 0\n%s", u-updates, r-rpcs, b.logs)
	}
	// And it carries on from what it read: recovery is a failback, with
	// the epoch moving from the switch's 1 to 2 (R-EPOCH).
	f.Get(seedIPs["vm-a2"]).SetStatus(200)
	b.probeAndSync(t)
	if svc := readSwitch(t, b.tg).ServiceByName("web"); svc.Epoch != 2 || svc.Decision == "failover" {
		t.Fatalf("after failback the switch holds %+v", svc)
	}
}

// TestRestartDeletesAStaleSecondHalfOnce: a switch programmed by an lbc
// from before issue 35 holds both halves of every ring at rest. A
// controller started on it changes nothing packets see: it deletes the
// half the row does not point at, once, and writes nothing else; the next
// restart writes nothing at all.
func TestRestartDeletesAStaleSecondHalfOnce(t *testing.T) {
	for _, stale := range []string{"the same ring", "the ring before"} {
		t.Run(stale, func(t *testing.T) {
			f := backendtest.Start(t, allSeedIPs()...)
			cfg := filepath.Join(t.TempDir(), "lb.yaml")
			if err := os.WriteFile(cfg, []byte(strings.Replace(patientProbes(seedConfig(f.Port, true, 0, 1, 1)), "ringSize: 1021", "ringSize: 257", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			srv := startSwitch(t)
			a := startSwitchController(t, srv, 1, cfg)
			a.stop()
			// What the older lbc left: the other half filled too.
			old := openSwitch(t, srv, 1)
			held := readSwitch(t, old)
			svc := held.ServiceByName("web")
			ring := held.ActiveRing(svc)
			if stale == "the ring before" {
				prev := compileWith(t, loadConfig(t, cfg), held, "vm-a1")
				ring = prev.ActiveRing(prev.ServiceByName("web"))
			}
			var d compiler.Diff
			for slot, b := range ring {
				d.Changes = append(d.Changes, compiler.Change{Table: compiler.TableRing, Op: compiler.Insert,
					Ring: &compiler.RingEntry{ServiceID: svc.ID, Half: 1 - svc.ActiveHalf, Slot: uint32(slot), BackendID: b}})
			}
			if _, err := old.Apply(context.Background(), d); err != nil {
				t.Fatal(err)
			}
			before := readSwitch(t, old)
			old.Close()
			if n := len(before.Ring(svc.ID).Halves[1-svc.ActiveHalf]); n != len(ring) {
				t.Fatalf("the switch holds %d slots in the half web does not look up, want the %d written", n, len(ring))
			}
			srv.ResetLog()

			b := startSwitchController(t, srv, 1, cfg)
			b.probeAndSync(t) // nothing changed: nothing more to write
			after := readSwitch(t, b.tg)
			if controller.Digest(after) != controller.Digest(before) {
				t.Fatalf("the restart changed what packets see\n%s", b.logs)
			}
			oneHalfAtRest(t, after, b.logs)
			for i, e := range srv.Log() {
				if e.Table == "tunnel_source" || e.Table == "egress_mtu" {
					continue
				}
				if e.Type != p4v1.Update_DELETE || !strings.Contains(e.Table, "ring") {
					t.Fatalf("update %d of the restart is a %s of %s; want only deletes of the stale half\n%s", i+1, e.Type, e.Table, b.logs)
				}
			}
			if n := len(srv.Log()); n != len(ring) {
				t.Fatalf("the restart wrote %d updates, want the %d deletes of the stale half\n%s", n, len(ring), b.logs)
			}
			b.stop()

			srv.ResetLog()
			c := startSwitchController(t, srv, 1, cfg)
			c.probeAndSync(t)
			if n := len(srv.Log()); n != 0 {
				t.Fatalf("the next restart wrote %d updates, want 0\n%s", n, c.logs)
			}
		})
	}
}

// Two controllers for one switch: the higher election ID writes, the
// other only computes; when the primary dies, the backup takes over and
// writes only what changed meanwhile.
func TestHAStandbyTakesOverWritingOnlyTheDifference(t *testing.T) {
	f := backendtest.Start(t, allSeedIPs()...)
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(patientProbes(seedConfig(f.Port, false, 0, 1, 1))), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startSwitch(t)
	primary := startSwitchController(t, srv, 2, cfg)
	backup := startSwitchController(t, srv, 1, cfg)
	if !primary.tg.Primary() || backup.tg.Primary() {
		t.Fatalf("primary %v, backup %v", primary.tg.Primary(), backup.tg.Primary())
	}
	if st := backup.c.Status(backup.ctx); st.Targets[0].Primary || st.Targets[0].Pushes != 0 {
		t.Fatalf("backup status %+v", st.Targets[0])
	}

	// vm-a1 fails: both see it, only the primary writes.
	f.Get(seedIPs["vm-a1"]).SetStatus(503)
	rpcs := srv.WriteRPCs()
	primary.probeAndSync(t)
	backup.probeAndSync(t)
	if srv.WriteRPCs() == rpcs {
		t.Fatal("the primary wrote nothing")
	}
	if st := backup.c.Status(backup.ctx); st.Targets[0].Pushes != 0 {
		t.Fatalf("the backup pushed %d times", st.Targets[0].Pushes)
	}
	before := readSwitch(t, backup.tg)

	// The primary dies. The backup is elected; with nothing changed, its
	// take-over writes nothing.
	primary.stop()
	waitFor(t, backup.tg.Primary)
	updates := len(srv.Log())
	waitFor(t, func() bool { return backup.c.Status(backup.ctx).Targets[0].Primary })
	if err := backup.c.Sync(backup.ctx); err != nil {
		t.Fatal(err)
	}
	if u := len(srv.Log()); u != updates {
		t.Fatalf("take-over with nothing changed wrote %d updates", u-updates)
	}

	// vm-d1 fails while the new primary serves: it writes exactly that diff.
	f.Get(seedIPs["vm-d1"]).SetStatus(503)
	backup.probeAndSync(t)
	after := readSwitch(t, backup.tg)
	want := len(compiler.DiffIR(before, after).Changes)
	if got := len(srv.Log()) - updates; got != want || want == 0 {
		t.Fatalf("the new primary wrote %d updates; the difference is %d", got, want)
	}
	if svc := after.ServiceByName("web"); join(svc.Eligible) != "{vm-a2,vm-d2}" {
		t.Fatalf("switch eligible %s", join(svc.Eligible))
	}
}
