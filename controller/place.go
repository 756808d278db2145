package controller

import (
	"slices"

	"github.com/lbc-dev/lbc/compiler"
)

// placeRings returns ir with each service's ring placed for a target that
// holds held, so that what packets look up changes in one write per
// service (design decision 4): the diff from held never rewrites, slot by
// slot, the ring half the target's service row points at while packets
// look it up; only the flip, the service row written after the new half,
// changes which ring they use, and the half it leaves is deleted after it
// (compiler.DiffIR: one half at rest).
//
// ir was compiled against the controller's view (the previous IR), which
// places a new ring in the half that view says is free. A target that does
// not hold that view may serve exactly that half: a push to it failed
// part-way before its flip (issue 25, item 4), or it is another target of
// a scale-out, or it drifted. Diffing ir against it would rewrite the ring
// it serves in place, and a push that stopped there would leave a mix of
// two rings active. For such a service the ring ir makes active goes to
// the half the target does not serve, the flip points there, and the
// served half is deleted after it. Two cases need no flip: the target
// serves ir's ring already (it is kept where it is, and nothing of it is
// written), or the served ring differs from ir's in one slot and the row
// in nothing else (a drift of one entry): that slot is written in place,
// one write that moves packets from one whole ring to the other as the
// flip would, instead of the whole ring twice.
//
// The result has ir's datapath meaning: the same active rings (Digest)
// and rows; only which half holds the ring differs. ir itself is returned
// when nothing needs placing.
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
		at := s.ActiveHalf & 1
		active := nr.Halves[at]
		same := *hs
		same.ActiveHalf = s.ActiveHalf
		var half uint8
		switch n := slotsDiffer(active, served); {
		case n == 0:
			half = a // the target serves ir's ring already: keep it
		case n == 1 && compiler.ServiceDatapathEqual(&same, s):
			half = a // one write in place, as atomic as a flip
		default:
			half = 1 - a // into the half it does not serve, then the flip
		}
		if half == at {
			// ir writes its ring where it may: in half a, at most the one
			// slot allowed above; in the other half, before its flip,
			// after which DiffIR deletes whatever half a holds.
			continue
		}
		if out == nil {
			cp := *ir
			cp.Services = slices.Clone(ir.Services)
			cp.Rings = slices.Clone(ir.Rings)
			out = &cp
		}
		row, rr := &out.Services[i], out.Ring(s.ID)
		row.ActiveHalf = half
		rr.Halves[half], rr.Halves[1-half] = active, nil
	}
	if out == nil {
		return ir
	}
	return out
}

// slotsDiffer counts the slots two ring halves differ in, an unset slot
// (0, or past the end) being one the datapath does not hold: the ring
// writes a diff between them makes.
func slotsDiffer(a, b []uint32) int {
	n := 0
	for i := range max(len(a), len(b)) {
		var x, y uint32
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			n++
		}
	}
	return n
}
