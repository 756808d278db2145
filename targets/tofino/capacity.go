package tofino

import (
	"fmt"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
)

// Capacity is the size of the TNA program's tables and of its conntrack,
// read from its P4Info (p4/tna/build/lb.p4info.txtpb; `lbc validate
// --target tofino`). The conntrack is ct_sig's 2^CT_INDEX_BITS
// direct-mapped slots: the P4Info (with std externs) lists the register
// with its size, and TestTNABuildMatchesSource keeps that the source's.
func Capacity() (compiler.Capacity, error) {
	info, err := runtime.ParseP4Info(p4.TNAP4Info)
	if err != nil {
		return compiler.Capacity{}, fmt.Errorf("p4/tna/build/lb.p4info.txtpb: %w", err)
	}
	c, err := bmv2.P4Capacity("tofino", info, "recompile p4/tna/lb.p4 with -D%s=N (docs/tofino.md)")
	if err != nil {
		return c, err
	}
	for i := range c.Tables {
		if c.Tables[i].Holds == compiler.HoldsConnections {
			c.Tables[i].Raise = "recompile p4/tna/lb.p4 with -DCT_INDEX_BITS=N (2^N direct-mapped slots; docs/tofino.md)"
			return c, nil
		}
	}
	return c, fmt.Errorf("p4/tna/build/lb.p4info.txtpb: no register LbIngress.ct_sig (compiled without --p4runtime-force-std-externs?)")
}
