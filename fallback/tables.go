package fallback

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
)

// Map value layouts, shared by both objects (bpf2go generates identical
// types for lb and lbtest).
type (
	vipKey     = lbVipKey
	vipKey4    = lbVipKey4
	vipVal     = lbVipVal
	serviceVal = lbService
	ringVal    = lbRingVal
	backendVal = lbBackend
	ctKey      = lbCtKey
	ctKey4     = lbCtKey4
	ctVal      = lbCtVal
	configVal  = lbLbConfig
	svcStats   = lbSvcStats
	beStats    = lbBeStats
)

// Service flags and backend flags, as bpf/maps.h defines them.
const (
	svcSynNew       = 1
	svcNoBackends   = 2
	svcAllUnhealthy = 4

	beHealthy  = 1
	beDraining = 2

	cfgHaveSrc4 = 1
	cfgHaveSrc6 = 2
)

func addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		return netip.AddrFrom16(a.As16()).As16() // As16 of an IPv4 address is IPv4-mapped
	}
	return a.As16()
}

func addrFrom16(b [16]byte) netip.Addr { return netip.AddrFrom16(b).Unmap() }

func encodeVIPKey(k compiler.VIPKey) vipKey {
	return vipKey{Addr: addr16(k.VIP.Unmap()), Port: k.Port, Proto: uint8(k.Proto), Kind: uint8(k.Kind)}
}

func decodeVIPKey(k vipKey) compiler.VIPKey {
	return compiler.VIPKey{VIP: addrFrom16(k.Addr), Port: k.Port, Proto: compiler.IPProto(k.Proto), Kind: compiler.MatchKind(k.Kind)}
}

// An IPv4 VIP's key (vips4) and an IPv4 flow's conntrack key (conntrack4)
// hold the address as the program loads it from the packet: the
// network-order word, in the host's byte order.
func word4(a netip.Addr) uint32 {
	b := a.Unmap().As4()
	return binary.NativeEndian.Uint32(b[:])
}

func addrOfWord(w uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], w)
	return netip.AddrFrom4(b)
}

// isVIP4 says which map holds a VIP: vips4 an IPv4 one, vips the others.
func isVIP4(a netip.Addr) bool { return a.Unmap().Is4() }

func encodeVIPKey4(k compiler.VIPKey) vipKey4 {
	return vipKey4{Addr: word4(k.VIP), Port: k.Port, Proto: uint8(k.Proto), Kind: uint8(k.Kind)}
}

func decodeVIPKey4(k vipKey4) compiler.VIPKey {
	return compiler.VIPKey{VIP: addrOfWord(k.Addr), Port: k.Port, Proto: compiler.IPProto(k.Proto), Kind: compiler.MatchKind(k.Kind)}
}

// putVIP writes a VIP into its map (vips4 or vips).
func (dp *Datapath) putVIP(k compiler.VIPKey, v vipVal) error {
	if isVIP4(k.VIP) {
		k4 := encodeVIPKey4(k)
		return dp.Vips4.Put(&k4, &v)
	}
	k6 := encodeVIPKey(k)
	return dp.Vips.Put(&k6, &v)
}

// deleteVIP removes a VIP from its map; a VIP that is not there is no
// error.
func (dp *Datapath) deleteVIP(k compiler.VIPKey) error {
	if isVIP4(k.VIP) {
		k4 := encodeVIPKey4(k)
		return ignoreMissing(dp.Vips4.Delete(&k4))
	}
	k6 := encodeVIPKey(k)
	return ignoreMissing(dp.Vips.Delete(&k6))
}

// eachVIP calls fn with every VIP of vips4 and vips.
func (dp *Datapath) eachVIP(fn func(k compiler.VIPKey, v vipVal)) error {
	var k4 vipKey4
	var v vipVal
	it := dp.Vips4.Iterate()
	for it.Next(&k4, &v) {
		fn(decodeVIPKey4(k4), v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read vips4: %w", err)
	}
	var k vipKey
	it = dp.Vips.Iterate()
	for it.Next(&k, &v) {
		fn(decodeVIPKey(k), v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read vips: %w", err)
	}
	return nil
}

// encodeService builds a service row; reg is the region of its active
// half in the rings array (zero when it has none: the ring word then says
// size 0, and lookups drop).
func encodeService(s *compiler.ServiceRow, reg ringpool.Span, clk tickClock) serviceVal {
	v := serviceVal{Id: s.ID, Epoch: s.Epoch, ActiveHalf: s.ActiveHalf, Encap: uint8(s.Encap), IdleSec: s.IdleTimeoutSec,
		Idle: IdleTicks(time.Duration(s.IdleTimeoutSec)*time.Second, clk.tick)}
	if reg.N > 0 && s.RingSize > 0 && s.ActiveHalf < 2 {
		v.Ring = ringWord(reg, s.RingSize)
		v.RingBase, v.RingCap = reg.Base, reg.N
	}
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

// ringWord is the service row's `ring`: the index of the active half's
// first slot, and the ring size in the high half.
func ringWord(reg ringpool.Span, size uint32) uint64 {
	return uint64(size)<<32 | uint64(reg.Base)
}

func decodeService(v serviceVal) compiler.ServiceRow {
	s := compiler.ServiceRow{ID: v.Id, RingSize: uint32(v.Ring >> 32), Epoch: v.Epoch, IdleTimeoutSec: v.IdleSec, ActiveHalf: v.ActiveHalf, Encap: compiler.Encap(v.Encap),
		SynNew: v.Flags&svcSynNew != 0, NoBackends: v.Flags&svcNoBackends != 0, AllUnhealthy: v.Flags&svcAllUnhealthy != 0}
	for c := range s.Classes {
		s.Classes[c] = compiler.ClassPolicy{Affinity: compiler.TupleKind(v.Classes[c].Affinity), Track: compiler.TupleKind(v.Classes[c].Track), Persist: v.Classes[c].Persist != 0}
	}
	return s
}

// encodeBackend builds a backend row; deadline is its deadline in the
// program's ticks (0: none).
func encodeBackend(b *compiler.BackendRow, deadline uint64) (backendVal, error) {
	ip := b.IP.Unmap()
	if !ip.IsValid() {
		return backendVal{}, fmt.Errorf("backend %d %q: no IP address", b.ID, b.Name)
	}
	v := backendVal{Id: b.ID, Addr: addr16(ip), Mac: b.MAC, Family: 6, Service: b.ServiceID, Deadline: deadline}
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
