package fallback

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
)

// ApplyResult counts what Apply wrote.
type ApplyResult struct {
	// Writes are the map elements written or deleted; a half's region
	// freed by its deletes counts none (its slots are left as they are).
	Writes  int
	Batches int // syscalls (ring slots and service rows are written through the maps' memory: none)
	// Compacted is the ring slots compaction copied to make room for a
	// ring that fitted only once live regions had moved (internal/ringpool).
	Compacted int
	// Graces counts the waits for the packets in flight (grace.go):
	// before ring entries freed in this Apply are given out again, and
	// between a row's new ring word and its new epoch.
	Graces int
}

// Apply writes the changes into the maps in their order (compiler.DiffIR
// orders them so that a packet never sees a half-written ring: ring slots
// of the inactive half first, the service row that flips the half after).
// On error, what was written stays written.
//
// Deadlines of backend rows (compile clock) are mapped onto the program's
// clock as targets.Clock describes: own deadline = own now + (Deadline −
// compile now), rounded up to a tick. compileNow reads the compile clock;
// the test build (whose clock is the compile clock) ignores it.
func (dp *Datapath) Apply(changes []compiler.Change, compileNow func() time.Duration) (res ApplyResult, err error) {
	if err := dp.index(); err != nil {
		return res, err
	}
	defer dp.svcSlots.endApply()
	defer dp.beSlots.endApply()
	var st ringpool.Stats
	defer func() { res.Compacted, res.Graces = int(st.Copied), st.Graces }()
	vipDeleted := false
	for i := 0; i < len(changes); {
		c := changes[i]
		if c.Ring != nil {
			j := i
			for j < len(changes) && changes[j].Ring != nil {
				j++
			}
			n, err := dp.applyRings(changes[i:j], &st)
			res.Writes += n
			if err != nil {
				return res, err
			}
			i = j
			continue
		}
		if c.Service != nil && c.Op != Delete {
			j := i
			for j < len(changes) && changes[j].Service != nil && changes[j].Op != Delete {
				j++
			}
			syscalls, err := dp.applyServices(changes[i:j], &st)
			res.Batches += syscalls
			if err != nil {
				return res, err
			}
			res.Writes += j - i
			i = j
			continue
		}
		syscalls, err := dp.applyOne(c, compileNow)
		if err != nil {
			return res, fmt.Errorf("%s: %w", c, err)
		}
		res.Writes++
		res.Batches += syscalls
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

// deadlineTicks maps a compile-clock deadline onto the program's clock.
func (dp *Datapath) deadlineTicks(d time.Duration, compileNow func() time.Duration) uint64 {
	if d == 0 {
		return 0
	}
	own := int64(d) // the test clock is the compile clock
	if !dp.test {
		if compileNow == nil {
			compileNow = func() time.Duration { return time.Duration(time.Now().UnixNano()) }
		}
		own = monotonic() + int64(d-compileNow())
	}
	return dp.clock.ticksAt(own)
}

// serviceRow reads the service row at slot through the mapping.
func (dp *Datapath) serviceRow(slot uint32) (serviceVal, error) {
	var v serviceVal
	_, err := binary.Decode(dp.svcMem.row(slot), binary.LittleEndian, &v)
	return v, err
}

// writeService writes a service row through the mapping, a word at a
// time: a new row's ID last (nothing may find it half-written); an
// existing row's ring word first, so that a flip that also changes the
// epoch never pairs the new epoch with the old ring (entries made in
// between would be valid on the old side).
func (dp *Datapath) writeService(slot uint32, v *serviceVal, fresh bool) {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, v)
	b := buf.Bytes()[:dp.svcMem.vsize]
	if fresh {
		dp.svcMem.writeRow(slot, b, nil, []uint32{svcOffID})
	} else {
		dp.svcMem.writeRow(slot, b, []uint32{svcOffRing}, nil)
	}
}

// applyOne writes one VIP, service or backend change and returns the
// number of syscalls it took.
func (dp *Datapath) applyOne(c compiler.Change, compileNow func() time.Duration) (int, error) {
	del := c.Op == compiler.Delete
	switch {
	case c.VIP != nil:
		if del {
			return 1, dp.deleteVIP(c.VIP.Key)
		}
		if err := dp.setVIPFilterBit(addr16(c.VIP.Key.VIP.Unmap())); err != nil {
			return 1, err
		}
		return 2, dp.putVIP(c.VIP.Key, vipVal{Id: c.VIP.ServiceID, Slot: dp.svcSlots.get(c.VIP.ServiceID)})
	case c.Service != nil && del:
		id := c.Service.ID
		if slot, ok := dp.svcSlots.free(id); ok {
			dp.svcMem.writeRow(slot, make([]byte, dp.svcMem.vsize), []uint32{svcOffID}, nil)
		}
		dp.pool.Release(ringpool.Key{Svc: id, Half: 0})
		dp.pool.Release(ringpool.Key{Svc: id, Half: 1})
		return 0, nil
	case c.Backend != nil:
		id := c.Backend.ID
		if id == 0 {
			return 0, fmt.Errorf("backend %q: ID 0 is reserved", c.Backend.Name)
		}
		if del {
			if slot, ok := dp.beSlots.free(id); ok {
				return 1, dp.Backends.Put(slot, &backendVal{})
			}
			return 0, nil
		}
		v, err := encodeBackend(c.Backend, dp.deadlineTicks(c.Backend.Deadline, compileNow))
		if err != nil {
			return 0, err
		}
		slot, fresh, err := dp.beSlots.alloc(id)
		if err != nil {
			return 0, fullOf(err, "backends", fmt.Sprintf("backend %d", id))
		}
		n := 1
		if fresh {
			if err := dp.BackendStats.Put(slot, make([]beStats, possibleCPUs())); err != nil {
				dp.beSlots.free(id)
				return 1, err
			}
			n++
		}
		if err := dp.Backends.Put(slot, &v); err != nil {
			if fresh {
				dp.beSlots.free(id)
			}
			return n, err
		}
		return n, nil
	}
	return 0, fmt.Errorf("change with no row")
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
// holds them (names and informational fields are not in the maps, nor are
// deadlines on the compile clock: the program holds them in its ticks).
func (dp *Datapath) ReadTables() (*compiler.IR, error) {
	ir := &compiler.IR{}
	if err := dp.eachVIP(func(k compiler.VIPKey, v vipVal) {
		ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: k, ServiceID: v.Id})
	}); err != nil {
		return nil, err
	}
	// Reading the arrays also refreshes the indexes (another process may
	// have written).
	if err := dp.loadIndex(func(v *serviceVal) {
		ir.Services = append(ir.Services, decodeService(*v))
	}, func(v *backendVal) {
		ir.Backends = append(ir.Backends, decodeBackend(*v))
	}); err != nil {
		return nil, err
	}
	ir.Rings = dp.readRings()
	ir.Sort()
	return ir, nil
}
