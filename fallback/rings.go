package fallback

import (
	"errors"
	"fmt"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
)

// Rings live in one array map, `rings`, a pool of regions (the allocator
// is internal/ringpool, which explains placement, quarantine and
// compaction; this file moves the slots and the rows for it): each
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
// quarantined (internal/ringpool). A row that flips away from a half does
// not free it by itself: the compiler deletes the old half right after the
// flip, and a diff that keeps both halves (design decision 4 before issue
// 35) writes the next ring into it as the changes from the ring it holds.
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

// mapMover is the pool's mover (ringpool.Mover) on the kernel's arrays.
type mapMover struct{ dp *Datapath }

// Move copies, then repoints: a packet that reads the row before the
// repoint reads the old place, intact (quarantined until a grace); one
// that reads it after reads the copy, complete.
func (m mapMover) Move(k ringpool.Key, from, to ringpool.Span) error {
	rm := m.dp.ringMem
	for s := uint32(0); s < from.N; s++ {
		rm.store64(to.Base+s, 0, rm.load64(from.Base+s, 0))
	}
	if m.dp.movePause != nil {
		m.dp.movePause()
	}
	return m.dp.repoint(k.Svc, from, to)
}

// Grace waits for the packets in flight (grace.go).
func (m mapMover) Grace() error { return m.dp.waitReaders() }

// repoint points svc's row at to if its ring word points at from: the
// ring word in one store (the size stays), then the region's record.
func (dp *Datapath) repoint(svc uint32, from, to ringpool.Span) error {
	slot, ok := dp.svcSlots.byID[svc]
	if !ok {
		return nil
	}
	v, err := dp.serviceRow(slot)
	if err != nil {
		return err
	}
	if v.Ring == 0 || uint32(v.Ring) != from.Base {
		return nil
	}
	dp.svcMem.store64(slot, svcOffRing, v.Ring&^0xffffffff|uint64(to.Base))
	dp.svcMem.store64(slot, svcOffRegion, uint64(to.N)<<32|uint64(to.Base))
	return nil
}

// ringHalf returns k's region with room for need slots, allocating it
// (zeroed) or moving it to a larger one.
func (dp *Datapath) ringHalf(k ringpool.Key, need uint32, st *ringpool.Stats) (ringpool.Span, error) {
	old, ok := dp.pool.Region(k)
	if ok && old.N >= need {
		return old, nil
	}
	s, err := dp.pool.Alloc(k, need, mapMover{dp}, st)
	if err != nil {
		return ringpool.Span{}, ringsFull(err)
	}
	dp.ringMem.clearRange(s.Base, s.N)
	if ok {
		if err := (mapMover{dp}).Move(k, old, s); err != nil {
			return ringpool.Span{}, err
		}
		dp.pool.Quarantine(old)
	}
	return s, nil
}

// ringsFull makes the pool's *ringpool.FullError this map's FullError,
// which names the map and its flag; other errors pass unchanged.
func ringsFull(err error) error {
	var fe *ringpool.FullError
	if !errors.As(err, &fe) {
		return err
	}
	return &FullError{Map: "rings", Size: fe.Size, Used: fe.Used, Need: fe.Need,
		What: fmt.Sprintf("service %d's ring of %d slots (half %d)", fe.Key.Svc, fe.Need, fe.Key.Half)}
}

// pointedAt reports whether a row points at k's region.
func (dp *Datapath) pointedAt(k ringpool.Key) bool {
	s, ok := dp.pool.Region(k)
	slot, has := dp.svcSlots.byID[k.Svc]
	if !ok || !has {
		return false
	}
	ring := dp.svcMem.load64(slot, svcOffRing)
	return ring != 0 && uint32(ring) == s.Base
}

// emptiedBy reports whether deleting slots leaves k's region without a
// set slot.
func (dp *Datapath) emptiedBy(k ringpool.Key, slots []uint32) bool {
	s, _ := dp.pool.Region(k)
	gone := make([]bool, s.N)
	for _, i := range slots {
		if i < s.N {
			gone[i] = true
		}
	}
	for i := uint32(0); i < s.N; i++ {
		if !gone[i] && uint32(dp.ringMem.load64(s.Base+i, 0)) != 0 {
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
func (dp *Datapath) applyRings(run []compiler.Change, st *ringpool.Stats) (int, error) {
	halves := map[ringpool.Key]*halfChanges{}
	group := func(i int) (ringpool.Key, int) { // the key of run[i] and the end of its group
		k := ringpool.Key{Svc: run[i].Ring.ServiceID, Half: run[i].Ring.Half}
		j := i + 1
		for j < len(run) && run[j].Ring.ServiceID == k.Svc && run[j].Ring.Half == k.Half {
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
		if _, held := dp.pool.Region(k); held && len(h.dels) > 0 && h.need == 0 && !dp.pointedAt(k) && dp.emptiedBy(k, h.dels) {
			dp.pool.Release(k)
			h.free = true
		}
	}
	if writes && dp.pool.Quarantined() {
		// Regions freed before (by this run, or by an Apply microseconds
		// ago): a grace, and first fit has them again.
		if err := dp.Grace(); err != nil {
			return 0, err
		}
		st.Graces++
	}
	stored := 0
	for i := 0; i < len(run); {
		k, j := group(i)
		h := halves[k]
		if h.free {
			i = j
			continue
		}
		s, held := dp.pool.Region(k)
		for _, c := range run[i:j] {
			e := c.Ring
			if c.Op == compiler.Delete {
				if held && e.Slot < s.N {
					dp.ringMem.store64(s.Base+e.Slot, 0, 0)
					stored++
				}
				continue // else not held: already the state we want
			}
			if !held || e.Slot >= s.N {
				var err error
				if s, err = dp.ringHalf(k, h.need, st); err != nil {
					return stored, fmt.Errorf("%s: %w", c, err)
				}
				held = true
			}
			v := uint64(dp.beSlots.get(e.BackendID))<<32 | uint64(e.BackendID)
			dp.ringMem.store64(s.Base+e.Slot, 0, v)
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
	var out []compiler.RingRows
	for _, k := range dp.pool.Keys() {
		s, _ := dp.pool.Region(k)
		n := s.N
		for n > 0 && uint32(dp.ringMem.load64(s.Base+n-1, 0)) == 0 {
			n--
		}
		if n == 0 {
			continue
		}
		half := make([]uint32, n)
		for i := uint32(0); i < n; i++ {
			half[i] = uint32(dp.ringMem.load64(s.Base+i, 0))
		}
		if len(out) == 0 || out[len(out)-1].ServiceID != k.Svc {
			out = append(out, compiler.RingRows{ServiceID: k.Svc})
		}
		out[len(out)-1].Halves[k.Half] = half
	}
	return out
}
