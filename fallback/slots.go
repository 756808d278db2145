package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/lbc-dev/lbc/internal/ringpool"
)

// noSlot marks a reference to a row the maps do not hold (a VIP of a
// service, or a ring slot of a backend, that is absent): the program finds
// no row there and treats it as missing, as it would a missing hash entry.
const noSlot = ^uint32(0)

// slots gives each live service or backend ID a slot (an index in its
// array map). The compiler never reuses IDs, so IDs grow without bound
// while the arrays do not; slots are reused. The kernel's arrays are the
// truth (each row holds its ID, 0 in a free slot): the index is rebuilt
// from them, so a new process finds the slots the last one gave.
//
// A slot freed during an Apply is not given out again before the next
// Apply: the deletes of a diff come after every write that could still
// point at the old row (VIPs and rings first), but a packet that read a
// reference just before must not find a different row there.
type slots struct {
	size       uint32
	byID       map[uint32]uint32 // ID → slot
	bySlot     map[uint32]uint32 // slot → ID
	quarantine map[uint32]bool   // slots freed in this Apply
}

func newSlots(size uint32) *slots {
	return &slots{size: size, byID: map[uint32]uint32{}, bySlot: map[uint32]uint32{}, quarantine: map[uint32]bool{}}
}

// get returns the slot of id, or noSlot.
func (s *slots) get(id uint32) uint32 {
	if slot, ok := s.byID[id]; ok {
		return slot
	}
	return noSlot
}

// alloc returns id's slot, giving it a free one if it has none (fresh is
// then true). It tries id mod size first, so that IDs allocated close
// together by concurrent writers rarely want the same slot.
func (s *slots) alloc(id uint32) (slot uint32, fresh bool, err error) {
	if slot, ok := s.byID[id]; ok {
		return slot, false, nil
	}
	if uint32(len(s.bySlot)+len(s.quarantine)) >= s.size {
		return 0, false, &FullError{Size: s.size, Used: uint32(len(s.bySlot) + len(s.quarantine)), Need: 1}
	}
	slot = id % s.size
	for {
		if _, used := s.bySlot[slot]; !used && !s.quarantine[slot] {
			break
		}
		slot = (slot + 1) % s.size
	}
	s.byID[id], s.bySlot[slot] = slot, id
	return slot, true, nil
}

// free releases id's slot (quarantined until endApply) and returns it.
func (s *slots) free(id uint32) (uint32, bool) {
	slot, ok := s.byID[id]
	if !ok {
		return 0, false
	}
	delete(s.byID, id)
	delete(s.bySlot, slot)
	s.quarantine[slot] = true
	return slot, true
}

func (s *slots) endApply() { clear(s.quarantine) }

// scanArray calls fn for every element of an array map, in batches where
// the kernel supports them.
func scanArray[V any](m *ebpf.Map, fn func(slot uint32, v *V)) error {
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			fn(keys[i], &vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			var k uint32
			var v V
			it := m.Iterate()
			for it.Next(&k, &v) {
				fn(k, &v)
			}
			return it.Err()
		}
		if err != nil {
			return err
		}
	}
}

// scanRows calls fn for every row of a service or backend array whose ID
// (the value's first word) is not 0, reading the rows through the
// array's memory mapping: no syscall per element (a batch lookup of the
// 65,536 backend rows took ≈ 15 ms here).
func scanRows[V any](rm *rowMem, fn func(slot uint32, v *V)) error {
	var v V
	for slot := uint32(0); slot < rm.n; slot++ {
		off := rm.at(slot)
		if binary.LittleEndian.Uint32(rm.mem[off:]) == 0 {
			continue
		}
		if _, err := binary.Decode(rm.mem[off:off+int(rm.vsize)], binary.LittleEndian, &v); err != nil {
			return fmt.Errorf("row %d: %w", slot, err)
		}
		fn(slot, &v)
	}
	return nil
}

// loadIndex rebuilds the slot indexes and the rings pool from the
// service and backend arrays, and calls the functions given (if any) for
// every live row.
func (dp *Datapath) loadIndex(onService func(*serviceVal), onBackend func(*backendVal)) error {
	svc := newSlots(dp.Services.MaxEntries())
	pool := ringpool.New(dp.Rings.MaxEntries())
	if err := scanRows(dp.svcMem, func(slot uint32, v *serviceVal) {
		svc.byID[v.Id], svc.bySlot[slot] = slot, v.Id
		if s, ok := activeRegion(v, pool.Size()); ok {
			// Rows do not overlap, except in a read torn by another
			// process's compaction (one row read before its region
			// moved, another after moving into the place it left): the
			// row read first keeps the space.
			_ = pool.Place(ringpool.Key{Svc: v.Id, Half: v.ActiveHalf & 1}, s)
		}
		if onService != nil {
			onService(v)
		}
	}); err != nil {
		return fmt.Errorf("read services: %w", err)
	}
	be := newSlots(dp.Backends.MaxEntries())
	if err := scanRows(dp.beMem, func(slot uint32, v *backendVal) {
		be.byID[v.Id], be.bySlot[slot] = slot, v.Id
		if onBackend != nil {
			onBackend(v)
		}
	}); err != nil {
		return fmt.Errorf("read backends: %w", err)
	}
	if dp.pool != nil {
		keepOwnHalves(pool, dp.pool, svc)
	}
	pool.Rebuild()
	dp.svcSlots, dp.beSlots, dp.pool = svc, be, pool
	return nil
}

// activeRegion is the region a service row points at: from its ring word
// (the first index; ring_base equals it in rows this loader writes, and
// is the start of both halves in rows of loaders before issue 35, whose
// region held two halves of ring_cap each), ring_cap long. A row whose
// ring word is 0 points at nothing.
func activeRegion(v *serviceVal, size uint32) (ringpool.Span, bool) {
	if v.Ring == 0 {
		return ringpool.Span{}, false
	}
	s := ringpool.Span{Base: uint32(v.Ring), N: max(v.RingCap, uint32(v.Ring>>32))}
	if s.Base >= size {
		return ringpool.Span{}, false
	}
	s.N = min(s.N, size-s.Base)
	return s, true
}

// keepOwnHalves adds to pool, rebuilt from the rows, what only this
// process knows: the inactive halves it wrote and has not freed, and the
// quarantine of an Apply in progress, where no row (another process's
// write) has taken the space since.
func keepOwnHalves(pool, old *ringpool.Pool, svc *slots) {
	type held struct {
		k ringpool.Key
		s ringpool.Span
	}
	keys := old.Keys()
	own := make([]held, 0, len(keys))
	for _, k := range keys {
		s, _ := old.Region(k)
		own = append(own, held{k, s})
	}
	sort.Slice(own, func(i, j int) bool { return own[i].s.Base < own[j].s.Base })
	for _, h := range own {
		if _, has := pool.Region(h.k); has {
			continue
		}
		if _, row := svc.byID[h.k.Svc]; !row {
			continue
		}
		// Place refuses the region where a row has taken the space.
		_ = pool.Place(h.k, h.s)
	}
	taken := make([]ringpool.Span, 0, len(own))
	for _, k := range pool.Keys() {
		s, _ := pool.Region(k)
		taken = append(taken, s)
	}
	sort.Slice(taken, func(i, j int) bool { return taken[i].Base < taken[j].Base })
	for _, s := range old.QuarantinedSpans() {
		i := sort.Search(len(taken), func(i int) bool { return taken[i].End() > s.Base })
		if i == len(taken) || !taken[i].Overlaps(s) {
			pool.Quarantine(s)
		}
	}
}

func (dp *Datapath) index() error {
	if dp.svcSlots != nil && dp.beSlots != nil && dp.pool != nil {
		return nil
	}
	return dp.loadIndex(nil, nil)
}
