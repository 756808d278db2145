package controller_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// Restart against the XDP maps: a controller programs pinned BPF maps,
// stops; a new process-like handle reopens the pins and meta.json, and a
// new controller writes nothing (IDs, epochs and names come back from
// the maps and meta.json).
func TestRestartWritesNothingXDP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("needs root to load BPF maps (uid %d); the same behaviour is covered on sim by TestRestartWritesNothingSim", os.Geteuid())
	}
	if _, err := os.Stat(filepath.Join(xdp.BPFFS, "maps.debug")); err != nil {
		if _, err := os.Stat(xdp.BPFFS); err != nil {
			t.Skipf("no bpffs at %s: %v; covered on sim by TestRestartWritesNothingSim", xdp.BPFFS, err)
		}
	}
	pin, err := os.MkdirTemp(xdp.BPFFS, "lbc-ctl-test-")
	if err != nil {
		t.Skipf("cannot create a pin directory on bpffs (%v); covered on sim by TestRestartWritesNothingSim", err)
	}
	t.Cleanup(func() { os.RemoveAll(pin) })
	dp, err := fallback.Load(fallback.LoadOptions{PinDir: pin, ConntrackEntries: 1024, RingEntries: 1 << 14})
	if err != nil {
		t.Skipf("cannot load the XDP program's maps (%v); covered on sim by TestRestartWritesNothingSim", err)
	}
	dp.Close() // the pins keep the maps

	opts := xdp.Options{Iface: "lbc-test", PinDir: pin, StateDir: t.TempDir()}
	open := func() *xdp.Target {
		tg, err := xdp.Open(opts)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	f := backendtest.Start(t, allSeedIPs()...)
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(patientProbes(seedConfig(f.Port, true, 30, 1, 1))), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() (*rig, *recordingTarget) {
		rt := &recordingTarget{Target: open()}
		r := startRigTargets(t, cfg, f, rt)
		return r, rt
	}
	r1, rt1 := run()
	if rt1.writes == 0 {
		t.Fatal("the first controller wrote nothing to empty maps")
	}
	// Fail over (epoch 1, disableConnectionDrainOnFailover), so that the
	// restart has state beyond the configuration to read back.
	r1.setHealthy("vm-a1", false)
	r1.setHealthy("vm-d1", false)
	r1.setHealthy("vm-a2", false)
	r1.probe(1)
	r1.stop()
	held := rt1.Target.(*xdp.Target)
	ir1, err := held.Read(r1.ctx)
	if err != nil {
		t.Fatal(err)
	}
	held.Close()

	r2, rt2 := run()
	if rt2.writes != 0 {
		t.Fatalf("restart wrote %d entities to the XDP maps, want 0", rt2.writes)
	}
	ir2, err := rt2.Target.Read(r2.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if controller.Digest(ir1) != controller.Digest(ir2) {
		t.Fatal("restart changed the maps")
	}
	if svc := ir2.ServiceByName("web"); svc == nil || svc.Epoch != 1 {
		t.Fatalf("maps hold %+v; want web at epoch 1", svc)
	}
	r2.stop()
	rt2.Target.Close()
}
