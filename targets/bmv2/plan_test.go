package bmv2

import (
	"context"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// TestPlanWaitsAtBarriers (issue 35): the batch that starts at each of a
// diff's barriers waits compiler.Grace before it is written, and no batch
// spans a barrier; no other batch waits. A failover's deletes of the old
// half are such a batch.
func TestPlanWaitsAtBarriers(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	ctx := context.Background()
	tg, err := Open(ctx, Options{Options: runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ElectionLow: 1}, P4InfoPath: b.path})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	cfg := load(t, testConfig)
	before := compile(t, cfg, nil, nil, 0)
	st := compiler.State{}
	st.SetHealthy("vm-a1", false)
	st.SetHealthy("vm-a2", false)
	after := compile(t, cfg, st, before, 0)
	d := compiler.DiffIR(before, after)
	if len(d.Barriers) == 0 {
		t.Fatal("a failover diff has no barrier")
	}
	batches := tg.plan(d)
	at, waits := 0, 0
	barrier := map[int]bool{}
	for _, i := range d.Barriers {
		barrier[i] = true
	}
	for _, bt := range batches {
		if bt.at != at {
			t.Fatalf("batch at change %d says it starts at %d", at, bt.at)
		}
		if bt.grace != barrier[at] {
			t.Fatalf("batch at change %d: grace %v, barrier %v", at, bt.grace, barrier[at])
		}
		for i := at + 1; i < at+len(bt.changes); i++ {
			if barrier[i] {
				t.Fatalf("batch at change %d spans the barrier at %d", at, i)
			}
		}
		if bt.grace {
			waits++
			if c := bt.changes[0]; c.Ring == nil || c.Op != compiler.Delete {
				t.Fatalf("the batch after the barrier starts with %s, want the old half's deletes", c)
			}
		}
		at += len(bt.changes)
	}
	if waits != len(d.Barriers) {
		t.Fatalf("%d batches wait, want %d", waits, len(d.Barriers))
	}
}
