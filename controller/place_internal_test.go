package controller

import (
	"slices"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// TestPlaceRingsNeverWritesTheServedHalf: whatever a target holds, the
// diff to the placed IR changes the ring packets look up in one write (the
// flip, or a single slot in place), deletes the half the flip leaves only
// after it and a barrier, leaves one half per service at rest, serves the
// compiled ring, and writes no more than that takes.
func TestPlaceRingsNeverWritesTheServedHalf(t *testing.T) {
	R0, R1, R2 := []uint32{1, 1, 1}, []uint32{2, 2, 2}, []uint32{3, 3, 3}
	ir := func(active uint8, h0, h1 []uint32) *compiler.IR {
		return &compiler.IR{Services: []compiler.ServiceRow{{ID: 1, Name: "web", RingSize: 3, ActiveHalf: active}},
			Rings: []compiler.RingRows{{ServiceID: 1, Halves: [2][]uint32{h0, h1}}}}
	}
	epoch := func(x *compiler.IR) *compiler.IR { x.Services[0].Epoch++; return x }
	cases := []struct {
		name       string
		held, want *compiler.IR
		same       bool // ir itself comes back
		active     uint8
		h0, h1     []uint32
		writes     int // the diff's length
	}{
		{"no row on the switch: as compiled", &compiler.IR{}, ir(1, nil, R1), true, 1, nil, R1, 3 + 1},
		{"a new ring in the half not served: as compiled, the served half deleted after the flip", ir(0, R0, nil), ir(1, nil, R1), true, 1, nil, R1, 3 + 1 + 3},
		{"a stale second half (an older lbc, a push cut after its flip) is deleted, nothing else", ir(0, R0, R2), ir(0, R0, nil), true, 0, R0, nil, 3},
		{"a new ring for the served half goes to the other, then the flip", ir(0, R0, nil), ir(0, R1, nil), false, 1, nil, R1, 3 + 1 + 3},
		{"after a failed flip: the newer ring over the half written part-way", ir(0, R0, []uint32{2, 2, 0}), ir(0, R2, nil), false, 1, nil, R2, 3 + 1 + 3},
		{"the switch serves the ring already: no flip, the other half deleted", ir(1, R2, R1), ir(0, R1, nil), false, 1, nil, R1, 3},
		{"one slot drifted: written in place", ir(0, []uint32{1, 1, 2}, nil), ir(0, R0, nil), true, 0, R0, nil, 1},
		{"one slot missing: inserted in place", ir(0, []uint32{1, 0, 1}, nil), ir(0, R0, nil), true, 0, R0, nil, 1},
		{"one slot drifted, compiled into the other half: in place, no flip", ir(1, nil, []uint32{1, 1, 2}), ir(0, R0, nil), false, 1, nil, R0, 1},
		{"one slot differs and the epoch moves: the ring and the row flip together", ir(0, []uint32{1, 1, 2}, nil), epoch(ir(0, R0, nil)), false, 1, nil, R0, 3 + 1 + 3},
		{"two slots differ: the other half, then the flip", ir(0, []uint32{1, 2, 2}, nil), ir(0, R0, nil), false, 1, nil, R0, 3 + 1 + 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			compiled := tc.want.Clone()
			got := placeRings(tc.held, tc.want)
			if d := compiler.DiffIR(compiled, tc.want); !d.Empty() {
				t.Fatalf("the compiled IR was changed:\n%s", d.Summary())
			}
			s, r := got.Service(1), got.Ring(1)
			defer func() {
				// The placement itself, once the properties hold.
				if (got == tc.want) != tc.same {
					t.Errorf("returned ir itself: %v, want %v", got == tc.want, tc.same)
				}
				if s.ActiveHalf != tc.active || !slices.Equal(r.Halves[0], tc.h0) || !slices.Equal(r.Halves[1], tc.h1) {
					t.Errorf("placed half %d %v %v, want half %d %v %v", s.ActiveHalf, r.Halves[0], r.Halves[1], tc.active, tc.h0, tc.h1)
				}
			}()
			if !slices.Equal(got.ActiveRing(s), tc.want.ActiveRing(tc.want.Service(1))) {
				t.Fatal("the placed IR serves another ring than the compiled one")
			}
			row := *s
			row.ActiveHalf = tc.want.Service(1).ActiveHalf
			if !compiler.ServiceDatapathEqual(&row, tc.want.Service(1)) {
				t.Fatalf("the placed row %+v is not the compiled %+v", *s, *tc.want.Service(1))
			}

			d := compiler.DiffIR(tc.held, got)
			defer func() {
				if len(d.Changes) != tc.writes {
					t.Errorf("the diff is %d writes, want %d:\n%s", len(d.Changes), tc.writes, d.Summary())
				}
			}()
			if after := d.Apply(tc.held); len(after.Ring(1).Halves[1-after.Service(1).ActiveHalf]) != 0 {
				t.Fatalf("after the diff the half packets do not look up holds %v: one half at rest", after.Ring(1).Halves[1-after.Service(1).ActiveHalf])
			}
			hs := tc.held.Service(1)
			if hs == nil {
				return
			}
			flip := slices.IndexFunc(d.Changes, func(c compiler.Change) bool {
				return c.Table == compiler.TableService && c.Service.ActiveHalf != hs.ActiveHalf
			})
			served := 0
			for i, c := range d.Changes {
				if c.Table != compiler.TableRing || c.Ring.Half != hs.ActiveHalf {
					continue
				}
				if flip < 0 || i < flip {
					served++
					continue
				}
				if c.Op != compiler.Delete {
					t.Fatalf("change %d writes the half the flip left: %s", i, c)
				}
				if !slices.ContainsFunc(d.Barriers, func(b int) bool { return b > flip && b <= i }) {
					t.Fatalf("change %d deletes the half the flip (change %d) left with no barrier between: %v", i, flip, d.Barriers)
				}
			}
			if served > 1 || served == 1 && (flip >= 0 || len(d.Changes) != 1) {
				t.Fatalf("%d writes of the served half (flip at %d), want none, or one alone:\n%s", served, flip, d.Summary())
			}
		})
	}
}
