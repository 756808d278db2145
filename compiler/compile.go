package compiler

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
)

// Input is everything a compile reads. Compile is a pure function of it.
type Input struct {
	Config *Config
	// State is health and weights; nil means every endpoint healthy.
	State State
	// Prev is what the datapath holds now (nil on a first push). Compile
	// keeps its IDs and ring halves, bumps epochs on failover and failback
	// (R-EPOCH), and keeps removed backends draining (R-DRAIN).
	Prev *IR
	// Now is the caller's clock in seconds; it only dates draining
	// deadlines, so any monotonic origin will do.
	Now float64
	// NoRingReuse rebuilds every ring even when its inputs are unchanged
	// (tests use it to check that reuse gives the same tables).
	NoRingReuse bool
}

// ServiceResult is the per-service outcome that `lbc compile` reports.
type ServiceResult struct {
	Name     string
	Decision Decision
	// Members are the service's endpoints in configuration order; the
	// decision's member indexes refer to them.
	Members []Member
	Names   []string
	Ring    *Ring
}

// Result is a compiled configuration.
type Result struct {
	IR       *IR
	Services []ServiceResult
}

// Compile computes eligible sets, rings and the IR. The configuration must
// have passed validation.
func Compile(in Input) (*Result, error) {
	cfg := in.Config
	prev := in.Prev
	if prev == nil {
		prev = &IR{}
	}
	ir := &IR{NextServiceID: max(prev.NextServiceID, 1), NextBackendID: max(prev.NextBackendID, 1)}
	ir.TunnelSource4, _ = netip.ParseAddr(cfg.Tunnel.SourceIPv4)
	ir.TunnelSource6, _ = netip.ParseAddr(cfg.Tunnel.SourceIPv6)
	res := &Result{IR: ir}

	for si := range cfg.Services {
		s := &cfg.Services[si]
		old := prev.ServiceByName(s.Name)
		var id uint32
		if old != nil {
			id = old.ID
		} else {
			id = ir.NextServiceID
			ir.NextServiceID++
		}
		sr, err := compileService(in, s, id, old, prev, ir)
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		res.Services = append(res.Services, *sr)
	}
	ir.Sort()
	return res, nil
}

func compileService(in Input, s *Service, id uint32, old *ServiceRow, prev, ir *IR) (*ServiceResult, error) {
	st := in.State
	weighted := s.Weighted()
	var (
		members []Member
		names   []string
		eps     []*Endpoint
		groups  []*BackendGroup
	)
	for gi := range s.Backends {
		g := &s.Backends[gi]
		for ei := range g.Endpoints {
			e := &g.Endpoints[ei]
			m := Member{Primary: !g.Failover, Healthy: st.IsHealthy(e.Name)}
			if weighted {
				w, ok := st.WeightOf(e.Name)
				if !ok {
					return nil, fmt.Errorf("endpoint %q: WEIGHTED_MAGLEV needs its weight; give it in the health state (%s: {weight: 0..%d}) or let `lbc run` read it from the health check", e.Name, e.Name, MaxWeight)
				}
				if w < 0 || w > MaxWeight {
					return nil, fmt.Errorf("endpoint %q: weight %d out of range 0..%d", e.Name, w, MaxWeight)
				}
				m.Weight = w
			}
			members = append(members, m)
			names = append(names, e.Name)
			eps = append(eps, e)
			groups = append(groups, g)
		}
	}
	pol := Policy{Failover: s.FailoverPolicy != nil, FailoverRatio: s.FailoverRatio(), Weighted: weighted}
	if s.FailoverPolicy != nil {
		pol.DropTrafficIfUnhealthy = s.FailoverPolicy.DropTrafficIfUnhealthy
	}
	dec := Eligible(pol, members)

	// Backend rows: keep IDs by name, allocate new ones, keep removed
	// backends while they drain.
	oldByName := map[string]*BackendRow{}
	for i := range prev.Backends {
		if old != nil && prev.Backends[i].ServiceID == old.ID {
			oldByName[prev.Backends[i].Name] = &prev.Backends[i]
		}
	}
	idOf := map[string]uint32{}
	anyHealthy := false
	for i, e := range eps {
		var bid uint32
		if ob := oldByName[e.Name]; ob != nil {
			bid = ob.ID
		} else {
			bid = ir.NextBackendID
			ir.NextBackendID++
		}
		idOf[e.Name] = bid
		ip, _ := netip.ParseAddr(e.IP)
		row := BackendRow{ID: bid, ServiceID: id, Name: e.Name, IP: ip.Unmap(), Healthy: members[i].Healthy, Weight: members[i].Weight, Failover: groups[i].Failover}
		if hw, err := net.ParseMAC(e.MAC); err == nil && len(hw) == 6 {
			copy(row.MAC[:], hw)
		}
		anyHealthy = anyHealthy || row.Healthy
		ir.Backends = append(ir.Backends, row)
	}
	if drain := s.DrainingTimeout(); drain > 0 {
		for name, ob := range oldByName {
			if _, still := idOf[name]; still {
				continue
			}
			row := *ob
			if !row.Draining {
				row.Draining = true
				row.DrainDeadline = in.Now + float64(drain)
			}
			if in.Now < row.DrainDeadline {
				ir.Backends = append(ir.Backends, row)
			}
		}
	}

	// The ring over the eligible set, reused when its inputs are unchanged:
	// a health change in one service must not rebuild every service's ring.
	rm := make([]RingMember, len(dec.Members))
	for k, mi := range dec.Members {
		rm[k] = RingMember{Name: names[mi], Weight: members[mi].Weight}
	}
	ringWeighted := weighted && !dec.Unweighted
	ringKey := ringInputsKey(rm, idOf, s.Ring(), ringWeighted, s.RingFill)
	var ring *Ring
	var slots []uint32
	if old != nil && old.RingKey == ringKey && !in.NoRingReuse {
		if or := prev.Ring(old.ID); or != nil && len(or.Halves[old.ActiveHalf]) == s.Ring() {
			slots = or.Halves[old.ActiveHalf]
			if ring = or.view; ring == nil || or.viewKey != ringKey {
				ring = ringFromSlots(rm, slots, idOf, s.RingFill)
			}
		}
	}
	if ring == nil {
		var err error
		if ring, err = BuildRing(rm, s.Ring(), ringWeighted, s.RingFill); err != nil {
			return nil, err
		}
		ids := make([]uint32, len(ring.Members))
		for k, x := range ring.Members {
			ids[k] = idOf[x.Name]
		}
		slots = make([]uint32, len(ring.Slots))
		for i, o := range ring.Slots {
			if o >= 0 {
				slots[i] = ids[o]
			}
		}
	}

	row := ServiceRow{
		ID:             id,
		Name:           s.Name,
		RingSize:       uint32(s.Ring()),
		IdleTimeoutSec: uint32(s.IdleTimeout()),
		SynNew:         SynNew(s.TrackingMode(), s.Affinity()),
		NoBackends:     len(dec.Members) == 0,
		AllUnhealthy:   !anyHealthy,
		Decision:       dec.Kind,
		Rule:           dec.Rule,
		FailoverSide:   dec.FailoverSide(members),
		RingKey:        ringKey,
	}
	if s.Encap() == EncapL2DSR {
		row.Encap = EncapKindL2DSR
	}
	for c := Class(0); c < NumClasses; c++ {
		row.Classes[c] = PolicyFor(c, s.Affinity(), s.TrackingMode(), s.Persistence())
	}
	for _, mi := range dec.Members {
		row.Eligible = append(row.Eligible, names[mi])
	}
	sort.Strings(row.Eligible)

	rr := RingRows{ServiceID: id, view: ring, viewKey: ringKey}
	var oldRing *RingRows
	if old != nil {
		oldRing = prev.Ring(old.ID)
		row.Epoch = old.Epoch
		if row.NoBackends {
			// An empty set has no side; remember the last one.
			row.FailoverSide = old.FailoverSide
		} else if old.FailoverSide != row.FailoverSide && old.Decision != "" && s.FailoverPolicy != nil && s.FailoverPolicy.DisableConnectionDrainOnFailover {
			row.Epoch = old.Epoch + 1 // R-EPOCH: failover or failback flushes entries
		}
	}
	switch {
	case row.NoBackends && oldRing != nil:
		// Nothing to look up; keep the ring as it is so that the next
		// non-empty set diffs against it.
		rr.Halves = oldRing.Halves
		row.ActiveHalf = old.ActiveHalf
		row.RingSize = old.RingSize
	case oldRing == nil:
		rr.Halves = [2][]uint32{slots, append([]uint32(nil), slots...)}
	case sameSlots(oldRing.Halves[old.ActiveHalf], slots):
		rr.Halves = oldRing.Halves
		row.ActiveHalf = old.ActiveHalf
	default:
		// Write the inactive half, then flip (design decision 4).
		row.ActiveHalf = 1 - old.ActiveHalf
		rr.Halves[old.ActiveHalf] = oldRing.Halves[old.ActiveHalf]
		rr.Halves[row.ActiveHalf] = slots
	}
	ir.Rings = append(ir.Rings, rr)
	ir.Services = append(ir.Services, row)

	vip := s.VIPAddr()
	switch {
	case s.Protocol == ProtoL3Default:
		ir.VIPs = append(ir.VIPs, VIPRow{Key: VIPKey{VIP: vip, Kind: MatchAnyProto}, ServiceID: id})
	case s.Ports.All:
		ir.VIPs = append(ir.VIPs, VIPRow{Key: VIPKey{VIP: vip, Proto: protoNumber(s.Protocol), Kind: MatchAllPorts}, ServiceID: id})
	default:
		for _, p := range s.Ports.List {
			ir.VIPs = append(ir.VIPs, VIPRow{Key: VIPKey{VIP: vip, Proto: protoNumber(s.Protocol), Port: p, Kind: MatchPort}, ServiceID: id})
		}
	}
	return &ServiceResult{Name: s.Name, Decision: dec, Members: members, Names: names, Ring: ring}, nil
}

func protoNumber(p string) uint8 {
	if p == ProtoUDP {
		return IPProtoUDP
	}
	return IPProtoTCP
}

// SynNew reports whether a TCP SYN skips conntrack (R-CT-1, R-CT-2).
func SynNew(mode, affinity string) bool {
	if mode != TrackPerSession {
		return true
	}
	return affinity == AffinityNone || affinity == AffinityClientIPPortProto
}

// PolicyFor derives a protocol class's tuples and persistence from the
// service's settings (R-AFF, R-CT-3, R-TRK, R-PERSIST).
func PolicyFor(c Class, affinity, mode, persistence string) ClassPolicy {
	var p ClassPolicy
	fiveTupleAff := affinity == AffinityNone || affinity == AffinityClientIPPortProto
	// R-AFF
	switch {
	case affinity == AffinityClientIP:
		p.Affinity = Tuple2
	case affinity == AffinityClientIPProto:
		p.Affinity = Tuple3
	case c == ClassTCP || c == ClassUDP:
		p.Affinity = Tuple5
	default:
		p.Affinity = Tuple3
	}
	// R-CT-3: which classes are trackable at all.
	trackable := c == ClassTCP || ((c == ClassUDP || c == ClassTunnel) && affinity != AffinityNone)
	// R-TRK
	if trackable {
		portful := c == ClassTCP || c == ClassUDP
		switch {
		case affinity == AffinityNone:
			p.Track = Tuple5 // TCP only
		case mode != TrackPerSession || affinity == AffinityClientIPPortProto:
			if portful {
				p.Track = Tuple5
			} else {
				p.Track = Tuple3
			}
		case affinity == AffinityClientIP:
			p.Track = Tuple2
		default: // CLIENT_IP_PROTO, PER_SESSION
			p.Track = Tuple3
		}
	}
	// R-PERSIST
	switch persistence {
	case PersistNever:
	case PersistAlways:
		p.Persist = trackable && mode != TrackPerSession
	default:
		if c == ClassTCP {
			p.Persist = mode != TrackPerSession || fiveTupleAff
		}
	}
	return p
}

// ringInputsKey hashes everything a ring depends on (FNV-1a over size,
// weighting, fill, and each member's name, weight and backend ID in name
// order).
func ringInputsKey(rm []RingMember, idOf map[string]uint32, m int, weighted bool, fill RingFill) uint64 {
	sorted := append([]RingMember(nil), rm...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	mix(uint64(m))
	if weighted {
		mix(1)
	} else {
		mix(0)
	}
	mix(fill.code())
	for _, x := range sorted {
		mix(nameHash(x.Name))
		mix(uint64(x.Weight))
		mix(uint64(idOf[x.Name]))
	}
	if h == 0 {
		h = 1 // zero means unknown
	}
	return h
}

// sameSlots reports whether two rings hold the same slots; a reused ring is
// the very slice, which needs no comparison of 65537 slots.
func sameSlots(a, b []uint32) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// ringFromSlots rebuilds the Ring view (members, counts) of reused slots.
func ringFromSlots(rm []RingMember, slots []uint32, idOf map[string]uint32, fill RingFill) *Ring {
	ms := append([]RingMember(nil), rm...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	// Backend IDs of one service are few and close together: index a
	// slice by ID rather than hashing 65537 times.
	var maxID uint32
	for _, x := range ms {
		maxID = max(maxID, idOf[x.Name])
	}
	byID := make([]int32, maxID+1)
	for i := range byID {
		byID[i] = -1
	}
	for i, x := range ms {
		byID[idOf[x.Name]] = int32(i)
	}
	r := &Ring{Slots: make([]int32, len(slots)), Members: ms, Counts: make([]int, len(ms)), Fill: fill.orDefault()}
	for i, id := range slots {
		o := int32(-1)
		if id <= maxID {
			o = byID[id]
		}
		if o >= 0 {
			r.Counts[o]++
		}
		r.Slots[i] = o
	}
	return r
}
