package tofino

import (
	"sort"
	"testing"

	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// TestDenseRingRowsHoldMasks (issue 35, item 4): on the TNA program a
// service row names its ring by ring_base and ring_mask (size - 1, which
// the program applies to the packet's hashes in the row's own action), every
// ring entry of the service lies in [ring_base, ring_base + ring_mask], the
// regions of two services never overlap, and every address and backend ID
// fits the direct-indexed table (2^18 addresses, 16-bit entries).
func TestDenseRingRowsHoldMasks(t *testing.T) {
	b := newBench(t, programs(t)[0], p4rt.Options{})
	tg := b.open(t)
	cfg := load(t, testConfig)
	push(t, tg, cfg, nil, 0)
	want := map[string]uint64{"web": 127, "dns": 63} // ringSize 128 and 64
	b.srv.Snapshot(func(v p4rt.View) {
		s := v.Schema()
		type region struct{ base, mask uint64 }
		byID := map[uint64]region{}
		for _, e := range v.Entries("service") {
			d, err := s.Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			byID[d.Uint("service_id")] = region{d.Uint("ring_base"), d.Uint("ring_mask")}
		}
		ir := compile(t, cfg, nil, nil, 0)
		for name, m := range want {
			svc := ir.ServiceByName(name)
			if got := byID[uint64(svc.ID)].mask; got != m {
				t.Errorf("service %q: ring_mask %d, want %d (ringSize %d - 1)", name, got, m, svc.RingSize)
			}
		}
		var regions []region
		for _, r := range byID {
			if r.base+r.mask >= MaxRingEntries {
				t.Errorf("region [%d, %d] runs past the table's %d addresses", r.base, r.base+r.mask, MaxRingEntries)
			}
			regions = append(regions, r)
		}
		sort.Slice(regions, func(i, j int) bool { return regions[i].base < regions[j].base })
		for i := 1; i < len(regions); i++ {
			if p := regions[i-1]; p.base+p.mask >= regions[i].base {
				t.Errorf("regions [%d, %d] and [%d, …] overlap", p.base, p.base+p.mask, regions[i].base)
			}
		}
		n := 0
		for _, e := range v.Entries("ring") {
			d, err := s.Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			addr, be := d.Uint("addr"), d.Uint("backend_id")
			in := false
			for _, r := range regions {
				in = in || (addr >= r.base && addr <= r.base+r.mask)
			}
			if !in || be == 0 || be >= 1<<16 {
				t.Errorf("ring entry at %d → backend %d: outside every row's region, or not a 16-bit backend ID", addr, be)
			}
			n++
		}
		if n != 128+64 {
			t.Errorf("%d ring entries, want %d", n, 128+64)
		}
	})
}
