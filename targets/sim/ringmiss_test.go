package sim

import (
	"context"
	"testing"

	"github.com/lbc-dev/lbc/targets"
)

// TestRMAGLEV1_RingMissDropsWithoutEntry (issue 21): with a ring half
// active whose slot is unset (a push that stopped part-way), the packet
// misses the ring. Both P4 programs then drop it as having no backend and
// write no conntrack entry: p4/lb.p4 drops before its conntrack write, and
// p4/tna/lb.p4 claims a slot only for a ring hit (the program before the
// fix stored an uninitialised ring_backend). The model does the same, on
// the TNA geometry, the v1model one and the exact table; it used to fail
// with an error instead.
func TestRMAGLEV1_RingMissDropsWithoutEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		ct   func() Conntrack
	}{
		{"TNA Tofino 1", func() Conntrack { g, _ := NewTNA(TNATofino1, 0); return g }},
		{"v1model registers", func() Conntrack { r, _ := NewRegister(16384, P4Ways); return r }},
		{"exact", func() Conntrack { return NewExact() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := tnaDatapath(t, TNATofino1, 0)
			ct := tc.ct()
			d.ct = ct
			for i := range d.IR().Rings {
				for h := range d.IR().Rings[i].Halves {
					clear(d.IR().Rings[i].Halves[h]) // every slot unset
				}
			}
			ctx := context.Background()
			for i, flags := range []uint8{targets.FlagSYN, targets.FlagACK} {
				v, det, err := d.ProcessDetail(tcp("198.51.100.7", 4242, flags), 0)
				if err != nil {
					t.Fatalf("packet %d: %v (a ring miss must be a defined drop, not an error)", i, err)
				}
				if v.Action != targets.Drop || v.DropReason != targets.DropNoBackends {
					t.Fatalf("packet %d: %v, want a drop for no backends", i, v)
				}
				if det.Entry != nil && det.EntryValid {
					t.Fatalf("packet %d: hit entry %+v after a ring miss", i, *det.Entry)
				}
			}
			if n := ct.Len(); n != 0 {
				t.Fatalf("%d conntrack entries after ring misses, want 0", n)
			}
			if g, ok := ct.(*TNA); ok && g.Refused() != 0 {
				t.Fatalf("%d refusals counted for a ring miss, want 0", g.Refused())
			}
			if _, err := d.Process(ctx, tcp("198.51.100.8", 4243, targets.FlagSYN), 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}
