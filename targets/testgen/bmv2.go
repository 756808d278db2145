package testgen

import (
	"context"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/p4/stf"
	"github.com/lbc-dev/lbc/runtime"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// RunBMv2 runs one test on a live BMv2 switch running lb.p4: it resets the
// switch (every table, register and counter empty), writes the test's
// entries over P4Runtime as they are (P4Testgen's, not lbc's: the switch
// is the program itself, so every test is in its domain), sets the
// default actions the test does not override back to lb.p4's (no_route,
// no_fallback: Reset programs a default route and a fallback port), sends
// the frame on the test's port and compares what leaves.
func RunBMv2(ctx context.Context, sw *bmv2live.Switch, s *runtime.Schema, name string, t *stf.Test) (Result, error) {
	r := Result{Name: name, Want: Want(t)}
	if err := sw.Reset(ctx); err != nil {
		return r, err
	}
	entries, defaults, err := Entries(s, t)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	var ups []*p4v1.Update
	for _, d := range []struct{ table, action string }{{tForward, "no_route"}, {tFallback, "no_fallback"}} {
		e, err := s.DefaultEntry(d.table, d.action, nil)
		if err != nil {
			return r, err
		}
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}})
	}
	for _, e := range defaults {
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}})
	}
	for _, e := range entries {
		ups = append(ups, &p4v1.Update{Type: p4v1.Update_INSERT, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}})
	}
	// One update per write: the spec lets a batch apply in any order, and
	// the test's default overrides must land after the resets.
	for _, u := range ups {
		if err := sw.Target().Client().Write(ctx, []*p4v1.Update{u}); err != nil {
			return r, fmt.Errorf("%s: write %v: %w", name, u, err)
		}
	}
	p := t.Packets[0]
	// A counted drop is reported at once; an uncounted one (egress port
	// 511) after the wait, which is long enough that a frame the switch
	// still sends is not mistaken for a drop (it would then fail the test).
	fate, err := sw.Exchange(ctx, p.Port, p.Data, 2*time.Second, 30*time.Millisecond)
	if err != nil {
		return r, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case fate.Dropped:
		r.Got = Outcome{Drop: true}
	case len(fate.Out) == 1:
		r.Got = Outcome{Port: fate.Out[0].Port, Frame: fate.Out[0].Data}
	default:
		return r, fmt.Errorf("%s: %d frames left the switch; lb.p4 sends one", name, len(fate.Out))
	}
	r.Agree = Agrees(t, r.Got)
	return r, nil
}
