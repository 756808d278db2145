package compiler

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"time"
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
	// Now is the compile clock: it dates deadlines (BackendRow.Deadline),
	// so any origin will do as long as the targets map the same clock
	// (the controller uses time since the Unix epoch, replay the trace's).
	Now time.Duration
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
	px := prev.Index()
	ir := &IR{NextServiceID: max(prev.NextServiceID, 1), NextBackendID: max(prev.NextBackendID, 1)}
	ir.TunnelSource4, _ = netip.ParseAddr(cfg.Tunnel.SourceIPv4)
	ir.TunnelSource6, _ = netip.ParseAddr(cfg.Tunnel.SourceIPv6)
	ir.MTU = uint16(cfg.Tunnel.MTU)
	res := &Result{IR: ir, Services: make([]ServiceResult, 0, len(cfg.Services))}

	orphaned := orphans(prev, px)
	for si := range cfg.Services {
		s := &cfg.Services[si]
		c := &serviceCompiler{in: in, s: s, prev: px, ir: ir, old: px.ServiceByName(s.Name)}
		if c.old != nil {
			c.id = c.old.ID
		} else if id, rows, ok := adoptOrphans(s, orphaned); ok {
			c.id, c.adopted = id, rows // an add cut short: orphans.go
			ir.NextServiceID = max(ir.NextServiceID, id+1)
		} else {
			c.id = ir.NextServiceID
			ir.NextServiceID++
		}
		sr, err := c.compile()
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		res.Services = append(res.Services, *sr)
	}
	ir.Sort()
	return res, nil
}

// serviceCompiler compiles one service into ir, step by step: members and
// their eligible set, backend rows (with the R-PERSIST-CAP deadlines),
// draining rows (R-DRAIN), the ring (reused when unchanged), the service
// row (side and epoch), the ring's halves, and the VIP rows.
type serviceCompiler struct {
	in  Input
	s   *Service
	id  uint32
	old *ServiceRow // the service in Prev, nil when new
	// adopted are the backend rows of a new service that an add cut
	// short wrote, by endpoint name (orphans.go); nil otherwise.
	adopted map[string]*BackendRow
	prev    *Index
	ir      *IR

	members []Member
	names   []string
	eps     []*Endpoint
	groups  []*BackendGroup
	dec     Decision
	// idOf maps the service's endpoint names to their backend IDs.
	idOf       map[string]uint32
	anyHealthy bool
	ring       *Ring
	slots      []uint32
	ringKey    uint64
}

func (c *serviceCompiler) compile() (*ServiceResult, error) {
	if err := c.collectMembers(); err != nil {
		return nil, err
	}
	pol := Policy{Failover: c.s.FailoverPolicy != nil, FailoverRatio: c.s.FailoverRatio(), Weighted: c.s.Weighted()}
	if c.s.FailoverPolicy != nil {
		pol.DropTrafficIfUnhealthy = c.s.FailoverPolicy.DropTrafficIfUnhealthy
	}
	c.dec = Eligible(pol, c.members)
	c.backendRows()
	c.drainingRows()
	if err := c.buildRing(); err != nil {
		return nil, err
	}
	row := c.serviceRow()
	c.ir.Rings = append(c.ir.Rings, c.ringRows(&row))
	c.ir.Services = append(c.ir.Services, row)
	c.vipRows()
	return &ServiceResult{Name: c.s.Name, Decision: c.dec, Members: c.members, Names: c.names, Ring: c.ring}, nil
}

// collectMembers lists the endpoints in configuration order with their
// health and weight, as the eligible-set rules read them.
func (c *serviceCompiler) collectMembers() error {
	st := c.in.State
	weighted := c.s.Weighted()
	for gi := range c.s.Backends {
		g := &c.s.Backends[gi]
		for ei := range g.Endpoints {
			e := &g.Endpoints[ei]
			m := Member{Primary: !g.Failover, Healthy: st.IsHealthy(e.Name)}
			if weighted {
				w, ok := st.WeightOf(e.Name)
				if !ok {
					return fmt.Errorf("endpoint %q: WEIGHTED_MAGLEV needs its weight; give it in the health state (a file for --health with the line %s: {weight: 0..%d}) or let `lbc run` read it from the health check", e.Name, e.Name, MaxWeight)
				}
				if w < 0 || w > MaxWeight {
					return fmt.Errorf("endpoint %q: weight %d out of range 0..%d", e.Name, w, MaxWeight)
				}
				m.Weight = w
			}
			c.members = append(c.members, m)
			c.names = append(c.names, e.Name)
			c.eps = append(c.eps, e)
			c.groups = append(c.groups, g)
		}
	}
	return nil
}

// oldBackend returns the row of the named backend of this service in Prev.
func (c *serviceCompiler) oldBackend(name string) *BackendRow {
	if c.old == nil {
		return c.adopted[name]
	}
	return c.prev.BackendOf(c.old.ID, name)
}

// backendRows writes one row per endpoint, keeping IDs by name and
// allocating new ones. Under loadBalancingScheme INTERNAL a backend outside
// the eligible set gets the R-PERSIST-CAP deadline.
func (c *serviceCompiler) backendRows() {
	eligible := make([]bool, len(c.members))
	for _, mi := range c.dec.Members {
		eligible[mi] = true
	}
	c.idOf = make(map[string]uint32, len(c.eps))
	for i, e := range c.eps {
		ob := c.oldBackend(e.Name)
		var bid uint32
		if ob != nil {
			bid = ob.ID
		} else {
			bid = c.ir.NextBackendID
			c.ir.NextBackendID++
		}
		c.idOf[e.Name] = bid
		ip, _ := netip.ParseAddr(e.IP)
		row := BackendRow{ID: bid, ServiceID: c.id, Name: e.Name, IP: ip.Unmap(), Healthy: c.members[i].Healthy, Weight: c.members[i].Weight, Failover: c.groups[i].Failover}
		if hw, err := net.ParseMAC(e.MAC); err == nil && len(hw) == 6 {
			copy(row.MAC[:], hw)
		}
		if c.s.Scheme() == SchemeInternal && !eligible[i] {
			row.Deadline, row.DeadlineRule = c.persistCap(e.Name, ob, row.Healthy), RulePersistCap
		}
		c.anyHealthy = c.anyHealthy || row.Healthy
		c.ir.Backends = append(c.ir.Backends, row)
	}
}

// persistCap is the R-PERSIST-CAP deadline of a backend outside the
// eligible set (unhealthy, or healthy on the inactive side or at weight
// 0): PersistCap after the moment it left the set of healthy eligible
// backends. A deadline already set in Prev is kept: every compile that
// finds the backend eligible clears it, so a kept one dates the current
// stretch. Otherwise the stretch starts now, or, when the backend was
// healthy in Prev and is unhealthy now, at its health transition as the
// state records it (State.Since: the controller's probe time, replay's
// event time). Without that record (a health file, a read-back that lost
// the deadline) it is derived from Prev and Now: the compile's time.
func (c *serviceCompiler) persistCap(name string, ob *BackendRow, healthy bool) time.Duration {
	if ob != nil && ob.DeadlineRule == RulePersistCap && ob.Deadline != 0 {
		return ob.Deadline
	}
	since := c.in.Now
	if t, ok := c.in.State.SinceOf(name); ok && !healthy && (ob == nil || ob.Healthy) && t <= since {
		since = t
	}
	return since + PersistCap
}

// drainingRows keeps the rows of backends removed from the configuration
// until their deadline (R-DRAIN: removal time + drainingTimeoutSec; under
// INTERNAL at most the R-PERSIST-CAP deadline, for a draining backend is
// outside the eligible set too). The datapath enforces the deadline; the
// row goes at the first compile at or after it (housekeeping).
func (c *serviceCompiler) drainingRows() {
	drain := c.s.DrainingTimeout()
	if drain <= 0 || c.old == nil {
		return
	}
	for _, ob := range c.prev.BackendsOf(c.old.ID) {
		if _, still := c.idOf[ob.Name]; still {
			continue
		}
		row := *ob
		if !row.Draining {
			row.Draining = true
			dl, rule := c.in.Now+time.Duration(drain)*time.Second, RuleDrain
			if c.s.Scheme() == SchemeInternal {
				capDL := c.in.Now + PersistCap
				if ob.DeadlineRule == RulePersistCap && ob.Deadline != 0 {
					capDL = ob.Deadline
				}
				if capDL < dl {
					dl, rule = capDL, RulePersistCap
				}
			}
			row.Deadline, row.DeadlineRule = dl, rule
		}
		if c.in.Now < row.Deadline {
			c.ir.Backends = append(c.ir.Backends, row)
		}
	}
}

// buildRing builds the ring over the eligible set, or reuses the active
// half of Prev when its inputs are unchanged: a health change in one
// service must not rebuild every service's ring.
func (c *serviceCompiler) buildRing() error {
	rm := make([]RingMember, len(c.dec.Members))
	for k, mi := range c.dec.Members {
		rm[k] = RingMember{Name: c.names[mi], Weight: c.members[mi].Weight}
	}
	ringWeighted := c.s.Weighted() && !c.dec.Unweighted
	c.ringKey = ringInputsKey(rm, c.idOf, c.s.Ring(), ringWeighted, c.s.RingFill)
	if c.old != nil && c.old.RingKey == c.ringKey && !c.in.NoRingReuse {
		if or := c.prev.Ring(c.old.ID); or != nil && len(or.Halves[c.old.ActiveHalf]) == c.s.Ring() {
			c.slots = or.Halves[c.old.ActiveHalf]
			if c.ring = or.view; c.ring == nil || or.viewKey != c.ringKey {
				c.ring = ringFromSlots(rm, c.slots, c.idOf, c.s.RingFill)
			}
			return nil
		}
	}
	ring, err := BuildRing(rm, c.s.Ring(), ringWeighted, c.s.RingFill)
	if err != nil {
		return err
	}
	ids := make([]uint32, len(ring.Members))
	for k, x := range ring.Members {
		ids[k] = c.idOf[x.Name]
	}
	c.slots = make([]uint32, len(ring.Slots))
	for i, o := range ring.Slots {
		if o >= 0 {
			c.slots[i] = ids[o]
		}
	}
	c.ring = ring
	return nil
}

// serviceRow derives the service's parameters, its side (R-ELIG-5) and its
// epoch (R-EPOCH: bumped on a change of side when
// disableConnectionDrainOnFailover is set).
func (c *serviceCompiler) serviceRow() ServiceRow {
	s := c.s
	row := ServiceRow{
		ID:             c.id,
		Name:           s.Name,
		RingSize:       uint32(s.Ring()),
		IdleTimeoutSec: uint32(s.IdleTimeout()),
		SynNew:         SynNew(s.TrackingMode(), s.Affinity()),
		NoBackends:     len(c.dec.Members) == 0,
		AllUnhealthy:   !c.anyHealthy,
		Decision:       c.dec.Kind,
		Rule:           c.dec.Rule,
		RingKey:        c.ringKey,
		RingAuto:       s.RingAuto(),
		ShareError:     ShareError(c.ring, c.s.Weighted() && !c.dec.Unweighted),
	}
	if s.Encap() == EncapL2DSR {
		row.Encap = EncapKindL2DSR
	}
	for cl := Class(0); cl < NumClasses; cl++ {
		row.Classes[cl] = PolicyFor(cl, s.Affinity(), s.TrackingMode(), s.Persistence())
	}
	for _, mi := range c.dec.Members {
		row.Eligible = append(row.Eligible, c.names[mi])
	}
	sort.Strings(row.Eligible)

	side, decided := c.dec.Side()
	row.FailoverSide = side
	if old := c.old; old != nil {
		row.Epoch = old.Epoch
		switch {
		case !decided:
			// Last resort and drop are no side: keep the one the service
			// was on (R-ELIG-5).
			row.FailoverSide = old.FailoverSide
		case old.Decision == "":
			// Read back from a target that does not keep the side: the
			// previous side is unknown, so no change of side is claimed.
		case old.FailoverSide != side && s.FailoverPolicy != nil && s.FailoverPolicy.DisableConnectionDrainOnFailover:
			row.Epoch = old.Epoch + 1 // R-EPOCH: a change of side flushes entries
		}
	}
	return row
}

// ringRows places the slots in the double-buffered ring and sets the
// service row's active half (design decision 4). At rest a service holds
// one half: a changed ring goes into the half packets do not look up, the
// row flips to it, and the old half is deleted once no packet can be
// reading it (DiffIR orders the three), so the ring table's spare room is
// shared by every service instead of doubling each.
func (c *serviceCompiler) ringRows(row *ServiceRow) RingRows {
	rr := RingRows{ServiceID: c.id, view: c.ring, viewKey: c.ringKey}
	var oldRing *RingRows
	if c.old != nil {
		oldRing = c.prev.Ring(c.old.ID)
	}
	switch {
	case row.NoBackends && oldRing != nil:
		// Nothing to look up; keep the ring as it is so that the next
		// non-empty set diffs against it.
		row.ActiveHalf = c.old.ActiveHalf
		row.RingSize = c.old.RingSize
		rr.Halves[row.ActiveHalf&1] = oldRing.Halves[row.ActiveHalf&1]
	case oldRing == nil:
		rr.Halves[0] = c.slots
	case sameSlots(oldRing.Halves[c.old.ActiveHalf&1], c.slots):
		row.ActiveHalf = c.old.ActiveHalf
		rr.Halves[row.ActiveHalf&1] = oldRing.Halves[row.ActiveHalf&1]
	default:
		// Write the inactive half, then flip.
		row.ActiveHalf = 1 - c.old.ActiveHalf&1
		rr.Halves[row.ActiveHalf] = c.slots
	}
	return rr
}

// vipRows maps the service's VIP, protocol and ports to it.
func (c *serviceCompiler) vipRows() {
	s, id := c.s, c.id
	vip := s.VIPAddr()
	switch {
	case s.Protocol == ProtoL3Default:
		c.ir.VIPs = append(c.ir.VIPs, VIPRow{Key: VIPKey{VIP: vip, Kind: MatchAnyProto}, ServiceID: id})
	case s.Ports.All:
		c.ir.VIPs = append(c.ir.VIPs, VIPRow{Key: VIPKey{VIP: vip, Proto: protoNumber(s.Protocol), Kind: MatchAllPorts}, ServiceID: id})
	default:
		for _, p := range s.Ports.List {
			c.ir.VIPs = append(c.ir.VIPs, VIPRow{Key: VIPKey{VIP: vip, Proto: protoNumber(s.Protocol), Port: p, Kind: MatchPort}, ServiceID: id})
		}
	}
}

func protoNumber(p string) IPProto {
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
