package compiler

import (
	"net/netip"
	"sort"
	"time"
)

// IR is the compiled, target-independent form of a configuration: the
// tables every datapath holds. Targets translate it; none re-derives
// policy from the configuration (design decision 1).
//
// Four tables:
//   - VIPs: (VIP, protocol, port) → service ID. Lookup order in every
//     datapath: exact port, then all ports of the protocol, then the VIP
//     with any protocol (L3_DEFAULT).
//   - Services: service ID → per-service parameters (flags, ring size and
//     active half, epoch, idle timeout). Flipping a ring is one write here.
//   - Rings: (service ID, half, slot) → backend ID, double-buffered.
//   - Backends: backend ID → address, encapsulation, health and draining.
type IR struct {
	VIPs     []VIPRow     `json:"vips"`
	Services []ServiceRow `json:"services"`
	Rings    []RingRows   `json:"rings"`
	Backends []BackendRow `json:"backends"`
	// TunnelSource4/6 are the outer sources of IP-in-IP packets.
	TunnelSource4 netip.Addr `json:"tunnelSource4,omitzero"`
	TunnelSource6 netip.Addr `json:"tunnelSource6,omitzero"`
	// MTU is the egress MTU that IP-in-IP packets must fit (R-MTU): a
	// packet that would exceed it once encapsulated (20 bytes of outer
	// IPv4, 40 of IPv6, by the chosen backend's family) is answered with
	// ICMP fragmentation needed / packet too big when DF is set (always for
	// IPv6) and forwarded otherwise; a P4 switch sends it to the fallback
	// instead. Zero means the datapath's own: the interface's MTU for XDP,
	// DefaultMTU for the others. L2 DSR adds nothing and is not checked.
	MTU uint16 `json:"mtu,omitempty"`
	// NextServiceID and NextBackendID allocate IDs; IDs are never reused,
	// so a stale conntrack entry can never point at a different backend.
	NextServiceID uint32 `json:"nextServiceID"`
	NextBackendID uint32 `json:"nextBackendID"`
}

// DefaultMTU is the egress MTU of a datapath that has no interface to ask.
const DefaultMTU = 1500

// MatchKind orders the VIP table's lookups.
type MatchKind uint8

// Match kinds, most specific first.
const (
	MatchPort     MatchKind = iota // VIP + protocol + destination port
	MatchAllPorts                  // VIP + protocol, ports: ALL
	MatchAnyProto                  // VIP alone, protocol L3_DEFAULT
)

func (k MatchKind) String() string {
	switch k {
	case MatchPort:
		return "port"
	case MatchAllPorts:
		return "all-ports"
	}
	return "any-proto"
}

// IP protocol numbers the datapaths care about.
const (
	IPProtoICMP   = 1
	IPProtoTCP    = 6
	IPProtoUDP    = 17
	IPProtoIPv6   = 41
	IPProtoGRE    = 47
	IPProtoESP    = 50
	IPProtoICMPv6 = 58
	IPProtoIPIP   = 4
)

// VIPKey is the key of the VIP table. Proto is 0 and Port 0 for
// MatchAnyProto; Port is 0 for MatchAllPorts.
type VIPKey struct {
	VIP   netip.Addr `json:"vip"`
	Proto IPProto    `json:"proto"`
	Port  uint16     `json:"port"`
	Kind  MatchKind  `json:"kind"`
}

// VIPRow maps a key to a service.
type VIPRow struct {
	Key       VIPKey `json:"key"`
	ServiceID uint32 `json:"serviceID"`
}

// Class is a protocol class: the rules treat protocols in these groups.
type Class uint8

// Protocol classes (R-CT-3, R-AFF, R-TRK, R-PERSIST).
const (
	ClassTCP    Class = iota
	ClassUDP          // UDP
	ClassTunnel       // ESP and GRE
	ClassOther        // ICMP, ICMPv6 and every other protocol
	NumClasses
)

func (c Class) String() string {
	return [...]string{"tcp", "udp", "esp/gre", "other"}[c]
}

// ClassOf returns the class of an IP protocol number.
func ClassOf(proto uint8) Class {
	switch proto {
	case IPProtoTCP:
		return ClassTCP
	case IPProtoUDP:
		return ClassUDP
	case IPProtoESP, IPProtoGRE:
		return ClassTunnel
	}
	return ClassOther
}

// ClassPolicy is what a service does with one protocol class, derived from
// sessionAffinity, trackingMode and persistence so that datapaths only
// look it up.
type ClassPolicy struct {
	// Affinity is the tuple hashed onto the ring (R-AFF).
	Affinity TupleKind `json:"affinity"`
	// Track is the conntrack key tuple, TupleNone when untracked (R-CT-3, R-TRK).
	Track TupleKind `json:"track"`
	// Persist keeps entries on an unhealthy backend (R-PERSIST).
	Persist bool `json:"persist"`
}

// Effective returns the tuple to use for a packet: a 5-tuple becomes a
// 3-tuple when the packet is a fragment, which carries no ports in all but
// its first piece (R-AFF, R-FRAG).
func Effective(k TupleKind, fragment bool) TupleKind {
	if fragment && k == Tuple5 {
		return Tuple3
	}
	return k
}

// Encapsulation kinds.
const (
	EncapKindIPIP  Encap = 0
	EncapKindL2DSR Encap = 1
)

// ServiceRow holds one service's parameters.
type ServiceRow struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	// RingSize is the size of the active half's ring.
	RingSize uint32 `json:"ringSize"`
	// ActiveHalf is the half of the double-buffered ring lookups use.
	ActiveHalf uint8 `json:"activeHalf"`
	// Epoch invalidates every conntrack entry of an older epoch (R-EPOCH).
	Epoch          uint32 `json:"epoch"`
	IdleTimeoutSec uint32 `json:"idleTimeoutSec"`
	// SynNew: a TCP SYN (ACK clear) skips conntrack and is a new
	// connection (R-CT-1, R-CT-2).
	SynNew  bool          `json:"synNew"`
	Classes ClassPolicies `json:"classes"`
	// NoBackends: the eligible set is empty; new connections are dropped.
	NoBackends bool `json:"noBackends"`
	// AllUnhealthy: no backend is healthy, so entries stay valid whatever
	// the persistence option (R-PERSIST-LR).
	AllUnhealthy bool  `json:"allUnhealthy"`
	Encap        Encap `json:"encap"`

	// Not pushed to datapaths: the decision, for explain and status, and
	// the side, so that the next compile can tell a failover.
	Decision string   `json:"decision"`
	Rule     string   `json:"rule"`
	Eligible []string `json:"eligible"`
	// FailoverSide is the service's side (R-ELIG-5): set by the rules that
	// pick healthy backends (R-ELIG-3a–e, 4a–e), kept through last resort
	// and drop. A change of it is a failover or failback (R-EPOCH).
	FailoverSide bool `json:"failoverSide"`
	// RingKey identifies the ring's inputs (size, weighting, members'
	// names, weights and IDs), so that a compile reuses an unchanged ring
	// instead of rebuilding it. Zero means unknown (e.g. read back from a
	// target that does not keep it): the ring is rebuilt.
	RingKey uint64 `json:"ringKey,omitempty"`
	// RingAuto: the size was picked by ringSize auto (AutoRingSize).
	// ShareError is the ring's worst relative share error (ShareError),
	// for compile and explain; unknown (zero) when read back.
	RingAuto   bool    `json:"ringAuto,omitempty"`
	ShareError float64 `json:"shareError,omitempty"`
}

// RingRows is one service's double-buffered ring: Halves[h][slot] is a
// backend ID; 0 means the slot is unset.
type RingRows struct {
	ServiceID uint32      `json:"serviceID"`
	Halves    [2][]uint32 `json:"halves"`

	// view is the compiler's Ring of the active half, kept for the next
	// compile: when the ring's inputs (viewKey) are unchanged, it is
	// reused instead of rebuilt from 65537 slots.
	view    *Ring
	viewKey uint64
}

// BackendRow is one backend of one service.
type BackendRow struct {
	ID        uint32     `json:"id"`
	ServiceID uint32     `json:"serviceID"`
	Name      string     `json:"name"`
	IP        netip.Addr `json:"ip"`
	// MAC is an L2 DSR backend's; zero (and absent in JSON) for IP-in-IP.
	MAC     MAC  `json:"mac,omitzero"`
	Healthy bool `json:"healthy"`
	// Draining: removed from the configuration; takes no new connections
	// and serves its existing entries until Deadline (R-DRAIN).
	Draining bool `json:"draining"`
	// Deadline is when the entries recorded on this backend stop being
	// valid, on the compile clock (Input.Now); zero means never. Datapaths
	// keep it in their own clock, rounded up to their tick, and treat a
	// conntrack hit at or past it as a miss (design decision 8). The
	// controller's later removal of a draining row is housekeeping.
	Deadline time.Duration `json:"deadline,omitempty"`
	// DeadlineRule names the rule that set Deadline (RuleDrain,
	// RulePersistCap), for explain and status.
	DeadlineRule string `json:"deadlineRule,omitempty"`
	// Weight and Failover are informational (status, explain).
	Weight   int  `json:"weight"`
	Failover bool `json:"failover"`
}

// Less orders VIP keys: by address, then match kind, protocol and port.
func (a VIPKey) Less(b VIPKey) bool {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c < 0
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Proto != b.Proto {
		return a.Proto < b.Proto
	}
	return a.Port < b.Port
}

// Sort puts every table in the canonical order Compile emits, so that IRs
// read back from a target compare and digest like compiled ones.
func (ir *IR) Sort() {
	sort.Slice(ir.VIPs, func(i, j int) bool { return ir.VIPs[i].Key.Less(ir.VIPs[j].Key) })
	sort.Slice(ir.Services, func(i, j int) bool { return ir.Services[i].ID < ir.Services[j].ID })
	sort.Slice(ir.Rings, func(i, j int) bool { return ir.Rings[i].ServiceID < ir.Rings[j].ServiceID })
	sort.Slice(ir.Backends, func(i, j int) bool { return ir.Backends[i].ID < ir.Backends[j].ID })
}

// Service returns the service row with id, or nil. The tables are in
// canonical order (Compile, Sort): it is a binary search, with a scan for
// an IR built out of order.
func (ir *IR) Service(id uint32) *ServiceRow {
	return find(ir.Services, id, func(s *ServiceRow) uint32 { return s.ID })
}

// ServiceByName returns the service row named name, or nil. It scans the
// table; Index looks names up in constant time.
func (ir *IR) ServiceByName(name string) *ServiceRow {
	for i := range ir.Services {
		if ir.Services[i].Name == name {
			return &ir.Services[i]
		}
	}
	return nil
}

// Ring returns the ring of service id, or nil.
func (ir *IR) Ring(id uint32) *RingRows {
	return find(ir.Rings, id, func(r *RingRows) uint32 { return r.ServiceID })
}

// Backend returns the backend row with id, or nil.
func (ir *IR) Backend(id uint32) *BackendRow {
	return find(ir.Backends, id, func(b *BackendRow) uint32 { return b.ID })
}

// find looks id up in rows sorted by key (binary search); when rows are
// not sorted there, it scans them.
func find[T any](rows []T, id uint32, key func(*T) uint32) *T {
	i := sort.Search(len(rows), func(i int) bool { return key(&rows[i]) >= id })
	if i < len(rows) && key(&rows[i]) == id {
		return &rows[i]
	}
	// A miss in sorted rows is a miss; otherwise the search was unsound.
	sorted := true
	for k := 1; k < len(rows); k++ {
		if key(&rows[k-1]) >= key(&rows[k]) {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	for k := range rows {
		if key(&rows[k]) == id {
			return &rows[k]
		}
	}
	return nil
}

// Index looks up the rows of one IR by ID and name in constant time. It
// points into the IR's tables and is valid until they change.
type Index struct {
	ir         *IR
	services   map[uint32]*ServiceRow
	byName     map[string]*ServiceRow
	rings      map[uint32]*RingRows
	backends   map[uint32]*BackendRow
	backendsOf map[uint32][]*BackendRow
	byBackend  map[backendName]*BackendRow
}

type backendName struct {
	service uint32
	name    string
}

// Index builds the index of ir's tables (an empty one for nil).
func (ir *IR) Index() *Index {
	if ir == nil {
		ir = &IR{}
	}
	x := &Index{ir: ir,
		services:   make(map[uint32]*ServiceRow, len(ir.Services)),
		byName:     make(map[string]*ServiceRow, len(ir.Services)),
		rings:      make(map[uint32]*RingRows, len(ir.Rings)),
		backends:   make(map[uint32]*BackendRow, len(ir.Backends)),
		backendsOf: make(map[uint32][]*BackendRow, len(ir.Services)),
		byBackend:  make(map[backendName]*BackendRow, len(ir.Backends)),
	}
	for i := range ir.Services {
		s := &ir.Services[i]
		x.services[s.ID] = s
		x.byName[s.Name] = s
	}
	for i := range ir.Rings {
		x.rings[ir.Rings[i].ServiceID] = &ir.Rings[i]
	}
	for i := range ir.Backends {
		b := &ir.Backends[i]
		x.backends[b.ID] = b
		x.backendsOf[b.ServiceID] = append(x.backendsOf[b.ServiceID], b)
		x.byBackend[backendName{b.ServiceID, b.Name}] = b
	}
	return x
}

// IR returns the indexed IR.
func (x *Index) IR() *IR { return x.ir }

// Service returns the service row with id, or nil.
func (x *Index) Service(id uint32) *ServiceRow { return x.services[id] }

// ServiceByName returns the service row named name, or nil.
func (x *Index) ServiceByName(name string) *ServiceRow { return x.byName[name] }

// Ring returns the ring of service id, or nil.
func (x *Index) Ring(id uint32) *RingRows { return x.rings[id] }

// Backend returns the backend row with id, or nil.
func (x *Index) Backend(id uint32) *BackendRow { return x.backends[id] }

// BackendsOf returns the backend rows of service id, in table order.
func (x *Index) BackendsOf(id uint32) []*BackendRow { return x.backendsOf[id] }

// BackendOf returns the backend row of service id named name, or nil.
func (x *Index) BackendOf(id uint32, name string) *BackendRow {
	return x.byBackend[backendName{id, name}]
}

// ActiveRing returns the slots packets currently look up for a service.
func (ir *IR) ActiveRing(s *ServiceRow) []uint32 {
	r := ir.Ring(s.ID)
	if r == nil {
		return nil
	}
	return r.Halves[s.ActiveHalf]
}

// Lookup finds the service of a packet's destination, in the datapath's
// order: exact port, all ports, any protocol.
func (ir *IR) Lookup(dst netip.Addr, proto uint8, port uint16) (*VIPRow, bool) {
	dst = dst.Unmap()
	var all, anyProto *VIPRow
	for i := range ir.VIPs {
		v := &ir.VIPs[i]
		if v.Key.VIP != dst {
			continue
		}
		switch v.Key.Kind {
		case MatchPort:
			if v.Key.Proto == IPProto(proto) && v.Key.Port == port {
				return v, true
			}
		case MatchAllPorts:
			if v.Key.Proto == IPProto(proto) {
				all = v
			}
		case MatchAnyProto:
			anyProto = v
		}
	}
	if all != nil {
		return all, true
	}
	return anyProto, anyProto != nil
}
