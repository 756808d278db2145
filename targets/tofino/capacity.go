package tofino

import (
	"fmt"
	"sync"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/sim"
)

// held is R-CT-CAP's figures for a geometry: the committed geometries'
// (sim.CommittedTNAHeld), or measured by the model (sim.TNAHeld: the
// steady state's search takes seconds to minutes, once per process).
var held = struct {
	sync.Mutex
	m map[sim.TNAGeometry]sim.HeldFigures
}{m: map[sim.TNAGeometry]sim.HeldFigures{}}

func flowsHeld(g sim.TNAGeometry) (sim.HeldFigures, error) {
	held.Lock()
	defer held.Unlock()
	if f, ok := held.m[g]; ok {
		return f, nil
	}
	f, err := sim.TNAHeld(g)
	if err != nil {
		return f, err
	}
	held.m[g] = f
	return f, nil
}

// MaxRingEntries is the largest ring the TNA program places: four
// direct-indexed tables of 2^18 16-bit entries (p4c-barefoot 9.13.4 places
// no table of 2^19 in any stage, and the four fill the stages between the
// tuples and the conntrack's backend registers; docs/tofino.md, "The dense
// ring").
const MaxRingEntries = 1 << 20

// MaxRingEntriesTofino2 is MaxRingEntries on Tofino 2: four tables of
// 2^16 (its conntrack takes two stages a step; four of 2^18 took 23 to 25
// of its 20 stages, docs/tofino.md).
const MaxRingEntriesTofino2 = 1 << 18

// isTofino2 tells a Tofino 2 build by its conntrack's layout: two register
// arrays a way (ct_sig<w> and ct_sig<w>b).
func isTofino2(info *p4configv1.P4Info) bool {
	for _, r := range info.GetRegisters() {
		if r.GetPreamble().GetName() == "LbIngress.ct_sig0b" {
			return true
		}
	}
	return false
}

// Capacity is the size of the TNA program's tables, read from its P4Info
// (p4/tna/build/lb.p4info.txtpb), and of its conntrack on Tofino 1: the
// flows it holds at ≤ 1 % refusal of new flows in steady state (R-CT-CAP:
// flows ending and starting at the same rate), as the model of its
// geometry measures them (`lbc validate --target tofino`); the table's
// name gives the fill-from-empty figure beside it, labelled.
//
// The geometry is the committed program's, read from the same P4Info
// (ConntrackGeometry), so the figure never describes a program other than
// the one `lbc push --target tofino` pushes.
func Capacity() (compiler.Capacity, error) {
	return CapacityOf(p4.TNAP4Info, "p4/tna/build/lb.p4info.txtpb")
}

// CapacityOf is Capacity for another build of the TNA program, from its
// P4Info (text format) read from file: Tofino 2's
// (p4/tna/build/tofino2/lb.p4info.txtpb), or one compiled with other
// sizes. The conntrack's figures are the model's of that build's geometry.
func CapacityOf(p4info []byte, file string) (compiler.Capacity, error) {
	info, err := runtime.ParseP4Info(p4info)
	if err != nil {
		return compiler.Capacity{}, fmt.Errorf("%s: %w", file, err)
	}
	c, err := bmv2.P4Capacity("tofino", info, "recompile p4/tna/lb.p4 with -D%s=N (docs/tofino.md)")
	if err != nil {
		return c, fmt.Errorf("%s: %w", file, err)
	}
	g, err := ConntrackGeometry(info)
	if err != nil {
		return c, fmt.Errorf("%s: %w", file, err)
	}
	raise, layout := "more slots need a recompile of p4/tna/lb.p4 with -DCT_WAY_BITS=N (docs/tofino.md, Conntrack geometry)", ""
	if g.Ways == 1 {
		raise = "recompile p4/tna/lb.p4 with -DCT_INDEX_BITS=N (2^N direct-mapped slots; docs/tofino.md)"
		layout = "direct-mapped, "
	}
	maxRing, chip := MaxRingEntries, "Tofino 1"
	if isTofino2(info) {
		maxRing, chip = MaxRingEntriesTofino2, "Tofino 2"
	}
	tables := c.Tables[:0]
	for _, t := range c.Tables {
		if t.Holds == compiler.HoldsRingEntries && t.Size >= maxRing {
			t.Raise = fmt.Sprintf("fewer or smaller rings: %s (ring0 .. ring3) cannot grow past %d entries, the most this program places on %s (docs/tofino.md, \"The dense ring\")", t.Table, maxRing, chip)
		} else if t.Holds == compiler.HoldsRingEntries {
			t.Raise = fmt.Sprintf("recompile p4/tna/lb.p4 with -DRING_BANK_BITS=N -DRING_ADDR_BITS=N+2 (4 tables of 2^N entries, at most %d in all on %s; docs/tofino.md)", maxRing, chip)
		}
		if t.Holds != compiler.HoldsConnections { // the P4Info's register size is slots, not flows held
			tables = append(tables, t)
		}
	}
	f, err := flowsHeld(g)
	if err != nil {
		return c, fmt.Errorf("conntrack geometry %+v: %w", g, err)
	}
	c.Tables = append(tables, compiler.TableCapacity{
		Table: fmt.Sprintf("LbIngress conntrack (%s%d ways × %d slots, flows held at ≤ 1 %% steady-state refusal; %d by a fill from empty)", layout, g.Ways, 1<<g.WayBits, f.Fill),
		Holds: compiler.HoldsConnections, Size: f.Steady,
		Raise: raise})
	return c, nil
}
