package compiler

import (
	"net/netip"
	"sort"
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
	// NextServiceID and NextBackendID allocate IDs; IDs are never reused,
	// so a stale conntrack entry can never point at a different backend.
	NextServiceID uint32 `json:"nextServiceID"`
	NextBackendID uint32 `json:"nextBackendID"`
}

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
	Proto uint8      `json:"proto"`
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
	EncapKindIPIP  uint8 = 0
	EncapKindL2DSR uint8 = 1
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
	SynNew  bool                    `json:"synNew"`
	Classes [NumClasses]ClassPolicy `json:"classes"`
	// NoBackends: the eligible set is empty; new connections are dropped.
	NoBackends bool `json:"noBackends"`
	// AllUnhealthy: no backend is healthy, so entries stay valid whatever
	// the persistence option (R-PERSIST-LR).
	AllUnhealthy bool  `json:"allUnhealthy"`
	Encap        uint8 `json:"encap"`

	// Not pushed to datapaths: the decision, for explain and status, and
	// the failover side, so that the next compile can tell a failover.
	Decision     string   `json:"decision"`
	Rule         string   `json:"rule"`
	Eligible     []string `json:"eligible"`
	FailoverSide bool     `json:"failoverSide"`
	// RingKey identifies the ring's inputs (size, weighting, members'
	// names, weights and IDs), so that a compile reuses an unchanged ring
	// instead of rebuilding it. Zero means unknown (e.g. read back from a
	// target that does not keep it): the ring is rebuilt.
	RingKey uint64 `json:"ringKey,omitempty"`
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
	MAC       [6]byte    `json:"mac"`
	Healthy   bool       `json:"healthy"`
	// Draining: removed from the configuration; serves its existing
	// entries until DrainDeadline, then the row is deleted (R-DRAIN).
	Draining      bool    `json:"draining"`
	DrainDeadline float64 `json:"drainDeadline,omitempty"`
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

// Service returns the service row with id, or nil.
func (ir *IR) Service(id uint32) *ServiceRow {
	for i := range ir.Services {
		if ir.Services[i].ID == id {
			return &ir.Services[i]
		}
	}
	return nil
}

// ServiceByName returns the service row named name, or nil.
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
	for i := range ir.Rings {
		if ir.Rings[i].ServiceID == id {
			return &ir.Rings[i]
		}
	}
	return nil
}

// Backend returns the backend row with id, or nil.
func (ir *IR) Backend(id uint32) *BackendRow {
	for i := range ir.Backends {
		if ir.Backends[i].ID == id {
			return &ir.Backends[i]
		}
	}
	return nil
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
			if v.Key.Proto == proto && v.Key.Port == port {
				return v, true
			}
		case MatchAllPorts:
			if v.Key.Proto == proto {
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
