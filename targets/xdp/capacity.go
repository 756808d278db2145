package xdp

import (
	"fmt"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/fallback"
)

// Capacity is the size of the XDP program's tables, read from its maps
// (`lbc validate --target xdp`).
func Capacity() (compiler.Capacity, error) {
	sizes, err := fallback.MapSizes()
	if err != nil {
		return compiler.Capacity{}, err
	}
	c := compiler.Capacity{Target: "xdp"}
	for _, t := range []struct{ m, holds, raise string }{
		{"services", compiler.HoldsServices, "raise max_entries of the services map in fallback/bpf/lb.c (and of service_stats with it) and rebuild with make bpf"},
		{"vips", compiler.HoldsVIPs, "raise max_entries of the vips map in fallback/bpf/lb.c and rebuild with make bpf"},
		{"rings", compiler.HoldsRingEntries, "raise max_entries of the rings map in fallback/bpf/lb.c and rebuild with make bpf (fallback.LoadOptions.RingEntries sets it at load time)"},
		{"backends", compiler.HoldsBackends, "raise max_entries of the backends map in fallback/bpf/lb.c (and of backend_stats with it) and rebuild with make bpf"},
		{"conntrack", compiler.HoldsConnections, "raise max_entries of the conntrack map in fallback/bpf/lb.c and rebuild with make bpf (fallback.LoadOptions.ConntrackEntries sets it at load time); an LRU map evicts its least recently used entry when full"},
	} {
		n, ok := sizes[t.m]
		if !ok {
			return compiler.Capacity{}, fmt.Errorf("the XDP program has no %q map (has fallback/bpf/lb.c changed?)", t.m)
		}
		c.Tables = append(c.Tables, compiler.TableCapacity{Table: t.m + " map", Holds: t.holds, Size: int(n), Raise: t.raise})
	}
	return c, nil
}
