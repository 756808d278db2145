package fallback

import (
	"fmt"
)

// StatNames are the global counters of the `stats` map, in index order.
var StatNames = []string{"packets", "not-ours", "forward", "drop-no-backends", "drop-malformed", "drop-no-tunnel-source",
	"ct-hit", "ct-miss", "ct-new", "ct-untracked", "fragments", "icmp-errors", "too-big", "vlan"}

// ServiceCounters and BackendCounters are summed over CPUs.
type ServiceCounters struct{ Packets, Bytes, NewConns, Drops uint64 }

// BackendCounters count a backend's packets and new connections.
type BackendCounters struct{ Packets, NewConns uint64 }

// Stats is a snapshot of every counter.
type Stats struct {
	Global   map[string]uint64
	Services map[uint32]ServiceCounters
	Backends map[uint32]BackendCounters
}

// ReadStats sums the per-CPU counters.
func (dp *Datapath) ReadStats() (Stats, error) {
	s := Stats{Global: map[string]uint64{}, Services: map[uint32]ServiceCounters{}, Backends: map[uint32]BackendCounters{}}
	var per []lbCounters
	if err := dp.Stats.Lookup(uint32(0), &per); err != nil {
		return s, fmt.Errorf("read counters: %w", err)
	}
	for _, c := range per {
		for i, name := range StatNames {
			s.Global[name] += c.N[i]
		}
	}
	// Per-service and per-backend counters sit at their row's slot.
	if err := dp.loadIndex(nil, nil); err != nil {
		return s, err
	}
	var sv []svcStats
	for slot, id := range dp.svcSlots.bySlot {
		if err := dp.ServiceStats.Lookup(slot, &sv); err != nil {
			return s, fmt.Errorf("read counters of service %d: %w", id, err)
		}
		var c ServiceCounters
		for _, v := range sv {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.NewConns += v.NewConns
			c.Drops += v.Drops
		}
		s.Services[id] = c
	}
	var bv []beStats
	for slot, id := range dp.beSlots.bySlot {
		if err := dp.BackendStats.Lookup(slot, &bv); err != nil {
			return s, fmt.Errorf("read counters of backend %d: %w", id, err)
		}
		var c BackendCounters
		for _, v := range bv {
			c.Packets += v.Packets
			c.NewConns += v.NewConns
		}
		s.Backends[id] = c
	}
	return s, nil
}
