package controller_test

import (
	"context"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
)

// Scale-out behind ECMP: one controller programs several datapaths with
// the same IR, so after every change they hold identical tables and a
// flow rehashed to another node picks the same backend (R-MAGLEV-3,
// R-HASH).
func TestScaleOutIdenticalDigestsAfterEveryChange(t *testing.T) {
	a, b := newLockedSim("node-a"), newLockedSim("node-b")
	// node-b already holds something else (a stale earlier push): the
	// controller must bring it to the same tables as node-a.
	stale := compiler.Diff{Changes: []compiler.Change{{Table: compiler.TableBackend, Op: compiler.Insert, Backend: &compiler.BackendRow{ID: 77, ServiceID: 9, Name: "old"}}}}
	if _, err := b.d.Apply(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	r := startRig(t, rigOptions{sims: []*lockedSim{a, b}, config: func(port int) string { return seedConfig(port, true, 0, 1, 1) }})
	check := func(step string) {
		t.Helper()
		ia, _ := a.Read(context.Background())
		ib, _ := b.Read(context.Background())
		da, db := controller.Digest(ia), controller.Digest(ib)
		if da != db {
			t.Fatalf("%s: node-a digest %s, node-b %s", step, da, db)
		}
		st := r.c.Status(r.ctx)
		if !st.DigestsAgree || st.Targets[0].Digest != da || st.Targets[1].Digest != da {
			t.Fatalf("%s: status %+v; want both at %s", step, st.Targets, da)
		}
	}
	check("start")
	for _, step := range []struct {
		name string
		ok   bool
	}{{"vm-a1", false}, {"vm-d1", false}, {"vm-a2", false}, {"vm-a2", true}, {"vm-a1", true}, {"vm-d1", true}} {
		r.setHealthy(step.name, step.ok)
		r.probe(1)
		check(step.name)
	}
}

// A target whose tables drifted from what was pushed (someone wrote to it
// behind the controller's back) is flagged and repaired on verify.
func TestScaleOutDriftRepaired(t *testing.T) {
	a, b := newLockedSim("node-a"), newLockedSim("node-b")
	r := startRig(t, rigOptions{sims: []*lockedSim{a, b}, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }})
	want := controller.Digest(a.IR())
	// Point one slot of node-b's active ring at another backend.
	ir := b.IR()
	svc := &ir.Services[0]
	slot := ir.ActiveRing(svc)[0]
	other := ir.Backends[0].ID
	if other == slot {
		other = ir.Backends[1].ID
	}
	tamper := compiler.Diff{Changes: []compiler.Change{{Table: compiler.TableRing, Op: compiler.Modify, Ring: &compiler.RingEntry{ServiceID: svc.ID, Half: svc.ActiveHalf, Slot: 0, BackendID: other}}}}
	b.mu.Lock()
	b.d.Apply(context.Background(), tamper)
	b.mu.Unlock()
	if controller.Digest(b.IR()) == want {
		t.Fatal("tampering did not change the digest")
	}
	applies, writes := b.counts()
	if err := r.c.Verify(r.ctx); err != nil {
		t.Fatal(err)
	}
	if got := controller.Digest(b.IR()); got != want {
		t.Fatalf("node-b not repaired: %s, want %s", got, want)
	}
	if a2, w2 := b.counts(); a2 != applies+1 || w2 != writes+1 {
		t.Fatalf("repair took %d pushes / %d writes, want 1 / 1", a2-applies, w2-writes)
	}
	if st := r.c.Status(r.ctx); !st.DigestsAgree {
		t.Fatalf("status after repair: %+v", st.Targets)
	}
}
