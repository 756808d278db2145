package tofino

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
)

var ctIndexBits = regexp.MustCompile(`(?m)^#define CT_INDEX_BITS (\d+)\s*$`)

// Capacity is the size of the TNA program's tables, read from its P4Info
// (p4/tna/build/lb.p4info.txtpb), and of its conntrack, 2^CT_INDEX_BITS
// direct-mapped slots as p4/tna/lb.p4 defines them (`lbc validate
// --target tofino`).
func Capacity() (compiler.Capacity, error) {
	info, err := runtime.ParseP4Info(p4.TNAP4Info)
	if err != nil {
		return compiler.Capacity{}, fmt.Errorf("p4/tna/build/lb.p4info.txtpb: %w", err)
	}
	c, err := bmv2.P4Capacity("tofino", info, "recompile p4/tna/lb.p4 with -D%s=N (docs/tofino.md)")
	if err != nil {
		return c, err
	}
	m := ctIndexBits.FindSubmatch(p4.TNASource)
	if m == nil {
		return c, fmt.Errorf("p4/tna/lb.p4: no #define CT_INDEX_BITS")
	}
	bits, err := strconv.Atoi(string(m[1]))
	if err != nil || bits < 1 || bits > 32 {
		return c, fmt.Errorf("p4/tna/lb.p4: CT_INDEX_BITS %s", m[1])
	}
	c.Tables = append(c.Tables, compiler.TableCapacity{Table: "LbIngress.ct_sig", Holds: compiler.HoldsConnections, Size: 1 << bits,
		Raise: "recompile p4/tna/lb.p4 with -DCT_INDEX_BITS=N (2^N direct-mapped slots; docs/tofino.md)"})
	return c, nil
}
