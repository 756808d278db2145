package fallback

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/lbc-dev/lbc/compiler"
)

// ApplyResult counts what Apply wrote.
type ApplyResult struct {
	Writes  int // map elements written or deleted
	Batches int // syscalls
}

// Apply writes the changes into the maps in their order (compiler.DiffIR
// orders them so that a packet never sees a half-written ring: ring slots
// of the inactive half first, the service row that flips the half after).
// Runs of consecutive ring writes go in batches of up to batchSize per
// syscall; a batch never crosses a change of table or operation, so the
// order holds. On error, what was written stays written.
func (dp *Datapath) Apply(changes []compiler.Change) (ApplyResult, error) {
	var res ApplyResult
	if err := dp.index(); err != nil {
		return res, err
	}
	defer dp.svcSlots.endApply()
	defer dp.beSlots.endApply()
	vipDeleted := false
	for i := 0; i < len(changes); {
		c := changes[i]
		if c.Ring != nil {
			j := i
			for j < len(changes) && j-i < batchSize && changes[j].Ring != nil && (changes[j].Op == Delete) == (c.Op == Delete) {
				j++
			}
			if err := dp.applyRings(changes[i:j], c.Op == Delete, &res); err != nil {
				return res, err
			}
			i = j
			continue
		}
		if err := dp.applyOne(c); err != nil {
			return res, fmt.Errorf("%s: %w", c, err)
		}
		res.Writes++
		res.Batches++
		vipDeleted = vipDeleted || c.VIP != nil && c.Op == Delete
		i++
	}
	if vipDeleted {
		// After the deletes: a bit cleared now guards no VIP.
		if err := dp.syncVIPFilter(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Delete is compiler.Delete, for brevity here.
const Delete = compiler.Delete

const batchSize = 8192

func (dp *Datapath) applyRings(run []compiler.Change, del bool, res *ApplyResult) error {
	keys := make([]ringKey, len(run))
	vals := make([]ringVal, len(run))
	for k, c := range run {
		key, err := encodeRingKey(c.Ring)
		if err != nil {
			return err
		}
		keys[k], vals[k] = key, ringVal{Backend: c.Ring.BackendID, Slot: dp.beSlots.get(c.Ring.BackendID)}
	}
	var err error
	if del {
		_, err = dp.Rings.BatchDelete(keys, nil)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			err = nil // already gone: the state we want
		}
	} else {
		_, err = dp.Rings.BatchUpdate(keys, vals, nil)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		// Old kernels: one element per syscall.
		for k := range keys {
			if del {
				err = dp.Rings.Delete(&keys[k])
				if errors.Is(err, ebpf.ErrKeyNotExist) {
					err = nil
				}
			} else {
				err = dp.Rings.Put(&keys[k], &vals[k])
			}
			if err != nil {
				return fmt.Errorf("%s: %w", run[k], err)
			}
			res.Batches++
		}
		res.Writes += len(keys)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s (and %d more ring writes): %w", run[0], len(run)-1, err)
	}
	res.Writes += len(keys)
	res.Batches++
	return nil
}

func (dp *Datapath) applyOne(c compiler.Change) error {
	del := c.Op == compiler.Delete
	switch {
	case c.VIP != nil:
		k := encodeVIPKey(c.VIP.Key)
		if del {
			return ignoreMissing(dp.Vips.Delete(&k))
		}
		if err := dp.setVIPFilterBit(k.Addr); err != nil {
			return err
		}
		return dp.Vips.Put(&k, vipVal{Id: c.VIP.ServiceID, Slot: dp.svcSlots.get(c.VIP.ServiceID)})
	case c.Service != nil:
		id := c.Service.ID
		if id == 0 {
			return fmt.Errorf("service %q: ID 0 is reserved", c.Service.Name)
		}
		if del {
			if slot, ok := dp.svcSlots.free(id); ok {
				return dp.Services.Put(slot, &serviceVal{})
			}
			return nil
		}
		slot, fresh, err := dp.svcSlots.alloc(id)
		if err != nil {
			return fmt.Errorf("services table: %w", err)
		}
		if fresh {
			// The slot's counters may be a previous service's.
			if err := dp.ServiceStats.Put(slot, make([]svcStats, possibleCPUs())); err != nil {
				dp.svcSlots.free(id)
				return err
			}
		}
		v := encodeService(c.Service)
		if err := dp.Services.Put(slot, &v); err != nil {
			if fresh {
				dp.svcSlots.free(id)
			}
			return err
		}
		return nil
	case c.Backend != nil:
		id := c.Backend.ID
		if id == 0 {
			return fmt.Errorf("backend %q: ID 0 is reserved", c.Backend.Name)
		}
		if del {
			if slot, ok := dp.beSlots.free(id); ok {
				return dp.Backends.Put(slot, &backendVal{})
			}
			return nil
		}
		v, err := encodeBackend(c.Backend)
		if err != nil {
			return err
		}
		slot, fresh, err := dp.beSlots.alloc(id)
		if err != nil {
			return fmt.Errorf("backends table: %w", err)
		}
		if fresh {
			if err := dp.BackendStats.Put(slot, make([]beStats, possibleCPUs())); err != nil {
				dp.beSlots.free(id)
				return err
			}
		}
		if err := dp.Backends.Put(slot, &v); err != nil {
			if fresh {
				dp.beSlots.free(id)
			}
			return err
		}
		return nil
	}
	return fmt.Errorf("change with no row")
}

func possibleCPUs() int {
	n, err := ebpf.PossibleCPU()
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func ignoreMissing(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// ReadTables returns the datapath fields of the four tables as the kernel
// holds them (names and informational fields are not in the maps).
func (dp *Datapath) ReadTables() (*compiler.IR, error) {
	ir := &compiler.IR{}
	{
		var k vipKey
		var v vipVal
		it := dp.Vips.Iterate()
		for it.Next(&k, &v) {
			ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: decodeVIPKey(k), ServiceID: v.Id})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("read vips: %w", err)
		}
	}
	// The arrays' rows with an ID are the rows; reading them also
	// refreshes the slot index (another process may have written).
	svc, be := newSlots(dp.Services.MaxEntries()), newSlots(dp.Backends.MaxEntries())
	if err := scanRows(dp.Services, serviceID, func(slot uint32, v *serviceVal) {
		ir.Services = append(ir.Services, decodeService(*v))
		svc.byID[v.Id], svc.bySlot[slot] = slot, v.Id
	}); err != nil {
		return nil, fmt.Errorf("read services: %w", err)
	}
	if err := scanRows(dp.Backends, backendID, func(slot uint32, v *backendVal) {
		ir.Backends = append(ir.Backends, decodeBackend(*v))
		be.byID[v.Id], be.bySlot[slot] = slot, v.Id
	}); err != nil {
		return nil, fmt.Errorf("read backends: %w", err)
	}
	dp.svcSlots, dp.beSlots = svc, be
	rings, err := dp.readRings()
	if err != nil {
		return nil, err
	}
	ir.Rings = rings
	ir.Sort()
	return ir, nil
}

func (dp *Datapath) readRings() ([]compiler.RingRows, error) {
	byService := map[uint32]*compiler.RingRows{}
	add := func(k ringKey, rv ringVal) {
		v := rv.Backend
		r := byService[k.Service]
		if r == nil {
			r = &compiler.RingRows{ServiceID: k.Service}
			byService[k.Service] = r
		}
		h := &r.Halves[k.Slot>>31]
		slot := k.Slot &^ halfBit
		for uint32(len(*h)) <= slot {
			*h = append(*h, 0)
		}
		(*h)[slot] = v
	}
	keys := make([]ringKey, batchSize)
	vals := make([]ringVal, batchSize)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := dp.Rings.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			add(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			var k ringKey
			var v ringVal
			it := dp.Rings.Iterate()
			for it.Next(&k, &v) {
				add(k, v)
			}
			if err := it.Err(); err != nil {
				return nil, fmt.Errorf("read rings: %w", err)
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read rings: %w", err)
		}
	}
	out := make([]compiler.RingRows, 0, len(byService))
	for _, r := range byService {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ServiceID < out[j].ServiceID })
	return out, nil
}
