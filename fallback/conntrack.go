package fallback

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// The conntrack map read and written from outside the packet path, for
// fleet nodes that share their exceptions (R-FLEET): ReadConntrack walks
// it in batches, WriteConntrack stores entries a peer sent (in batches
// where the kernel has them), DeleteConntrack withdraws them.

// ReadConntrack returns the live entries (as Sessions counts them), with
// how long ago each was last seen, to the tick.
func (dp *Datapath) ReadConntrack() ([]targets.ConntrackEntry, error) {
	var out []targets.ConntrackEntry
	err := dp.walkLive(nil, func(k *ctKey, v *ctVal, idle uint64) {
		out = append(out, targets.ConntrackEntry{ServiceID: k.Service, Kind: compiler.TupleKind(k.Kind), Tuple: decodeCTKey(k),
			BackendID: v.Backend, Epoch: v.Epoch, Idle: time.Duration(idle) * dp.clock.tick, Copy: v.Flags&ctCopy != 0})
	})
	return out, err
}

// ConntrackSeen calls fn with every entry of both conntrack maps (IPv4
// and IPv6 flows), live or not: its service, tuple and backend, and the
// tick its flow was last seen at. A watcher that compares two reads tells
// from it which flows packets refreshed in between (the testbench's fleet
// scenarios: which node carries a connection).
func (dp *Datapath) ConntrackSeen(fn func(service uint32, t compiler.Tuple, backend uint32, lastSeen uint64)) error {
	return dp.walkConntrack(func(k *ctKey, v *ctVal) {
		fn(k.Service, decodeCTKey(k), v.Backend, v.LastSeen)
	})
}

func decodeCTKey(k *ctKey) compiler.Tuple {
	return compiler.Tuple{Src: addrFrom16(k.Src), Dst: addrFrom16(k.Dst), Proto: k.Proto, SrcPort: k.Sport, DstPort: k.Dport}
}

func encodeCTKey(e *targets.ConntrackEntry) ctKey {
	t := e.Tuple
	k := ctKey{Service: e.ServiceID, Kind: uint8(e.Kind), Family: 4, Src: addr16(t.Src), Dst: addr16(t.Dst)}
	if t.Dst.Is6() && !t.Dst.Is4In6() {
		k.Family = 6
	}
	if e.Kind >= compiler.Tuple3 {
		k.Proto = t.Proto
	}
	if e.Kind == compiler.Tuple5 {
		k.Sport, k.Dport = t.SrcPort, t.DstPort
	}
	return k
}

// The conntrack is two maps: conntrack4 holds IPv4 flows under a 20-byte
// key (ctKey4), conntrack the others (ctKey, 44 bytes). The Go side reads
// and writes every entry as a ctKey; these convert and pick the map.

// narrow returns k's conntrack4 key when k is an IPv4 flow's.
func narrow(k *ctKey) (ctKey4, bool) {
	if k.Family != 4 {
		return ctKey4{}, false
	}
	src, dst := netip.AddrFrom16(k.Src), netip.AddrFrom16(k.Dst)
	return ctKey4{Service: k.Service, Kind: k.Kind, Proto: k.Proto, Sport: k.Sport, Dport: k.Dport, Src: word4(src), Dst: word4(dst)}, true
}

// widen is the ctKey of a conntrack4 key.
func widen(k *ctKey4) ctKey {
	return ctKey{Service: k.Service, Kind: k.Kind, Proto: k.Proto, Family: 4, Sport: k.Sport, Dport: k.Dport,
		Src: addr16(addrOfWord(k.Src)), Dst: addr16(addrOfWord(k.Dst))}
}

// ctLookup reads k's entry from its map.
func (dp *Datapath) ctLookup(k *ctKey, v *ctVal) error {
	if k4, ok := narrow(k); ok {
		return dp.Conntrack4.Lookup(&k4, v)
	}
	return dp.Conntrack.Lookup(k, v)
}

// ctDelete removes k's entry from its map.
func (dp *Datapath) ctDelete(k *ctKey) error {
	if k4, ok := narrow(k); ok {
		return dp.Conntrack4.Delete(&k4)
	}
	return dp.Conntrack.Delete(k)
}

// ctPut writes entries into their maps, in batches where the kernel has
// them, and returns how many it wrote.
func (dp *Datapath) ctPut(keys []ctKey, vals []ctVal) (int, error) {
	var k4 []ctKey4
	var v4, v6 []ctVal
	var k6 []ctKey
	for i := range keys {
		if k, ok := narrow(&keys[i]); ok {
			k4, v4 = append(k4, k), append(v4, vals[i])
		} else {
			k6, v6 = append(k6, keys[i]), append(v6, vals[i])
		}
	}
	n4, err := putBatch(dp.Conntrack4, k4, v4)
	if err != nil {
		return n4, err
	}
	n6, err := putBatch(dp.Conntrack, k6, v6)
	return n4 + n6, err
}

func putBatch[K any](m *ebpf.Map, keys []K, vals []ctVal) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := m.BatchUpdate(keys, vals, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for n = 0; n < len(keys); n++ {
			if err = m.Put(&keys[n], &vals[n]); err != nil {
				break
			}
		}
	}
	return n, err
}

// ctCopy is the program's CT_COPY: an entry WriteConntrack stored that no
// packet has refreshed since (the program clears it on a hit).
const ctCopy = 1

// WriteConntrack stores each entry as a copy last seen Idle ago (rounded
// down to a tick: it expires no earlier than at its owner, R-AGE), unless
// the map holds a live entry of the same epoch for its key that was seen
// at least as recently (the flow is on this node now); over such an entry
// on the same backend seen less recently it only moves the last-seen time
// and keeps the entry's flag (an entry this node's traffic refreshed
// stays its own). An entry on a backend the maps do not hold is skipped.
// It returns how many it stored.
func (dp *Datapath) WriteConntrack(es []targets.ConntrackEntry) (int, error) {
	svcs, err := dp.serviceRows()
	if err != nil {
		return 0, err
	}
	now, err := dp.now()
	if err != nil {
		return 0, err
	}
	keys := make([]ctKey, 0, len(es))
	vals := make([]ctVal, 0, len(es))
	for i := range es {
		e := &es[i]
		slot := dp.beSlots.get(e.BackendID)
		if slot == noSlot {
			continue
		}
		ls := now - min(now, uint64(e.Idle/dp.clock.tick))
		k := encodeCTKey(e)
		flags := uint32(ctCopy)
		var old ctVal
		if err := dp.ctLookup(&k, &old); err == nil && old.Epoch == e.Epoch && dp.live(svcs, &k, &old, now) {
			if old.LastSeen >= ls {
				continue
			}
			if old.Backend == e.BackendID {
				flags = old.Flags
			}
		} else if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("read conntrack: %w", err)
		}
		keys = append(keys, k)
		vals = append(vals, ctVal{Backend: e.BackendID, Epoch: e.Epoch, LastSeen: ls, Slot: slot, Flags: flags})
	}
	if len(keys) == 0 {
		return 0, nil
	}
	n, err := dp.ctPut(keys, vals)
	if err != nil {
		return n, fmt.Errorf("write conntrack (%d of %d entries written): %w", n, len(keys), err)
	}
	return n, nil
}

// DeleteConntrack removes each entry's key when the stored entry is on
// e.BackendID and is still a copy (no packet refreshed it since
// WriteConntrack stored it), and returns how many it removed.
func (dp *Datapath) DeleteConntrack(es []targets.ConntrackEntry) (int, error) {
	n := 0
	for i := range es {
		e := &es[i]
		k := encodeCTKey(e)
		var v ctVal
		if err := dp.ctLookup(&k, &v); errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		} else if err != nil {
			return n, fmt.Errorf("read conntrack: %w", err)
		}
		if v.Backend != e.BackendID || v.Flags&ctCopy == 0 {
			continue
		}
		if err := dp.ctDelete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, fmt.Errorf("delete from conntrack: %w", err)
		}
		n++
	}
	return n, nil
}
