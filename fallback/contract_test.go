package fallback_test

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/lbc-dev/lbc/compiler"
)

// The loader's contract with the compiler since issue 35, written out so
// that tests drive it with exactly these change lists whatever
// compiler.DiffIR does at the time: at rest a service holds one half of
// its ring (its row's ActiveHalf), and a diff from old to new is
//
//  1. backend inserts and modifies;
//  2. for every service whose ring is new or changes, the new ring into
//     the half the old row does not use (the whole ring: that half is
//     empty at rest; where old state still holds it, the changes from
//     what it holds);
//  3. service inserts and modifies (a flip: one row write, the epoch with
//     it);
//  4. VIP inserts and modifies;
//  5. VIP deletes, service deletes;
//  6. ring deletes: every slot of a half a row no longer uses (the half it
//     flipped away from, or a half old state still holds), and of the
//     rings of the services deleted;
//  7. backend deletes.
func oneHalfDiff(old, new *compiler.IR) []compiler.Change {
	if old == nil {
		old = &compiler.IR{}
	}
	ox, nx := old.Index(), new.Index()
	n := len(new.VIPs) + len(old.VIPs) + len(new.Services) + len(old.Services) + len(new.Backends) + len(old.Backends)
	for _, r := range new.Rings {
		if o := ox.Ring(r.ServiceID); o == nil || !equal(o.Halves[0], r.Halves[0]) || !equal(o.Halves[1], r.Halves[1]) {
			n += 2 * (len(r.Halves[0]) + len(r.Halves[1]))
		}
	}
	out := make([]compiler.Change, 0, n) // rings of 32,768 slots: no regrowth
	add := func(c compiler.Change) { out = append(out, c) }
	backendsIn(old, new, add)
	var leave []compiler.RingEntry // deleted after the flips
	halves := func(ix *compiler.Index, id uint32) [2][]uint32 {
		if r := ix.Ring(id); r != nil {
			return r.Halves
		}
		return [2][]uint32{}
	}
	for i := range new.Services {
		s := &new.Services[i]
		oh, nh := halves(ox, s.ID), halves(nx, s.ID)
		o := ox.Service(s.ID)
		if o != nil && o.ActiveHalf == s.ActiveHalf && !equal(oh[s.ActiveHalf], nh[s.ActiveHalf]) {
			panic(fmt.Sprintf("service %d: a new ring in the half packets use", s.ID))
		}
		diffHalf(s.ID, s.ActiveHalf, oh[s.ActiveHalf], nh[s.ActiveHalf], add)
		for slot, b := range oh[1-s.ActiveHalf] {
			if b != 0 {
				leave = append(leave, compiler.RingEntry{ServiceID: s.ID, Half: 1 - s.ActiveHalf, Slot: uint32(slot), BackendID: b})
			}
		}
	}
	servicesIn(ox, new, add)
	vips(old, new, add)
	for i := range old.Services {
		s := &old.Services[i]
		if nx.Service(s.ID) != nil {
			continue
		}
		add(compiler.Change{Table: compiler.TableService, Op: compiler.Delete, Service: s})
		for h, half := range halves(ox, s.ID) {
			for slot, b := range half {
				if b != 0 {
					leave = append(leave, compiler.RingEntry{ServiceID: s.ID, Half: uint8(h), Slot: uint32(slot), BackendID: b})
				}
			}
		}
	}
	for i := range leave {
		add(compiler.Change{Table: compiler.TableRing, Op: compiler.Delete, Ring: &leave[i]})
	}
	backendsOut(old, nx, add)
	return out
}

// bothHalvesDiff is the contract before issue 35, for IRs that keep both
// halves of every ring: ring writes (of either half, each as its changes
// from what it holds) before the service rows, the rings of the services
// deleted after them.
func bothHalvesDiff(old, new *compiler.IR) []compiler.Change {
	if old == nil {
		old = &compiler.IR{}
	}
	var out []compiler.Change
	add := func(c compiler.Change) { out = append(out, c) }
	ox, nx := old.Index(), new.Index()
	backendsIn(old, new, add)
	for i := range new.Rings {
		nr := &new.Rings[i]
		var oh [2][]uint32
		if or := ox.Ring(nr.ServiceID); or != nil {
			oh = or.Halves
		}
		for h := uint8(0); h < 2; h++ {
			diffHalf(nr.ServiceID, h, oh[h], nr.Halves[h], add)
		}
	}
	servicesIn(ox, new, add)
	vips(old, new, add)
	for i := range old.Services {
		if nx.Service(old.Services[i].ID) == nil {
			add(compiler.Change{Table: compiler.TableService, Op: compiler.Delete, Service: &old.Services[i]})
		}
	}
	for i := range old.Rings {
		if or := &old.Rings[i]; nx.Ring(or.ServiceID) == nil {
			for h := uint8(0); h < 2; h++ {
				diffHalf(or.ServiceID, h, or.Halves[h], nil, add)
			}
		}
	}
	backendsOut(old, nx, add)
	return out
}

func backendsIn(old, new *compiler.IR, add func(compiler.Change)) {
	ox := old.Index()
	for i := range new.Backends {
		b := &new.Backends[i]
		if o := ox.Backend(b.ID); o == nil {
			add(compiler.Change{Table: compiler.TableBackend, Op: compiler.Insert, Backend: b})
		} else if !compiler.BackendDatapathEqual(o, b) {
			add(compiler.Change{Table: compiler.TableBackend, Op: compiler.Modify, Backend: b})
		}
	}
}

func servicesIn(ox *compiler.Index, new *compiler.IR, add func(compiler.Change)) {
	for i := range new.Services {
		s := &new.Services[i]
		if o := ox.Service(s.ID); o == nil {
			add(compiler.Change{Table: compiler.TableService, Op: compiler.Insert, Service: s})
		} else if !compiler.ServiceDatapathEqual(o, s) {
			add(compiler.Change{Table: compiler.TableService, Op: compiler.Modify, Service: s})
		}
	}
}

// vips writes the VIP inserts and modifies, then the VIP deletes.
func vips(old, new *compiler.IR, add func(compiler.Change)) {
	oldV := map[compiler.VIPKey]uint32{}
	for _, v := range old.VIPs {
		oldV[v.Key] = v.ServiceID
	}
	newV := map[compiler.VIPKey]bool{}
	for i := range new.VIPs {
		v := &new.VIPs[i]
		newV[v.Key] = true
		if id, ok := oldV[v.Key]; !ok {
			add(compiler.Change{Table: compiler.TableVIP, Op: compiler.Insert, VIP: v})
		} else if id != v.ServiceID {
			add(compiler.Change{Table: compiler.TableVIP, Op: compiler.Modify, VIP: v})
		}
	}
	for i := range old.VIPs {
		if !newV[old.VIPs[i].Key] {
			add(compiler.Change{Table: compiler.TableVIP, Op: compiler.Delete, VIP: &old.VIPs[i]})
		}
	}
}

func backendsOut(old *compiler.IR, nx *compiler.Index, add func(compiler.Change)) {
	var gone []*compiler.BackendRow
	for i := range old.Backends {
		if nx.Backend(old.Backends[i].ID) == nil {
			gone = append(gone, &old.Backends[i])
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].ID < gone[j].ID })
	for _, b := range gone {
		add(compiler.Change{Table: compiler.TableBackend, Op: compiler.Delete, Backend: b})
	}
}

// diffHalf writes the changes of one half from oh to nh.
func diffHalf(svc uint32, half uint8, oh, nh []uint32, add func(compiler.Change)) {
	es := make([]compiler.RingEntry, max(len(oh), len(nh))) // one allocation: rings of 32,768 slots
	for slot := range es {
		var o, v uint32
		if slot < len(oh) {
			o = oh[slot]
		}
		if slot < len(nh) {
			v = nh[slot]
		}
		e := &es[slot]
		*e = compiler.RingEntry{ServiceID: svc, Half: half, Slot: uint32(slot), BackendID: v}
		switch {
		case o == v:
		case o == 0:
			add(compiler.Change{Table: compiler.TableRing, Op: compiler.Insert, Ring: e})
		case v == 0:
			e.BackendID = o
			add(compiler.Change{Table: compiler.TableRing, Op: compiler.Delete, Ring: e})
		default:
			add(compiler.Change{Table: compiler.TableRing, Op: compiler.Modify, Ring: e})
		}
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ringService is one service of the tests' IRs: a VIP 203.0.x.y (x.y its
// ID), backends 10.x.y.z, the ring given, in the half given.
type ringService struct {
	id    uint32
	half  uint8
	epoch uint32
	ring  []uint32 // backend IDs; the backends are those it names
	// other: the other half, held too (as diffs before issue 35 did).
	other []uint32
	// backends, when set, are the ones the rings name (else they are
	// found in the rings).
	backends []uint32
}

func ringVIP(id uint32) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, byte(id >> 8), byte(id)}) }

// ringIR builds the IR of services.
func ringIR(svcs ...ringService) *compiler.IR {
	ir := &compiler.IR{}
	for _, s := range svcs {
		ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: ringVIP(s.id), Kind: compiler.MatchAnyProto}, ServiceID: s.id})
		row := compiler.ServiceRow{ID: s.id, Name: fmt.Sprint("s", s.id), RingSize: uint32(len(s.ring)), ActiveHalf: s.half, Epoch: s.epoch, IdleTimeoutSec: 3600}
		for c := range row.Classes {
			row.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityClientIP, compiler.TrackPerConnection, compiler.PersistDefault)
		}
		ir.Services = append(ir.Services, row)
		rr := compiler.RingRows{ServiceID: s.id}
		rr.Halves[s.half], rr.Halves[1-s.half] = s.ring, s.other // shared: nothing writes them
		ir.Rings = append(ir.Rings, rr)
		bs := s.backends
		if bs == nil {
			bs = append(append([]uint32(nil), s.ring...), s.other...)
		}
		seen := map[uint32]bool{}
		for _, b := range bs {
			if !seen[b] && b != 0 {
				seen[b] = true
				ir.Backends = append(ir.Backends, compiler.BackendRow{ID: b, ServiceID: s.id, Name: fmt.Sprint("b", b),
					IP: netip.AddrFrom4([4]byte{10, byte(s.id >> 8), byte(s.id), byte(b)}), Healthy: true})
			}
		}
	}
	ir.Sort()
	return ir
}

// fillRing is a ring of n slots over the backends given, in turn.
func fillRing(n int, backends ...uint32) []uint32 {
	r := make([]uint32, n)
	for i := range r {
		r[i] = backends[i%len(backends)]
	}
	return r
}
