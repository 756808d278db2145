package fallback

import (
	"fmt"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
)

// applyServices writes a run of service inserts and modifies (the flips of
// a diff) and returns the syscalls it took.
//
// The program reads a row's ring word when it selects a backend and its
// epoch after, when it makes the conntrack entry: two words, read one
// after the other. No order of two stores keeps every packet on one
// version when both change (R-EPOCH: a failover with
// disableConnectionDrainOnFailover): epoch first lets a packet pair the
// old ring with the new epoch, an entry valid in the new version on a
// backend the old ring chose; ring first lets it pair the new ring with
// the old epoch. Only the first is wrong: such an entry is invalid once
// the new epoch lands, and the packet after it lands, where the new ring
// puts it, on the same backend. So a row whose ring word and epoch both
// change gets its ring word, then a grace (no packet that read the old
// ring word is still in the program), then the rest of the row, the epoch
// with it; one grace serves the whole run.
func (dp *Datapath) applyServices(run []compiler.Change, st *ringpool.Stats) (int, error) {
	type write struct {
		slot  uint32
		fresh bool
	}
	ws := make([]write, len(run))
	syscalls := 0
	// Slots first, and rings no shorter than the rows say (a row's ring
	// size beyond its region would read other rings' entries): growing a
	// region may compact, which moves regions and repoints rows, so no
	// row is encoded before all are placed.
	for i, c := range run {
		s := c.Service
		if s.ID == 0 {
			return syscalls, fmt.Errorf("%s: service %q: ID 0 is reserved", c, s.Name)
		}
		slot, fresh, err := dp.svcSlots.alloc(s.ID)
		if err != nil {
			return syscalls, fmt.Errorf("%s: %w", c, fullOf(err, "services", fmt.Sprintf("service %d", s.ID)))
		}
		if fresh {
			// The slot's counters may be a previous service's.
			syscalls++
			if err := dp.ServiceStats.Put(slot, make([]svcStats, possibleCPUs())); err != nil {
				dp.svcSlots.free(s.ID)
				return syscalls, fmt.Errorf("%s: %w", c, err)
			}
		}
		ws[i] = write{slot, fresh}
		k := ringpool.Key{Svc: s.ID, Half: s.ActiveHalf & 1}
		if r, ok := dp.pool.Region(k); ok && s.ActiveHalf < 2 && s.RingSize > r.N {
			if _, err := dp.ringHalf(k, s.RingSize, st); err != nil {
				return syscalls, fmt.Errorf("%s: %w", c, err)
			}
		}
	}
	vals := make([]serviceVal, len(run))
	split := false
	for i, c := range run {
		s := c.Service
		var reg ringpool.Span
		if s.ActiveHalf < 2 {
			reg, _ = dp.pool.Region(ringpool.Key{Svc: s.ID, Half: s.ActiveHalf})
		}
		vals[i] = encodeService(s, reg, dp.clock)
		if ws[i].fresh {
			continue
		}
		old, err := dp.serviceRow(ws[i].slot)
		if err != nil {
			return syscalls, err
		}
		if old.Ring != vals[i].Ring && old.Epoch != vals[i].Epoch {
			dp.svcMem.store64(ws[i].slot, svcOffRing, vals[i].Ring)
			split = true
		}
	}
	if split {
		if err := dp.Grace(); err != nil {
			return syscalls, fmt.Errorf("between the ring words and the epochs of %d services: %w", len(run), err)
		}
		st.Graces++
	}
	for i := range run {
		dp.writeService(ws[i].slot, &vals[i], ws[i].fresh)
	}
	return syscalls, nil
}
