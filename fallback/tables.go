package fallback

import (
	"fmt"
	"net/netip"

	"github.com/lbc-dev/lbc/compiler"
)

// Map value layouts, shared by both objects (bpf2go generates identical
// types for lb and lbtest).
type (
	vipKey     = lbVipKey
	vipVal     = lbVipVal
	serviceVal = lbService
	ringKey    = lbRingKey
	ringVal    = lbRingVal
	backendVal = lbBackend
	ctKey      = lbCtKey
	ctVal      = lbCtVal
	configVal  = lbLbConfig
	svcStats   = lbSvcStats
	beStats    = lbBeStats
)

// Service flags and backend flags, as bpf/lb.c defines them.
const (
	svcSynNew       = 1
	svcNoBackends   = 2
	svcAllUnhealthy = 4

	beHealthy  = 1
	beDraining = 2

	cfgHaveSrc4 = 1
	cfgHaveSrc6 = 2

	halfBit = 1 << 31
)

func addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		return netip.AddrFrom16(a.As16()).As16() // As16 of an IPv4 address is IPv4-mapped
	}
	return a.As16()
}

func addrFrom16(b [16]byte) netip.Addr { return netip.AddrFrom16(b).Unmap() }

func encodeVIPKey(k compiler.VIPKey) vipKey {
	return vipKey{Addr: addr16(k.VIP.Unmap()), Port: k.Port, Proto: k.Proto, Kind: uint8(k.Kind)}
}

func decodeVIPKey(k vipKey) compiler.VIPKey {
	return compiler.VIPKey{VIP: addrFrom16(k.Addr), Port: k.Port, Proto: k.Proto, Kind: compiler.MatchKind(k.Kind)}
}

func encodeService(s *compiler.ServiceRow) serviceVal {
	v := serviceVal{Id: s.ID, RingSize: s.RingSize, Epoch: s.Epoch, IdleSec: s.IdleTimeoutSec, ActiveHalf: s.ActiveHalf, Encap: s.Encap}
	if s.SynNew {
		v.Flags |= svcSynNew
	}
	if s.NoBackends {
		v.Flags |= svcNoBackends
	}
	if s.AllUnhealthy {
		v.Flags |= svcAllUnhealthy
	}
	for c, p := range s.Classes {
		v.Classes[c].Affinity = uint8(p.Affinity)
		v.Classes[c].Track = uint8(p.Track)
		if p.Persist {
			v.Classes[c].Persist = 1
		}
	}
	return v
}

func decodeService(v serviceVal) compiler.ServiceRow {
	s := compiler.ServiceRow{ID: v.Id, RingSize: v.RingSize, Epoch: v.Epoch, IdleTimeoutSec: v.IdleSec, ActiveHalf: v.ActiveHalf, Encap: v.Encap,
		SynNew: v.Flags&svcSynNew != 0, NoBackends: v.Flags&svcNoBackends != 0, AllUnhealthy: v.Flags&svcAllUnhealthy != 0}
	for c := range s.Classes {
		s.Classes[c] = compiler.ClassPolicy{Affinity: compiler.TupleKind(v.Classes[c].Affinity), Track: compiler.TupleKind(v.Classes[c].Track), Persist: v.Classes[c].Persist != 0}
	}
	return s
}

func encodeRingKey(e *compiler.RingEntry) (ringKey, error) {
	if e.Half > 1 || e.Slot >= halfBit {
		return ringKey{}, fmt.Errorf("ring service %d half %d slot %d: out of range", e.ServiceID, e.Half, e.Slot)
	}
	return ringKey{Service: e.ServiceID, Slot: uint32(e.Half)<<31 | e.Slot}, nil
}

func encodeBackend(b *compiler.BackendRow) (backendVal, error) {
	ip := b.IP.Unmap()
	if !ip.IsValid() {
		return backendVal{}, fmt.Errorf("backend %d %q: no IP address", b.ID, b.Name)
	}
	v := backendVal{Id: b.ID, Addr: addr16(ip), Mac: b.MAC, Family: 6, Service: b.ServiceID}
	if ip.Is4() {
		v.Family = 4
	}
	if b.Healthy {
		v.Flags |= beHealthy
	}
	if b.Draining {
		v.Flags |= beDraining
	}
	return v, nil
}

func decodeBackend(v backendVal) compiler.BackendRow {
	return compiler.BackendRow{ID: v.Id, ServiceID: v.Service, IP: addrFrom16(v.Addr), MAC: v.Mac,
		Healthy: v.Flags&beHealthy != 0, Draining: v.Flags&beDraining != 0}
}
