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
//
// Rings are reported per service, with the ringSize to set: the target's
// ring rule (CheckTarget: a power of two on tofino) and the ring table's
// size are met together, by the sizes ringPlan chooses, so one problem per
// service says everything to change there (validate runs CheckCapacity
// instead of CheckTarget when it knows the target's tables). Only when no
// such sizes exist is the ring table reported as a whole, beside
// CheckTarget's problems.
func CheckCapacity(cfg *Config, c Capacity) Problems { return checkCapacity(cfg, c).problems() }

// CheckCapacity is CheckCapacity with each problem's file and line: the
// ringSize of a service (or the service, when it takes the default),
// limits.maxConnections, or the services list.
func (d *Decoded) CheckCapacity(c Capacity) Problems { return d.place(checkCapacity(d.Config, c)) }

func checkCapacity(cfg *Config, c Capacity) issueList {
	u := Usage(cfg)
	var is issueList
	target := at{label: "--target " + c.Target}
	ringTable := TableCapacity{Holds: HoldsRingEntries}
	for _, t := range c.Tables {
		if t.Holds == HoldsRingEntries {
			ringTable = t
		}
	}
	plan, fits := ringPlan(cfg, c.Target, ringTable.Size)
	for _, t := range c.Tables {
		need := u[t.Holds]
		if need <= t.Size || t.Holds == HoldsRingEntries && fits {
			continue
		}
		msg := fmt.Sprintf("%d %s, but its %s holds %d", need, t.Holds, t.Table, t.Size)
		where := target
		switch t.Holds {
		case HoldsConnections:
			msg = fmt.Sprintf("limits.maxConnections %d, but its %s holds %d %s", need, t.Table, t.Size, t.Holds)
			where.keys = []any{"limits", "maxConnections"}
		case HoldsRingEntries:
			msg += " (" + ringUsers(cfg) + "; no ringSize of at least " + fmt.Sprint(MinSlotsPerBackend) + " slots per endpoint fits)"
			where.keys = []any{"services"}
		default:
			where.keys = []any{"services"}
		}
		if t.Raise != "" {
			msg += "; " + t.Raise
		}
		is = append(is, issue{keys: where.keys, path: where.label, msg: msg})
	}
	if !fits {
		// No sizes fit the table: the target's rule still holds per ring.
		return append(is, checkTarget(cfg, c.Target)...)
	}
	total := 0
	for _, m := range plan {
		total += 2 * m
	}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		m := s.Ring()
		if plan[i] == m {
			continue
		}
		a := serviceAt(cfg, i).field("ringSize")
		was := fmt.Sprint(m)
		if s.RingSize == 0 {
			was += " (the default)"
		}
		msg, sep := was, ":"
		if c.Target == TargetTofino && m&(m-1) != 0 {
			msg += " is not a power of two: --target tofino takes the ring slot from the hash bits (R-MAGLEV-1)"
			sep = ", and"
		}
		if need := u[HoldsRingEntries]; need > ringTable.Size {
			msg += fmt.Sprintf("%s the rings need %d entries (2 × ringSize per service: both halves) and --target %s's %s holds %d", sep, need, c.Target, ringTable.Table, ringTable.Size)
		}
		msg += fmt.Sprintf("; set ringSize: %d", plan[i])
		if ringTable.Size > 0 {
			msg += fmt.Sprintf(" (the rings then take %d of %d entries)", total, ringTable.Size)
		}
		if u[HoldsRingEntries] > ringTable.Size && ringTable.Raise != "" {
			msg += "; or " + ringTable.Raise
		}
		is = append(is, issue{keys: a.keys, path: a.label, msg: msg})
	}
	return is
}

// serviceAt is the position of the i-th service, named as validate names it.
func serviceAt(cfg *Config, i int) at {
	return at{}.item("services", i, "service", cfg.Services[i].Name)
}

// ringPlan returns the ringSize per service that the target takes and that
// fits entries ring entries (0: any number): each size as it is, made a
// power of two on tofino (NearestPow2, as CheckTarget says), then the
// largest ring halved to the power of two below it, again and again,
// until both halves of every ring fit, no ring going below 16 slots or
// MinSlotsPerBackend per endpoint. fits is false when no such sizes exist.
func ringPlan(cfg *Config, target string, entries int) (sizes []int, fits bool) {
	sizes = make([]int, len(cfg.Services))
	floor := make([]int, len(cfg.Services))
	total := 0
	for i := range cfg.Services {
		s := &cfg.Services[i]
		m := s.Ring()
		if target == TargetTofino && m&(m-1) != 0 {
			m = NearestPow2(m)
		}
		n := 0
		for _, g := range s.Backends {
			n += len(g.Endpoints)
		}
		sizes[i], floor[i] = m, max(16, MinSlotsPerBackend*n)
		total += 2 * m
	}
	for entries > 0 && total > entries {
		big := -1
		for i, m := range sizes {
			if below := pow2Below(m); below >= floor[i] && (big < 0 || m > sizes[big]) {
				big = i
			}
		}
		if big < 0 {
			return sizes, false
		}
		below := pow2Below(sizes[big])
		total -= 2 * (sizes[big] - below)
		sizes[big] = below
	}
	return sizes, true
}

// pow2Below is the largest power of two below n.
func pow2Below(n int) int {
	p := 1
	for p*2 < n {
		p *= 2
	}
	return p
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
