package compiler

import (
	"fmt"
	"sort"
)

// What a datapath table holds, as CheckCapacity counts it from a
// configuration.
const (
	HoldsServices    = "services"          // one row per service
	HoldsVIPs        = "VIP rows"          // one per (VIP, protocol, port), of every match kind
	HoldsVIPPorts    = "VIP port rows"     // one per (VIP, protocol, port) of a port list
	HoldsVIPProtos   = "VIP protocol rows" // one per service with ports: ALL
	HoldsVIPAddrs    = "VIP address rows"  // one per L3_DEFAULT service
	HoldsRingEntries = "ring entries"      // 2 × ringSize per service: both halves (design decision 4)
	HoldsBackends    = "backends"          // one row per endpoint of each service (and removed ones while they drain)
	HoldsIdleTimeout = "idle timeouts"     // one per distinct idleTimeoutSec (TNA's idle_ticks)
	HoldsConnections = "connections"       // conntrack entries (limits.maxConnections)
)

// TableCapacity is one table of a datapath, as its program sizes it.
type TableCapacity struct {
	Table string // its name in the program: "services" (BPF map), "LbIngress.ring" (P4 table)
	Holds string // Holds* constant
	Size  int
	// Raise says how to make the table larger.
	Raise string
}

// Capacity is the size of a datapath's tables, read from where its program
// defines them (BPF map sizes, P4Info, the P4 source), never copied.
type Capacity struct {
	Target string
	Tables []TableCapacity
}

// Usage counts the rows a configuration needs in each kind of table
// (Holds*), as Compile emits them.
func Usage(cfg *Config) map[string]int {
	u := map[string]int{}
	idle := map[int]bool{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		u[HoldsServices]++
		switch {
		case s.Protocol == ProtoL3Default:
			u[HoldsVIPAddrs]++
		case s.Ports.All:
			u[HoldsVIPProtos]++
		default:
			u[HoldsVIPPorts] += len(s.Ports.List)
		}
		u[HoldsRingEntries] += 2 * s.Ring()
		for _, g := range s.Backends {
			u[HoldsBackends] += len(g.Endpoints)
		}
		idle[s.IdleTimeout()] = true
	}
	u[HoldsVIPs] = u[HoldsVIPAddrs] + u[HoldsVIPProtos] + u[HoldsVIPPorts]
	u[HoldsIdleTimeout] = len(idle)
	u[HoldsConnections] = cfg.Limits.MaxConnections
	return u
}

// CheckCapacity reports every table of c that the configuration does not
// fit, naming the table, its size, what the configuration needs and how to
// raise it. It runs after Load or Validate.
func CheckCapacity(cfg *Config, c Capacity) Problems {
	u := Usage(cfg)
	var ps Problems
	for _, t := range c.Tables {
		need := u[t.Holds]
		if need <= t.Size {
			continue
		}
		msg := fmt.Sprintf("%d %s, but its %s holds %d", need, t.Holds, t.Table, t.Size)
		switch t.Holds {
		case HoldsConnections:
			msg = fmt.Sprintf("limits.maxConnections %d, but its %s holds %d %s", need, t.Table, t.Size, t.Holds)
		case HoldsRingEntries:
			msg += " (" + ringUsers(cfg) + ")"
		}
		if t.Raise != "" {
			msg += "; " + t.Raise
		}
		ps = append(ps, Problem{Path: "--target " + c.Target, Msg: msg})
	}
	return ps
}

// ringUsers names the services with the largest rings, for the message.
func ringUsers(cfg *Config) string {
	type sz struct {
		name string
		m    int
	}
	var all []sz
	for i := range cfg.Services {
		all = append(all, sz{cfg.Services[i].Name, cfg.Services[i].Ring()})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].m > all[j].m })
	out := ""
	for i, x := range all {
		if i == 3 {
			out += fmt.Sprintf(", and %d more", len(all)-3)
			break
		}
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%q ringSize %d", x.name, x.m)
	}
	return "the largest rings: " + out
}
