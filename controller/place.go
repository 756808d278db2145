package controller

import (
	"slices"

	"github.com/lbc-dev/lbc/compiler"
)

// placeRings returns ir with each service's ring halves placed for a
// target that holds held, so that the diff from held never writes the ring
// half the target's service row points at (design decision 4: packets
// look that half up while the diff is written; only the flip, one service
// row written after every ring write, may change which half they use).
//
// ir was compiled against the controller's view (the previous IR), which
// places a new ring in the half that view says is inactive. A target that
// does not hold that view may serve exactly that half: a push to it failed
// part-way before its flip (issue 25, item 4), or it is another target of
// a scale-out. Diffing ir against it would rewrite the ring it serves in
// place, slot by slot, and a push that stopped there would leave a mix of
// two rings active. For such a service the ring ir makes active goes to
// the half the target does not serve, and the flip points there; the
// served half is deleted after the flip, as DiffIR deletes every half a
// row leaves (one half at rest). The result has ir's datapath meaning: the
// same active rings (Digest) and rows; only which half holds which ring
// differs. ir itself is returned when nothing needs placing.
func placeRings(held, ir *compiler.IR) *compiler.IR {
	if held == nil || ir == nil {
		return ir
	}
	hx := held.Index()
	var out *compiler.IR
	for i := range ir.Services {
		s := &ir.Services[i]
		hs := hx.Service(s.ID)
		nr := ir.Ring(s.ID)
		if hs == nil || nr == nil {
			continue // no row on the target: no packet looks its ring up
		}
		a := hs.ActiveHalf & 1
		var served []uint32
		if hr := hx.Ring(s.ID); hr != nil {
			served = hr.Halves[a]
		}
		if slices.Equal(nr.Halves[a], served) {
			continue // ir leaves the served half as it is
		}
		active := nr.Halves[s.ActiveHalf&1]
		if out == nil {
			cp := *ir
			cp.Services = slices.Clone(ir.Services)
			cp.Rings = slices.Clone(ir.Rings)
			out = &cp
		}
		row, rr := &out.Services[i], out.Ring(s.ID)
		if slices.Equal(active, served) {
			// The target serves ir's ring already: keep it.
			row.ActiveHalf, rr.Halves[a], rr.Halves[1-a] = a, served, nil
		} else {
			// Write ir's ring into the half the target does not serve,
			// flip to it, and delete the served half after (DiffIR).
			row.ActiveHalf, rr.Halves[1-a], rr.Halves[a] = 1-a, active, nil
		}
	}
	if out == nil {
		return ir
	}
	return out
}
