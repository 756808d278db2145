package bmv2

import (
	"fmt"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// Capacity is the size of lb.p4's tables and conntrack registers on BMv2,
// read from its P4Info (p4/build/lb.p4info.txtpb; `lbc validate --target
// bmv2`).
func Capacity() (compiler.Capacity, error) {
	info, err := runtime.ParseP4Info(p4.BMv2P4Info)
	if err != nil {
		return compiler.Capacity{}, fmt.Errorf("p4/build/lb.p4info.txtpb: %w", err)
	}
	return P4Capacity("bmv2", info, "recompile p4/lb.p4 with make p4 P4FLAGS=-D%s=N")
}

// P4Capacity reads the tables of the v1model or TNA program from its
// P4Info; raise is how to resize one, with %s for its size macro.
// Conntrack, when the P4Info lists its registers, is the size of ct_sig.
func P4Capacity(target string, info *p4configv1.P4Info, raise string) (compiler.Capacity, error) {
	sizes := map[string]int{}
	add := func(name string, size int) {
		sizes[name] = size
		// The Tofino back end names objects after the pipeline too
		// (pipe.LbIngress.vip_port).
		if _, rest, ok := strings.Cut(name, "."); ok && strings.Contains(rest, ".") {
			sizes[rest] = size
		}
	}
	for _, t := range info.GetTables() {
		add(t.GetPreamble().GetName(), int(t.GetSize()))
	}
	for _, r := range info.GetRegisters() {
		add(r.GetPreamble().GetName(), int(r.GetSize()))
	}
	c := compiler.Capacity{Target: target}
	for _, t := range []struct{ name, holds, macro string }{
		{"LbIngress.vip_port", compiler.HoldsVIPPorts, "VIP_TABLE_SIZE"},
		{"LbIngress.vip_proto", compiler.HoldsVIPProtos, "VIP_TABLE_SIZE"},
		{"LbIngress.vip_addr", compiler.HoldsVIPAddrs, "VIP_TABLE_SIZE"},
		{"LbIngress.service", compiler.HoldsServices, "SERVICE_TABLE_SIZE"},
		{"LbIngress.ring", compiler.HoldsRingEntries, "RING_TABLE_SIZE"},
		{"LbIngress.backend", compiler.HoldsBackends, "BACKEND_TABLE_SIZE"},
		{"LbIngress.idle_ticks", compiler.HoldsIdleTimeout, "IDLE_TICKS_TABLE_SIZE"},
		{"LbIngress.ct_sig", compiler.HoldsConnections, "CT_BUCKETS"},
	} {
		n, ok := sizes[t.name]
		if !ok {
			if t.holds == compiler.HoldsIdleTimeout || t.holds == compiler.HoldsConnections {
				continue // a table only one of the programs has
			}
			return compiler.Capacity{}, fmt.Errorf("%s: the P4Info has no %s (is it lb.p4's?)", target, t.name)
		}
		r := fmt.Sprintf(raise, t.macro)
		if t.macro == "CT_BUCKETS" {
			r += " (N buckets of 4 ways: the registers hold 4N entries)"
		}
		c.Tables = append(c.Tables, compiler.TableCapacity{Table: t.name, Holds: t.holds, Size: n, Raise: r})
	}
	return c, nil
}
