package compiler

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/lbc-dev/lbc/internal/spelling"
)

// What a datapath table holds, as CheckCapacity counts it from a
// configuration.
const (
	HoldsServices    = "services"          // one row per service
	HoldsVIPs        = "VIP rows"          // one per (VIP, protocol, port), of every match kind
	HoldsVIPPorts    = "VIP port rows"     // one per (VIP, protocol, port) of a port list
	HoldsVIPProtos   = "VIP protocol rows" // one per service with ports: ALL
	HoldsVIPAddrs    = "VIP address rows"  // one per L3_DEFAULT service
	HoldsRingEntries = "ring entries"      // each ring once, plus room for the largest to change (RingEntriesFor)
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
	rings := make([]int, 0, len(cfg.Services))
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
		rings = append(rings, s.Ring())
		for _, g := range s.Backends {
			u[HoldsBackends] += len(g.Endpoints)
		}
		idle[s.IdleTimeout()] = true
	}
	u[HoldsRingEntries] = RingEntriesFor(rings)
	u[HoldsVIPs] = u[HoldsVIPAddrs] + u[HoldsVIPProtos] + u[HoldsVIPPorts]
	u[HoldsIdleTimeout] = len(idle)
	u[HoldsConnections] = cfg.Limits.MaxConnections
	return u
}

// CheckCapacity reports every table of c that the configuration does not
// fit, naming the table, its size, what the configuration needs and how to
// raise it. It runs after Load or Validate.
//
// Rings that do not fit are one problem, however many services there are:
// by how much, the largest rings, and the finest ringPrecision at which the
// services with ringSize auto fit (ringFit). The target's ring rule
// (CheckTarget: a power of two on tofino) is reported per service, at the
// ringSize to change (validate runs CheckCapacity instead of CheckTarget
// when it knows the target's tables).
func CheckCapacity(cfg *Config, c Capacity) Problems { return checkCapacity(cfg, c).problems() }

// CheckCapacity is CheckCapacity with each problem's file and line: the
// ringSize of a service, limits.maxConnections, or the services list.
func (d *Decoded) CheckCapacity(c Capacity) Problems { return d.place(checkCapacity(d.Config, c)) }

func checkCapacity(cfg *Config, c Capacity) issueList {
	u := Usage(cfg)
	var is issueList
	target := at{label: "--target " + c.Target}
	for _, t := range c.Tables {
		need := u[t.Holds]
		if need <= t.Size {
			continue
		}
		msg := fmt.Sprintf("%d %s, but its %s holds %d", need, t.Holds, t.Table, t.Size)
		where := target
		switch t.Holds {
		case HoldsConnections:
			msg = fmt.Sprintf("limits.maxConnections %d, but its %s holds %d %s", need, t.Table, t.Size, t.Holds)
			where.keys = []any{"limits", "maxConnections"}
		case HoldsRingEntries:
			msg = ringsMsg(cfg, c.Target, t, need)
			where.keys = []any{"services"}
		default:
			where.keys = []any{"services"}
		}
		switch {
		case t.Raise == "":
		case t.Holds == HoldsRingEntries:
			msg += "; or " + t.Raise // after what fits without it
		default:
			msg += "; " + t.Raise
		}
		is = append(is, issue{keys: where.keys, path: where.label, msg: msg})
	}
	return append(is, checkTarget(cfg, c.Target)...)
}

// serviceAt is the position of the i-th service, named as validate names it.
func serviceAt(cfg *Config, i int) at {
	return at{}.item("services", i, "service", cfg.Services[i].Name)
}

// RingEntriesFor is the ring table a datapath needs for rings of these
// sizes: each ring once (at rest a service holds one half), plus room for
// the largest to be written beside the one it replaces. DiffWithin takes
// the services a push changes in waves that fit that room, so it is enough
// however many change at once.
func RingEntriesFor(sizes []int) int {
	n, largest := 0, 0
	for _, m := range sizes {
		n += m
		largest = max(largest, m)
	}
	return n + largest
}

// ringsMsg says by how much the rings, which need need entries, overflow t, which are largest, and
// what fits.
func ringsMsg(cfg *Config, target string, t TableCapacity, need int) string {
	msg := fmt.Sprintf("the rings need %d entries (each ring once, and room for the largest to change), %d more than its %s holds (%d); %s",
		need, need-t.Size, t.Table, t.Size, largestRings(cfg, 3))
	auto, fixed := 0, 0
	for i := range cfg.Services {
		if s := &cfg.Services[i]; s.RingAuto() {
			auto++
		} else {
			fixed += ringOn(s, target)
		}
	}
	if auto == 0 {
		return msg + "; lower ringSize of the largest, or set ringSize: auto"
	}
	p, total, ok := ringFit(cfg, target, t.Size)
	if !ok {
		msg += fmt.Sprintf("; even at ringPrecision %g the %s with ringSize auto do not fit", MaxRingPrecision, spelling.Count(auto, "service"))
		if fixed > 0 {
			msg += fmt.Sprintf(" beside the %d entries of the services with an explicit ringSize: lower those, or set them to auto", fixed)
		}
		return msg
	}
	return msg + fmt.Sprintf("; the finest precision that fits is ringPrecision: %g on the %s with ringSize auto (every endpoint's share within %g %% of its ideal; the rings then take %d of %d entries)",
		p, spelling.Count(auto, "service"), 100*p, total, t.Size)
}

// ringOn is a service's ring size as target takes it: an explicit size that
// Tofino cannot take counts as the power of two CheckTarget proposes.
func ringOn(s *Service, target string) int {
	m := s.Ring()
	if target == TargetTofino && m&(m-1) != 0 {
		return NearestPow2(m)
	}
	return m
}

// ringFit finds the finest ringPrecision p (rounded up to two significant
// digits, so that the value shown fits too) at which the rings fit entries
// when every service with ringSize auto uses at least p, the others keeping
// their sizes. total is the entries the rings then take; ok is false when
// not even MaxRingPrecision fits.
func ringFit(cfg *Config, target string, entries int) (p float64, total int, ok bool) {
	sizes := make([]int, len(cfg.Services))
	totalAt := func(p float64) int {
		for i := range cfg.Services {
			s := &cfg.Services[i]
			if s.RingAuto() {
				sizes[i] = AutoRingSize(s.EndpointCount(), max(p, s.Precision()))
			} else {
				sizes[i] = ringOn(s, target)
			}
		}
		return RingEntriesFor(sizes)
	}
	// An auto ring's size changes only where p crosses n/m for a power of
	// two m: those are the candidates, and total falls as p grows.
	var cands []float64
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if !s.RingAuto() {
			continue
		}
		n := s.EndpointCount()
		for m := AutoRingSize(n, s.Precision()); m >= 1; m /= 2 {
			if c := roundUp2(PrecisionOf(n, m)); c <= MaxRingPrecision {
				cands = append(cands, c)
			}
		}
	}
	cands = append(cands, MaxRingPrecision)
	sort.Float64s(cands)
	i := sort.Search(len(cands), func(i int) bool { return totalAt(cands[i]) <= entries })
	if i == len(cands) {
		return 0, 0, false
	}
	return cands[i], totalAt(cands[i]), true
}

// roundUp2 rounds p up to two significant digits.
func roundUp2(p float64) float64 {
	if p <= 0 {
		return p
	}
	e := math.Pow(10, math.Floor(math.Log10(p))-1)
	r := math.Ceil(p/e-1e-9) * e
	// Print-stable: 0.0078125 becomes 0.0079, not 0.007900000000000001.
	v, _ := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 2, 64), 64)
	if v < p {
		v = r
	}
	return v
}

// largestRings names the services with the largest rings, for messages:
// the k largest sizes, each with its services (a count and the first name
// when several share it).
func largestRings(cfg *Config, k int) string {
	idx := make([]int, len(cfg.Services))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return cfg.Services[idx[a]].Ring() > cfg.Services[idx[b]].Ring() })
	how := func(s *Service) string {
		if s.RingAuto() {
			return fmt.Sprintf("auto: %s at %g %%", spelling.Count(s.EndpointCount(), "endpoint"), 100*s.Precision())
		}
		return "ringSize"
	}
	type group struct {
		first       *Service
		size, count int
		how         string
	}
	var gs []group
	for _, i := range idx {
		s := &cfg.Services[i]
		if n := len(gs); n > 0 && gs[n-1].size == s.Ring() && gs[n-1].how == how(s) {
			gs[n-1].count++
			continue
		}
		gs = append(gs, group{first: s, size: s.Ring(), count: 1, how: how(s)})
	}
	out := "the largest rings: "
	for j, g := range gs {
		if j == k {
			rest := 0
			for _, g := range gs[k:] {
				rest += g.count
			}
			out += fmt.Sprintf(", and %d more services", rest)
			break
		}
		if j > 0 {
			out += ", "
		}
		if g.count == 1 {
			out += fmt.Sprintf("%q %d slots (%s)", g.first.Name, g.size, g.how)
		} else {
			out += fmt.Sprintf("%d services of %d slots (%s; %q, ...)", g.count, g.size, g.how, g.first.Name)
		}
	}
	return out
}
