package controller_test

import (
	"context"
	"slices"
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
// behind the controller's back) is flagged and repaired on verify, in one
// push that writes no more than the repair takes: one slot of the ring
// packets look up is written in place (one write, as atomic as a flip);
// more are a new ring in the half packets do not look up, the flip, and
// the deletes of the drifted half (its other half is empty at rest).
func TestScaleOutDriftRepaired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slots []int // of node-b's active ring
		del   bool  // deleted; otherwise pointed at another backend
	}{
		{"one slot", []int{0}, false},
		{"one slot deleted", []int{5}, true},
		{"two slots", []int{0, 7}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newLockedSim("node-a"), newLockedSim("node-b")
			r := startRig(t, rigOptions{sims: []*lockedSim{a, b}, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }})
			want := controller.Digest(a.IR())
			ir := b.IR()
			svc := &ir.Services[0]
			ring := ir.ActiveRing(svc)
			var tamper compiler.Diff
			for _, slot := range tc.slots {
				e := &compiler.RingEntry{ServiceID: svc.ID, Half: svc.ActiveHalf, Slot: uint32(slot), BackendID: ring[slot]}
				op := compiler.Delete
				if !tc.del {
					op, e.BackendID = compiler.Modify, ir.Backends[0].ID
					if e.BackendID == ring[slot] {
						e.BackendID = ir.Backends[1].ID
					}
				}
				tamper.Changes = append(tamper.Changes, compiler.Change{Table: compiler.TableRing, Op: op, Ring: e})
			}
			b.mu.Lock()
			_, err := b.d.Apply(context.Background(), tamper)
			b.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if controller.Digest(b.IR()) == want {
				t.Fatal("tampering did not change the digest")
			}
			applies, writes := b.counts()
			if err := r.c.Verify(r.ctx); err != nil {
				t.Fatal(err)
			}
			held := b.IR()
			if got := controller.Digest(held); got != want {
				t.Fatalf("node-b not repaired: %s, want %s", got, want)
			}
			// One slot: that write. More: the whole ring into the other
			// half, the flip, the drifted half deleted.
			slots := 0
			for _, x := range ring {
				if x != 0 {
					slots++
				}
			}
			repair := 1
			if len(tc.slots) > 1 {
				repair = slots + 1 + slots
			}
			if a2, w2 := b.counts(); a2 != applies+1 || w2 != writes+repair {
				t.Fatalf("repair took %d pushes / %d writes, want 1 / %d", a2-applies, w2-writes, repair)
			}
			hs := held.ServiceByName(svc.Name)
			if n := slices.IndexFunc(held.Ring(hs.ID).Halves[1-hs.ActiveHalf&1], func(b uint32) bool { return b != 0 }); n >= 0 {
				t.Fatalf("after the repair node-b holds slot %d in the half packets do not look up, want none (one half at rest)", n)
			}
			if st := r.c.Status(r.ctx); !st.DigestsAgree {
				t.Fatalf("status after repair: %+v", st.Targets)
			}
		})
	}
}
