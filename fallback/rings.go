package fallback

import (
	"fmt"
	"sort"

	"github.com/lbc-dev/lbc/compiler"
)

// Rings live in one array map, `rings`: each service owns a region of two
// halves of cap slots, half h starting at base + h·cap, and its row's ring
// word points at the active half (bpf/maps.h). A lookup is then one inlined
// array access, base + hash mod size, where a hash map keyed by (service,
// half, slot) cost a call and two cache misses on a new flow.
//
// The regions are the loader's: they are rebuilt from the service rows
// (each holds its base and cap), so a new process finds them. A region is
// allocated when a diff first writes a service's ring; when a diff needs
// more slots than the region has, the service moves to a larger region
// (both halves copied, then the row pointed at it, so packets see the same
// ring throughout). A region freed by an Apply is not given out again in
// the same Apply, like a row slot (slots.go).

type region struct{ base, cap uint32 }

// end is one past the region's last element.
func (r region) end() uint32 { return r.base + 2*r.cap }

type regions struct {
	size       uint32
	byService  map[uint32]region
	quarantine []region
}

func newRegions(size uint32) *regions {
	return &regions{size: size, byService: map[uint32]region{}}
}

// alloc finds room for 2·cap slots (first fit) that no live or
// quarantined region overlaps.
func (rs *regions) alloc(cap uint32) (region, bool) {
	used := make([]region, 0, len(rs.byService)+len(rs.quarantine))
	for _, r := range rs.byService {
		used = append(used, r)
	}
	used = append(used, rs.quarantine...)
	sort.Slice(used, func(i, j int) bool { return used[i].base < used[j].base })
	at := uint32(0)
	for _, u := range used {
		if u.base >= at && u.base-at >= 2*cap {
			break
		}
		at = max(at, u.end())
	}
	if uint64(at)+2*uint64(cap) > uint64(rs.size) {
		return region{}, false
	}
	return region{base: at, cap: cap}, true
}

func (rs *regions) free(svc uint32) {
	if r, ok := rs.byService[svc]; ok {
		delete(rs.byService, svc)
		rs.quarantine = append(rs.quarantine, r)
	}
}

func (rs *regions) endApply() { rs.quarantine = rs.quarantine[:0] }

func (rs *regions) used() uint32 {
	n := uint32(0)
	for _, r := range rs.byService {
		n += 2 * r.cap
	}
	return n
}

// Offsets in the service row (struct service of bpf/maps.h).
const (
	svcOffID   = 0
	svcOffRing = 8
)

// ringRegion returns svc's region with room for need slots per half,
// allocating or moving it. A move copies both halves and repoints the
// service row, if there is one, before anything else is written.
func (dp *Datapath) ringRegion(svc, need uint32) (region, error) {
	r, ok := dp.regions.byService[svc]
	if ok && r.cap >= need {
		return r, nil
	}
	cap := need
	if ok {
		cap = max(cap, r.cap)
	}
	nr, fits := dp.regions.alloc(cap)
	if !fits {
		return region{}, &FullError{Map: "rings", Size: dp.regions.size, Used: dp.regions.used(), Need: 2 * cap,
			What: fmt.Sprintf("service %d's ring of 2×%d slots", svc, cap)}
	}
	dp.ringMem.clearRange(nr.base, 2*nr.cap)
	if ok {
		for h := uint32(0); h < 2; h++ {
			for s := uint32(0); s < r.cap; s++ {
				dp.ringMem.store64(nr.base+h*nr.cap+s, 0, dp.ringMem.load64(r.base+h*r.cap+s, 0))
			}
		}
		if slot, has := dp.svcSlots.byID[svc]; has {
			v, err := dp.serviceRow(slot)
			if err != nil {
				return region{}, err
			}
			v.RingBase, v.RingCap = nr.base, nr.cap
			if v.Ring != 0 {
				v.Ring = ringWord(nr, v.ActiveHalf, uint32(v.Ring>>32))
			}
			dp.writeService(slot, &v, false)
		}
		dp.regions.free(svc)
	}
	dp.regions.byService[svc] = nr
	return nr, nil
}

// applyRings writes a run of ring changes: each is one atomic store of a
// slot (backend ID and backend slot, or zero for a delete).
func (dp *Datapath) applyRings(run []compiler.Change) error {
	need := map[uint32]uint32{}
	for _, c := range run {
		e := c.Ring
		if e.Half > 1 {
			return fmt.Errorf("%s: half %d out of range", c, e.Half)
		}
		if c.Op != compiler.Delete {
			need[e.ServiceID] = max(need[e.ServiceID], e.Slot+1)
		}
	}
	for _, c := range run {
		e := c.Ring
		var r region
		if c.Op == compiler.Delete {
			var ok bool
			if r, ok = dp.regions.byService[e.ServiceID]; !ok || e.Slot >= r.cap {
				continue // not held: already the state we want
			}
		} else {
			var err error
			if r, err = dp.ringRegion(e.ServiceID, need[e.ServiceID]); err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
		}
		var v uint64
		if c.Op != compiler.Delete {
			v = uint64(dp.beSlots.get(e.BackendID))<<32 | uint64(e.BackendID)
		}
		dp.ringMem.store64(r.base+uint32(e.Half)*r.cap+e.Slot, 0, v)
	}
	return nil
}

// readRings returns the rings of the services whose rows the index holds,
// each half up to its last set slot (as compiler.Diff.Apply trims them).
func (dp *Datapath) readRings() []compiler.RingRows {
	ids := make([]uint32, 0, len(dp.regions.byService))
	for id := range dp.regions.byService {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []compiler.RingRows
	for _, id := range ids {
		r := dp.regions.byService[id]
		rr := compiler.RingRows{ServiceID: id}
		for h := uint32(0); h < 2; h++ {
			n := r.cap
			for n > 0 && uint32(dp.ringMem.load64(r.base+h*r.cap+n-1, 0)) == 0 {
				n--
			}
			if n == 0 {
				continue
			}
			half := make([]uint32, n)
			for s := uint32(0); s < n; s++ {
				half[s] = uint32(dp.ringMem.load64(r.base+h*r.cap+s, 0))
			}
			rr.Halves[h] = half
		}
		if len(rr.Halves[0])+len(rr.Halves[1]) > 0 {
			out = append(out, rr)
		}
	}
	return out
}
