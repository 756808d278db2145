package tofino

import (
	"fmt"
	"sync"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/sim"
)

// heldTofino1 is R-CT-CAP's figure for the Tofino 1 geometry, measured once
// by the model (sim.TNAFlowsHeld, about a second).
var heldTofino1 = sync.OnceValues(func() (int, error) { return sim.TNAFlowsHeld(sim.TNATofino1) })

// Capacity is the size of the TNA program's tables, read from its P4Info
// (p4/tna/build/lb.p4info.txtpb), and of its conntrack on Tofino 1: the
// flows it holds at ≤ 1 % entry loss (R-CT-CAP), as the model of its
// geometry (sim.TNATofino1: 4 ways of 2^15 slots) measures them (`lbc
// validate --target tofino`).
func Capacity() (compiler.Capacity, error) {
	info, err := runtime.ParseP4Info(p4.TNAP4Info)
	if err != nil {
		return compiler.Capacity{}, fmt.Errorf("p4/tna/build/lb.p4info.txtpb: %w", err)
	}
	c, err := bmv2.P4Capacity("tofino", info, "recompile p4/tna/lb.p4 with -D%s=N (docs/tofino.md)")
	if err != nil {
		return c, err
	}
	held, err := heldTofino1()
	if err != nil {
		return c, fmt.Errorf("conntrack geometry %+v: %w", sim.TNATofino1, err)
	}
	g := sim.TNATofino1
	tables := c.Tables[:0]
	for _, t := range c.Tables {
		if t.Holds != compiler.HoldsConnections { // the P4Info's register size is slots, not flows held
			tables = append(tables, t)
		}
	}
	c.Tables = append(tables, compiler.TableCapacity{
		Table: fmt.Sprintf("LbIngress conntrack (%d ways × %d slots, flows held at ≤ 1 %% loss)", g.Ways, 1<<g.WayBits),
		Holds: compiler.HoldsConnections, Size: held,
		Raise: "a flow the switch cannot hold is refused an entry and counted (ct_refused); more slots need a recompile of p4/tna/lb.p4 with -DCT_WAY_BITS=N (docs/tofino.md, Conntrack geometry)"})
	return c, nil
}
