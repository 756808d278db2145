package bmv2

import (
	"fmt"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/sim"
	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"
)

// Capacity is CapacityFor(0): the committed build's.
func Capacity() (compiler.Capacity, error) { return CapacityFor(0) }

// CapacityFor is the size of the tables of lb.p4's build on BMv2 with its
// ring table sized ringEntries (p4.BMv2Build; 0: the committed size), read
// from its P4Info (`lbc validate --target bmv2 [--ring-table-size N]`),
// with the conntrack as V1ModelCapacity gives it.
func CapacityFor(ringEntries int) (compiler.Capacity, error) {
	raw, _, err := p4.BMv2Build(ringEntries)
	if err != nil {
		return compiler.Capacity{}, err
	}
	info, err := runtime.ParseP4Info(raw)
	if err != nil {
		return compiler.Capacity{}, fmt.Errorf("p4/build/lb.p4info.txtpb: %w", err)
	}
	return V1ModelCapacity(info)
}

// V1ModelCapacity is P4Capacity for a build of lb.p4 on BMv2, with two
// changes. The conntrack is the flows it holds at ≤ 1 % loss in steady
// state (R-CT-CAP: flows ending and starting at the same rate; the loss is
// live entries evicted), as the model of its 4-way buckets measures them,
// not its slots; the table's name gives the slots and the fill-from-empty
// figure beside it, labelled, as tofino.Capacity does. And the ring
// table's size is the --ring-table-size a push gives it, not a recompile.
func V1ModelCapacity(info *p4configv1.P4Info) (compiler.Capacity, error) {
	c, err := P4Capacity("bmv2", info, "recompile p4/lb.p4 with make p4 P4FLAGS=-D%s=N")
	if err != nil {
		return c, err
	}
	for i, t := range c.Tables {
		switch t.Holds {
		case compiler.HoldsRingEntries:
			c.Tables[i].Raise = "push lb.p4's pipeline with lbc push/run --target bmv2 --ring-table-size N (to a switch that runs no pipeline: a new or restarted one; docs/p4.md)"
		case compiler.HoldsConnections:
			buckets := t.Size / sim.P4Ways
			f, err := sim.RegisterHeld(buckets, sim.P4Ways)
			if err != nil {
				return c, fmt.Errorf("conntrack of %d buckets: %w", buckets, err)
			}
			c.Tables[i].Table = fmt.Sprintf("%s (%d buckets × %d ways = %d slots, flows held at ≤ 1 %% steady-state loss; %d by a fill from empty)", t.Table, buckets, sim.P4Ways, t.Size, f.Fill)
			c.Tables[i].Size = f.Steady
		}
	}
	return c, nil
}

// ConntrackBuckets is the committed build's conntrack buckets (of
// sim.P4Ways ways each), read from its P4Info.
func ConntrackBuckets() (int, error) {
	info, err := runtime.ParseP4Info(p4.BMv2P4Info)
	if err != nil {
		return 0, fmt.Errorf("p4/build/lb.p4info.txtpb: %w", err)
	}
	c, err := P4Capacity("bmv2", info, "%s")
	if err != nil {
		return 0, err
	}
	for _, t := range c.Tables {
		if t.Holds == compiler.HoldsConnections {
			return t.Size / sim.P4Ways, nil
		}
	}
	return 0, fmt.Errorf("p4/build/lb.p4info.txtpb: no conntrack registers")
}

// P4Capacity reads the tables of the v1model or TNA program from its
// P4Info; raise is how to resize one, with %s for its size macro.
// Conntrack, when the P4Info lists its registers, is the ways of lb.p4's
// conntrack array (a cell per bucket of 4 ways), or of ct_sig in a build
// from before the ways were packed (a cell per way).
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
	// p4/tna/lb.p4's ring is banks ring0, ring1, … of one pool.
	if banks := ringTables(func(alias string) bool { _, ok := sizes["LbIngress."+alias]; return ok }); len(banks) > 0 && banks[0] != tRing {
		for _, b := range banks {
			sizes["LbIngress."+tRing] += sizes["LbIngress."+b]
		}
	}
	c := compiler.Capacity{Target: target}
	for _, t := range []struct {
		name, holds, macro string
		per                int // entries a cell holds; 0: 1
	}{
		{"LbIngress.vip_port", compiler.HoldsVIPPorts, "VIP_TABLE_SIZE", 0},
		{"LbIngress.vip_proto", compiler.HoldsVIPProtos, "VIP_TABLE_SIZE", 0},
		{"LbIngress.vip_addr", compiler.HoldsVIPAddrs, "VIP_TABLE_SIZE", 0},
		{"LbIngress.service", compiler.HoldsServices, "SERVICE_TABLE_SIZE", 0},
		{"LbIngress.ring", compiler.HoldsRingEntries, "RING_TABLE_SIZE", 0},
		{"LbIngress.backend", compiler.HoldsBackends, "BACKEND_TABLE_SIZE", 0},
		{"LbIngress.idle_ticks", compiler.HoldsIdleTimeout, "IDLE_TICKS_TABLE_SIZE", 0},
		{"LbIngress.conntrack", compiler.HoldsConnections, "CT_BUCKETS", 4},
		{"LbIngress.ct_sig", compiler.HoldsConnections, "CT_BUCKETS", 0},
	} {
		n, ok := sizes[t.name]
		if !ok {
			if t.holds == compiler.HoldsIdleTimeout || t.holds == compiler.HoldsConnections {
				continue // a table only one of the programs has
			}
			return compiler.Capacity{}, fmt.Errorf("%s: the P4Info has no %s (is it lb.p4's?)", target, t.name)
		}
		if t.per > 0 {
			n *= t.per
		}
		r := fmt.Sprintf(raise, t.macro)
		if t.macro == "CT_BUCKETS" {
			r += " (N buckets of 4 ways: the registers hold 4N entries)"
		}
		c.Tables = append(c.Tables, compiler.TableCapacity{Table: t.name, Holds: t.holds, Size: n, Raise: r})
	}
	return c, nil
}
