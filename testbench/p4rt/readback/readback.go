// Package readback reads the in-process P4Runtime server's tables as the
// bmv2 target reads a switch back: the IR tests check after each update
// the server applies. (Its own package: package bmv2's tests use the
// server, which cannot depend on bmv2.)
package readback

import (
	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// IR is what v holds in lb.p4's (or p4/tna/lb.p4's) tables (without the tunnel source and MTU
// defaults).
func IR(v p4rt.View) (*compiler.IR, error) {
	tr, err := bmv2.NewTranslator(v.Schema())
	if err != nil {
		return nil, err
	}
	tabs := bmv2.Tables{}
	for _, n := range append([]string{"vip_port", "vip_proto", "vip_addr", "service", "backend"}, tr.RingTables()...) {
		tabs[n] = v.Entries(n)
	}
	return tr.IR(tabs, nil)
}
