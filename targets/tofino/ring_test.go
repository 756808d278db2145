package tofino

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// ringBankBits is the address bits of one of the TNA ring's tables.
const ringBankBits = 18

// TestDenseRingRowsHoldMasks (issue 35, item 4): on the TNA program a
// service row names its ring by ring_base and ring_mask (size - 1, which
// the program applies to the packet's hashes in the row's own action), every
// ring entry of the service lies in [ring_base, ring_base + ring_mask], the
// regions of two services never overlap, and every address and backend ID
// fits the direct-indexed tables (four banks of 2^18 addresses, which no
// region crosses; 16-bit entries).
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
				t.Errorf("region [%d, %d] runs past the ring's %d addresses", r.base, r.base+r.mask, MaxRingEntries)
			}
			if r.base>>ringBankBits != (r.base+r.mask)>>ringBankBits {
				t.Errorf("region [%d, %d] crosses from one ring table to the next (%d entries each)", r.base, r.base+r.mask, 1<<ringBankBits)
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
		for bank := range MaxRingEntries >> ringBankBits {
			for _, e := range v.Entries(fmt.Sprintf("ring%d", bank)) {
				d, err := s.Decode(e)
				if err != nil {
					t.Fatal(err)
				}
				if a := d.Uint("addr"); a >= 1<<ringBankBits {
					t.Errorf("ring%d entry at %d: past the bank's %d addresses", bank, a, 1<<ringBankBits)
				}
				addr, be := uint64(bank)<<ringBankBits|d.Uint("addr"), d.Uint("backend_id")
				in := false
				for _, r := range regions {
					in = in || (addr >= r.base && addr <= r.base+r.mask)
				}
				if !in || be == 0 || be >= 1<<16 {
					t.Errorf("ring entry at %d → backend %d: outside every row's region, or not a 16-bit backend ID", addr, be)
				}
				n++
			}
		}
		if n != 128+64 {
			t.Errorf("%d ring entries, want %d", n, 128+64)
		}
	})
}

// TestMaxRingEntriesIsTheProgram: MaxRingEntries, which `lbc validate
// --target tofino` names as the ring's ceiling, is what the committed
// Tofino 1 program's ring tables hold, and each table is one bank of
// 2^ringBankBits direct-indexed entries.
func TestMaxRingEntriesIsTheProgram(t *testing.T) {
	s, err := runtime.LoadP4Info(tnaP4Info)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for bank := 0; ; bank++ {
		tb, err := s.Table(fmt.Sprintf("ring%d", bank))
		if err != nil {
			break
		}
		if tb.GetSize() != 1<<ringBankBits {
			t.Errorf("ring%d holds %d entries, want %d", bank, tb.GetSize(), 1<<ringBankBits)
		}
		total += int(tb.GetSize())
	}
	if total != MaxRingEntries {
		t.Errorf("the ring tables hold %d entries, MaxRingEntries says %d", total, MaxRingEntries)
	}
}

// TestRingAddressesNameBanks: the translator writes ring address a as
// entry a mod 2^18 of table ring(a / 2^18), refuses an address past the
// four tables, and reads each bank's entries back at their addresses.
func TestRingAddressesNameBanks(t *testing.T) {
	s, err := runtime.LoadP4Info(tnaP4Info)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := bmv2.NewTranslator(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.RingTables(); len(got) != 4 || tr.RingBank() != 1<<ringBankBits {
		t.Fatalf("ring tables %v of %d entries, want ring0 .. ring3 of %d", got, tr.RingBank(), 1<<ringBankBits)
	}
	for _, a := range []uint32{0, 1<<ringBankBits - 1, 1 << ringBankBits, 2<<ringBankBits + 77, MaxRingEntries - 1} {
		e, err := tr.RingEntry(a, 9, true)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("ring%d", a>>ringBankBits); d.Table != want || d.Uint("addr") != uint64(a&(1<<ringBankBits-1)) {
			t.Errorf("address %d: %s entry %d, want %s entry %d", a, d.Table, d.Uint("addr"), want, a&(1<<ringBankBits-1))
		}
	}
	if _, err := tr.RingEntry(MaxRingEntries, 9, true); err == nil {
		t.Errorf("address %d (past the four tables) was written", MaxRingEntries)
	}
}

// TestRingBanksReadBack: rings that fill the first of the TNA ring's four
// tables go on in the next one, no region crossing from one to the other;
// what the switch holds reads back as the compiled IR, and a re-push
// writes nothing.
func TestRingBanksReadBack(t *testing.T) {
	var y strings.Builder
	y.WriteString("tunnel: {sourceIPv4: 192.0.2.1}\nservices:\n")
	for i := range 5 { // 5 × 65,536: 4 fill ring0, the fifth goes to ring1
		fmt.Fprintf(&y, "  - name: s%d\n    vip: 203.0.113.%d\n    protocol: TCP\n    ports: [80]\n    ringSize: 65536\n    backends:\n      - name: g\n        endpoints:\n          - {name: s%d-a, ip: 10.0.%d.1}\n          - {name: s%d-b, ip: 10.0.%d.2}\n", i, i+1, i, i, i, i)
	}
	b := newBench(t, programs(t)[0], p4rt.Options{})
	tg := b.open(t)
	cfg := load(t, y.String())
	push(t, tg, cfg, nil, 0)
	want := compile(t, cfg, nil, nil, 0)
	mustHold(t, tg, want)
	b.srv.Snapshot(func(v p4rt.View) {
		if n := len(v.Entries("ring1")); n != 65536 {
			t.Errorf("ring1 holds %d entries, want the fifth ring's 65536", n)
		}
		s := v.Schema()
		for _, e := range v.Entries("service") {
			d, err := s.Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			if base, mask := d.Uint("ring_base"), d.Uint("ring_mask"); base>>ringBankBits != (base+mask)>>ringBankBits {
				t.Errorf("service %d: region [%d, %d] crosses ring tables", d.Uint("service_id"), base, base+mask)
			}
		}
	})
	b.srv.ResetLog()
	if d, _ := push(t, tg, cfg, nil, 0); !d.Empty() || b.srv.WriteRPCs() != 0 {
		t.Fatalf("re-push: %d changes in %d RPCs, want 0", len(d.Changes), b.srv.WriteRPCs())
	}
}
