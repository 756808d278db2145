package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// ReadStats says what ReadFor read.
type ReadStats struct {
	// RingsRead is whether the ring table was read back; Why says why it
	// was (or, when it was not, "every ring is sealed as compiled").
	RingsRead bool
	Why       string
}

// ReadFor returns what t holds, for a Reconcile of cfg in state st at now
// (lbc push). A targets.RingSealer is read without its ring table when
// every service row holds the seal of the ring this compile builds for it
// (SealedRings): the rings are then taken as compiled, and a push that
// changes nothing reads only the small tables. Otherwise, or with full,
// the rings are read back as Read does.
func ReadFor(ctx context.Context, t targets.Target, cfg *compiler.Config, st compiler.State, now time.Duration, full bool) (*compiler.IR, ReadStats, error) {
	rs, ok := t.(targets.RingSealer)
	if !ok || !rs.SealsRings() {
		ir, err := t.Read(ctx)
		return ir, ReadStats{RingsRead: true, Why: "the target keeps no ring seals"}, err
	}
	if full {
		ir, err := t.Read(ctx)
		return ir, ReadStats{RingsRead: true, Why: "asked to read everything"}, err
	}
	ir, sealed, err := rs.ReadRows(ctx)
	if err != nil {
		return nil, ReadStats{}, err
	}
	rings, why := SealedRings(cfg, st, now, ir, sealed)
	if why == "" {
		ir.Rings = rings
		ir.Sort()
		return ir, ReadStats{Why: "every ring is sealed as compiled"}, nil
	}
	if err := rs.ReadRings(ctx, ir); err != nil {
		return nil, ReadStats{}, err
	}
	ir.Sort()
	return ir, ReadStats{RingsRead: true, Why: why}, nil
}

// SealedRings returns the rings rows (an IR read without its rings) holds
// when every service row's seal (sealed, by service ID) is that of the
// ring a compile of cfg in state st builds for it; otherwise, why not.
// A ring depends only on its inputs (members, weights, size, fill), so a
// seal that matches the compiled ring's digest says the switch holds that
// ring, and nothing in the other half. It is pure.
//
// Backend rows of a service without a row are a push cut short between a
// new service's ring and its row, or between a gone service's row and its
// ring: ring entries no seal covers may exist, so the rings are read.
func SealedRings(cfg *compiler.Config, st compiler.State, now time.Duration, rows *compiler.IR, sealed map[uint32]string) ([]compiler.RingRows, string) {
	if len(rows.Services) == 0 && len(rows.Backends) == 0 {
		return nil, "no service rows (a first push)"
	}
	px := rows.Index()
	for i := range rows.Backends {
		if b := &rows.Backends[i]; px.Service(b.ServiceID) == nil {
			return nil, fmt.Sprintf("backend %q belongs to service %d, which has no row (a push cut short)", b.Name, b.ServiceID)
		}
	}
	for i := range rows.Services {
		if s := &rows.Services[i]; sealed[s.ID] == "" {
			return nil, fmt.Sprintf("service %q has no ring seal (a push cut short, or written by an older lbc or by lbc run)", s.Name)
		}
	}
	res, err := compiler.Compile(compiler.Input{Config: cfg, State: st, Prev: rows, Now: now})
	if err != nil {
		return nil, fmt.Sprintf("compile without the rings: %v", err)
	}
	var out []compiler.RingRows
	for i := range rows.Services {
		s := &rows.Services[i]
		// Without a ring in Prev, Compile builds the ring afresh into
		// half 0.
		var slots []uint32
		if r := res.IR.Ring(s.ID); r != nil {
			slots = r.Halves[0]
		}
		for len(slots) > 0 && slots[len(slots)-1] == 0 {
			slots = slots[:len(slots)-1] // as a read-back ends
		}
		if targets.RingDigest(s.ActiveHalf, slots) != sealed[s.ID] {
			return nil, fmt.Sprintf("service %q: its ring changes (or was written otherwise)", s.Name)
		}
		if len(slots) == 0 {
			continue
		}
		rr := compiler.RingRows{ServiceID: s.ID}
		rr.Halves[s.ActiveHalf&1] = append([]uint32(nil), slots...)
		out = append(out, rr)
	}
	return out, ""
}
