package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// StatNames are the global counters of the `stats` map, in index order.
var StatNames = []string{"packets", "not-ours", "forward", "drop-no-backends", "drop-malformed", "drop-no-tunnel-source",
	"ct-hit", "ct-miss", "ct-new", "ct-untracked", "fragments", "icmp-errors", "too-big", "vlan", "forward-oversize"}

// ServiceCounters and BackendCounters are summed over CPUs. NewConns and
// ICMPErrorMisses count as lb.p4's service_new_conns and
// service_icmp_error_misses (bpf/stats.h).
type ServiceCounters struct{ Packets, Bytes, NewConns, Drops, ICMPErrorMisses uint64 }

// BackendCounters count a backend's packets and new connections.
type BackendCounters struct{ Packets, NewConns uint64 }

// Stats is a snapshot of every counter.
type Stats struct {
	Global   map[string]uint64
	Services map[uint32]ServiceCounters
	Backends map[uint32]BackendCounters
}

// ReadStats sums the per-CPU counters.
func (dp *Datapath) ReadStats() (Stats, error) {
	s := Stats{Global: map[string]uint64{}, Services: map[uint32]ServiceCounters{}, Backends: map[uint32]BackendCounters{}}
	var per []lbCounters
	if err := dp.Stats.Lookup(uint32(0), &per); err != nil {
		return s, fmt.Errorf("read counters: %w", err)
	}
	for _, c := range per {
		for i, name := range StatNames {
			s.Global[name] += c.N[i]
		}
	}
	// Per-service and per-backend counters sit at their row's slot.
	if err := dp.loadIndex(nil, nil); err != nil {
		return s, err
	}
	if err := readPerCPU(dp.ServiceStats, dp.svcSlots.bySlot, func(id uint32, sv []svcStats) {
		var c ServiceCounters
		for _, v := range sv {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.NewConns += v.NewConns
			c.Drops += v.Drops
			c.ICMPErrorMisses += v.IcmpErrorMisses
		}
		s.Services[id] = c
	}); err != nil {
		return s, fmt.Errorf("read service counters: %w", err)
	}
	if err := readPerCPU(dp.BackendStats, dp.beSlots.bySlot, func(id uint32, bv []beStats) {
		var c BackendCounters
		for _, v := range bv {
			c.Packets += v.Packets
			c.NewConns += v.NewConns
		}
		s.Backends[id] = c
	}); err != nil {
		return s, fmt.Errorf("read backend counters: %w", err)
	}
	return s, nil
}

// perBatchRow: readPerCPU reads a whole per-CPU array once its rows are
// more than one slot in perBatchRow (a variable for the tests).
var perBatchRow uint64 = 8

// readPerCPU calls fn with the per-CPU values of m (a per-CPU array) at
// every slot of bySlot (slot → row ID). Rows take slot ID mod size, so they
// spread over the array. Measured here (2 CPUs, BenchmarkReadStats): a
// lookup per row ≈ 7 µs (a syscall and a decode per CPU), a batch read ≈
// 0.6 µs per element of the array, so a few rows are looked up one by one
// and, from an eighth of the array on, the array is read whole.
func readPerCPU[V any](m *ebpf.Map, bySlot map[uint32]uint32, fn func(id uint32, vals []V)) error {
	cpus := possibleCPUs()
	byRow := func() error {
		var vals []V
		for slot, id := range bySlot {
			if err := m.Lookup(slot, &vals); err != nil {
				return fmt.Errorf("row %d (slot %d): %w", id, slot, err)
			}
			fn(id, vals)
		}
		return nil
	}
	if uint64(len(bySlot))*perBatchRow < uint64(m.MaxEntries()) {
		return byRow()
	}
	const chunk = 256 // × CPUs values: 1 MiB of backend_stats at 256 CPUs
	keys := make([]uint32, chunk)
	vals := make([]V, chunk*cpus)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		if errors.Is(err, ebpf.ErrNotSupported) && n == 0 {
			return byRow() // a kernel before 5.6: no batches on arrays
		}
		for i := 0; i < n; i++ {
			if id, ok := bySlot[keys[i]]; ok {
				fn(id, vals[i*cpus:(i+1)*cpus])
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Sessions counts the live conntrack entries of every service whose row
// the maps hold (services with none get 0), by walking the conntrack map
// in batches: about 17 MB for a full 262,144-entry table, tens of
// milliseconds, so it suits a scrape, not a packet path. An entry is live
// when it has not aged out (R-AGE), belongs to the service's current epoch
// (R-EPOCH), and its backend row is still there and before its deadline
// (R-DRAIN, R-PERSIST-CAP) — what a packet of the flow would find valid,
// except that an entry on an unhealthy backend is counted whether or not
// its protocol persists (that depends on the packet, R-PERSIST). The walk
// is not atomic: entries created, refreshed or evicted while it runs may
// be counted or not.
func (dp *Datapath) Sessions() (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	err := dp.walkLive(func(svcs map[uint32]serviceVal) {
		for id := range svcs {
			out[id] = 0
		}
	}, func(k *ctKey, _ *ctVal, _ uint64) { out[k.Service]++ })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// walkLive calls fn with every live conntrack entry (as Sessions defines
// it) and how many ticks ago it was last seen, after calling services
// with the service rows it judges them by.
func (dp *Datapath) walkLive(services func(map[uint32]serviceVal), fn func(k *ctKey, v *ctVal, idle uint64)) error {
	svcs, err := dp.serviceRows()
	if err != nil {
		return err
	}
	if services != nil {
		services(svcs)
	}
	now, err := dp.now()
	if err != nil {
		return err
	}
	return dp.walkConntrack(func(k *ctKey, v *ctVal) {
		if dp.live(svcs, k, v, now) {
			fn(k, v, now-v.LastSeen)
		}
	})
}

// serviceRows reloads the slot index and returns the service rows by ID,
// what live judges entries by.
func (dp *Datapath) serviceRows() (map[uint32]serviceVal, error) {
	svcs := map[uint32]serviceVal{}
	err := dp.loadIndex(func(v *serviceVal) { svcs[v.Id] = *v }, nil)
	return svcs, err
}

// live reports whether a conntrack entry is valid at now by every rule
// but R-PERSIST, which depends on the packet: its service's idle timeout
// and epoch (svcs), and its backend row's id, service and deadline.
func (dp *Datapath) live(svcs map[uint32]serviceVal, k *ctKey, v *ctVal, now uint64) bool {
	s, ok := svcs[k.Service]
	if !ok || now-v.LastSeen >= s.Idle || v.Epoch != s.Epoch || v.Slot >= dp.beMem.n {
		return false
	}
	// The backend row's id, service and deadline (struct backend), read
	// in place.
	le := binary.LittleEndian
	row := dp.beMem.mem[dp.beMem.at(v.Slot):]
	dl := le.Uint64(row[8:])
	return le.Uint32(row[0:]) == v.Backend && le.Uint32(row[4:]) == k.Service && (dl == 0 || now < dl)
}

// walkConntrack calls fn with every stored conntrack entry, IPv4 flows
// (conntrack4, their keys widened to ctKey) and the others, in batches of
// 16,384 (one element at a time on a kernel without batch lookups).
func (dp *Datapath) walkConntrack(fn func(k *ctKey, v *ctVal)) error {
	if err := walkMap(dp.Conntrack4, func(k *ctKey4, v *ctVal) {
		w := widen(k)
		fn(&w, v)
	}); err != nil {
		return fmt.Errorf("read conntrack4: %w", err)
	}
	if err := walkMap(dp.Conntrack, fn); err != nil {
		return fmt.Errorf("read conntrack: %w", err)
	}
	return nil
}

func walkMap[K any](m *ebpf.Map, fn func(k *K, v *ctVal)) error {
	const chunk = 16384
	keys := make([]K, chunk)
	vals := make([]ctVal, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			fn(&keys[i], &vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			var k K
			var v ctVal
			it := m.Iterate()
			for it.Next(&k, &v) {
				fn(&k, &v)
			}
			return it.Err()
		}
		if err != nil {
			return err
		}
	}
}

// now is the program's clock now: the current jiffy in production, the
// virtual clock's last reading in the test build.
func (dp *Datapath) now() (uint64, error) {
	if dp.test {
		var t uint64
		if err := dp.Clock.Lookup(uint32(0), &t); err != nil {
			return 0, fmt.Errorf("read the virtual clock: %w", err)
		}
		return t, nil
	}
	return dp.clock.ticksOf(monotonic()), nil
}
