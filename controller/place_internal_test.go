package controller

import (
	"slices"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

func TestPlaceRingsNeverWritesTheServedHalf(t *testing.T) {
	R0, R1, R2 := []uint32{1, 1, 1}, []uint32{2, 2, 2}, []uint32{3, 3, 3}
	ir := func(active uint8, h0, h1 []uint32) *compiler.IR {
		return &compiler.IR{Services: []compiler.ServiceRow{{ID: 1, Name: "web", RingSize: 3, ActiveHalf: active}},
			Rings: []compiler.RingRows{{ServiceID: 1, Halves: [2][]uint32{h0, h1}}}}
	}
	cases := []struct {
		name       string
		held, want *compiler.IR
		same       bool // ir itself comes back
		active     uint8
		h0, h1     []uint32
	}{
		{"no row on the switch: as compiled", &compiler.IR{}, ir(1, R0, R1), true, 1, R0, R1},
		{"the served half is left alone: as compiled", ir(0, R0, R2), ir(1, R0, R1), true, 1, R0, R1},
		{"a new ring for the served half goes to the other, then the flip", ir(0, R0, R2), ir(0, R1, R2), false, 1, R0, R1},
		{"after a failed flip: the newer ring beside the served one", ir(0, R0, []uint32{2, 2, 0}), ir(0, R2, R1), false, 1, R0, R2},
		{"the switch serves the ring already: no flip, the other ring beside it", ir(1, R2, R1), ir(0, R1, R0), false, 1, R0, R1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := placeRings(tc.held, tc.want)
			if (got == tc.want) != tc.same {
				t.Fatalf("returned ir itself: %v, want %v", got == tc.want, tc.same)
			}
			s, r := got.Service(1), got.Ring(1)
			if s.ActiveHalf != tc.active || !slices.Equal(r.Halves[0], tc.h0) || !slices.Equal(r.Halves[1], tc.h1) {
				t.Fatalf("placed half %d %v %v, want half %d %v %v", s.ActiveHalf, r.Halves[0], r.Halves[1], tc.active, tc.h0, tc.h1)
			}
			if !slices.Equal(got.ActiveRing(s), tc.want.ActiveRing(tc.want.Service(1))) {
				t.Fatal("the placed IR serves another ring than the compiled one")
			}
			if hs := tc.held.Service(1); hs != nil && s.ActiveHalf != hs.ActiveHalf {
				if !slices.Equal(r.Halves[hs.ActiveHalf], tc.held.Ring(1).Halves[hs.ActiveHalf]) {
					t.Fatal("the served half would be written")
				}
			}
			if tc.want.Service(1).ActiveHalf != 0 && tc.want.Service(1).ActiveHalf != 1 {
				t.Fatal("the compiled IR was changed")
			}
		})
	}
}
