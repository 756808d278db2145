package fallback

import (
	"fmt"
	"sort"

	"github.com/lbc-dev/lbc/compiler"
)

// Rings live in one array map, `rings`, a pool of regions (pool.go): each
// half of a service's ring that the loader holds has a region of its own,
// as long as that half, and the service's row points at its active half
// (the ring word: that region's first index and the ring size; ring_base
// and ring_cap: the region, for the next process). A lookup is one inlined
// array access, start + hash mod size.
//
// A half gets its region on its first write in an Apply (as long as the
// highest slot the Apply writes, +1); a later write beyond it moves the
// half to a larger region (copied, then its row repointed if the row
// points at it, then the old region freed). A half's region is freed when
// a run of ring changes deletes every slot it holds and no row points at
// it, or when its service is deleted; those deletes write nothing: the
// slots keep their content until the space is given out again, which is
// what a packet that read the row just before wants. Freed regions are
// quarantined (pool.go). A row that flips away from a half does not free
// it by itself: the compiler deletes the old half right after the flip,
// and a diff that keeps both halves (design decision 4 before issue 35)
// writes the next ring into it as the changes from the ring it holds.
//
// The regions are the loader's: a new process rebuilds the active halves'
// from the rows (loadIndex). An inactive half that this process wrote and
// has not freed is known only to it.

// Offsets in the service row (struct service of bpf/maps.h).
const (
	svcOffID     = 0
	svcOffRing   = 8
	svcOffRegion = 24 // ring_base, ring_cap
)

// mapMover is the pool's mover on the kernel's arrays.
type mapMover struct{ dp *Datapath }

// move copies, then repoints: a packet that reads the row before the
// repoint reads the old place, intact (quarantined until a grace); one
// that reads it after reads the copy, complete.
func (m mapMover) move(k halfKey, from, to span) error {
	rm := m.dp.ringMem
	for s := uint32(0); s < from.n; s++ {
		rm.store64(to.base+s, 0, rm.load64(from.base+s, 0))
	}
	if m.dp.movePause != nil {
		m.dp.movePause()
	}
	return m.dp.repoint(k.svc, from, to)
}

func (m mapMover) grace() error { return m.dp.waitReaders() }

// repoint points svc's row at to if its ring word points at from: the
// ring word in one store (the size stays), then the region's record.
func (dp *Datapath) repoint(svc uint32, from, to span) error {
	slot, ok := dp.svcSlots.byID[svc]
	if !ok {
		return nil
	}
	v, err := dp.serviceRow(slot)
	if err != nil {
		return err
	}
	if v.Ring == 0 || uint32(v.Ring) != from.base {
		return nil
	}
	dp.svcMem.store64(slot, svcOffRing, v.Ring&^0xffffffff|uint64(to.base))
	dp.svcMem.store64(slot, svcOffRegion, uint64(to.n)<<32|uint64(to.base))
	return nil
}

// ringHalf returns k's region with room for need slots, allocating it
// (zeroed) or moving it to a larger one.
func (dp *Datapath) ringHalf(k halfKey, need uint32, st *placeStats) (span, error) {
	old, ok := dp.pool.halves[k]
	if ok && old.n >= need {
		return old, nil
	}
	s, err := dp.pool.alloc(k, need, mapMover{dp}, st)
	if err != nil {
		return span{}, err
	}
	dp.ringMem.clearRange(s.base, s.n)
	if ok {
		if err := (mapMover{dp}).move(k, old, s); err != nil {
			return span{}, err
		}
		dp.pool.quarantine = append(dp.pool.quarantine, old)
	}
	return s, nil
}

// pointedAt reports whether a row points at k's region.
func (dp *Datapath) pointedAt(k halfKey) bool {
	s, ok := dp.pool.halves[k]
	slot, has := dp.svcSlots.byID[k.svc]
	if !ok || !has {
		return false
	}
	ring := dp.svcMem.load64(slot, svcOffRing)
	return ring != 0 && uint32(ring) == s.base
}

// emptiedBy reports whether deleting slots leaves k's region without a
// set slot.
func (dp *Datapath) emptiedBy(k halfKey, slots []uint32) bool {
	s := dp.pool.halves[k]
	gone := make([]bool, s.n)
	for _, i := range slots {
		if i < s.n {
			gone[i] = true
		}
	}
	for i := uint32(0); i < s.n; i++ {
		if !gone[i] && uint32(dp.ringMem.load64(s.base+i, 0)) != 0 {
			return false
		}
	}
	return true
}

// halfChanges is what a run of ring changes does to one half.
type halfChanges struct {
	need uint32   // the highest slot written + 1; 0: only deletes
	dels []uint32 // the slots deleted
	free bool     // the deletes empty it: its region is freed, nothing written
}

// applyRings writes a run of ring changes and returns how many slots it
// stored: each change is one atomic store of a slot (backend ID and
// backend slot, or zero for a delete), except the deletes of a half they
// empty, which free its region and store nothing, and deletes of what is
// not held. The changes of one half come together (a diff writes a half at
// a time), so the bookkeeping is per group, not per slot.
func (dp *Datapath) applyRings(run []compiler.Change, st *placeStats) (int, error) {
	halves := map[halfKey]*halfChanges{}
	group := func(i int) (halfKey, int) { // the key of run[i] and the end of its group
		k := halfKey{run[i].Ring.ServiceID, run[i].Ring.Half}
		j := i + 1
		for j < len(run) && run[j].Ring.ServiceID == k.svc && run[j].Ring.Half == k.half {
			j++
		}
		return k, j
	}
	for i := 0; i < len(run); {
		if e := run[i].Ring; e.Half > 1 {
			return 0, fmt.Errorf("%s: half %d out of range", run[i], e.Half)
		}
		k, j := group(i)
		h := halves[k]
		if h == nil {
			h = &halfChanges{}
			halves[k] = h
		}
		for _, c := range run[i:j] {
			if c.Op == compiler.Delete {
				h.dels = append(h.dels, c.Ring.Slot)
			} else {
				h.need = max(h.need, c.Ring.Slot+1)
			}
		}
		i = j
	}
	writes := false
	for k, h := range halves {
		writes = writes || h.need > 0
		if _, held := dp.pool.halves[k]; held && len(h.dels) > 0 && h.need == 0 && !dp.pointedAt(k) && dp.emptiedBy(k, h.dels) {
			dp.pool.release(k)
			h.free = true
		}
	}
	if writes && len(dp.pool.quarantine) > 0 {
		// Regions freed before (by this run, or by an Apply microseconds
		// ago): a grace, and first fit has them again.
		if err := dp.Grace(); err != nil {
			return 0, err
		}
		st.graces++
	}
	stored := 0
	for i := 0; i < len(run); {
		k, j := group(i)
		h := halves[k]
		if h.free {
			i = j
			continue
		}
		s, held := dp.pool.halves[k]
		for _, c := range run[i:j] {
			e := c.Ring
			if c.Op == compiler.Delete {
				if held && e.Slot < s.n {
					dp.ringMem.store64(s.base+e.Slot, 0, 0)
					stored++
				}
				continue // else not held: already the state we want
			}
			if !held || e.Slot >= s.n {
				var err error
				if s, err = dp.ringHalf(k, h.need, st); err != nil {
					return stored, fmt.Errorf("%s: %w", c, err)
				}
				held = true
			}
			v := uint64(dp.beSlots.get(e.BackendID))<<32 | uint64(e.BackendID)
			dp.ringMem.store64(s.base+e.Slot, 0, v)
			stored++
		}
		i = j
	}
	return stored, nil
}

// readRings returns the halves the loader holds, each up to its last set
// slot (as compiler.Diff.Apply trims them): the active halves of the rows,
// and the inactive halves this process wrote and has not freed.
func (dp *Datapath) readRings() []compiler.RingRows {
	keys := make([]halfKey, 0, len(dp.pool.halves))
	for k := range dp.pool.halves {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].svc != keys[j].svc {
			return keys[i].svc < keys[j].svc
		}
		return keys[i].half < keys[j].half
	})
	var out []compiler.RingRows
	for _, k := range keys {
		s := dp.pool.halves[k]
		n := s.n
		for n > 0 && uint32(dp.ringMem.load64(s.base+n-1, 0)) == 0 {
			n--
		}
		if n == 0 {
			continue
		}
		half := make([]uint32, n)
		for i := uint32(0); i < n; i++ {
			half[i] = uint32(dp.ringMem.load64(s.base+i, 0))
		}
		if len(out) == 0 || out[len(out)-1].ServiceID != k.svc {
			out = append(out, compiler.RingRows{ServiceID: k.svc})
		}
		out[len(out)-1].Halves[k.half] = half
	}
	return out
}
