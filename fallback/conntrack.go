package fallback

import (
	"errors"
	"fmt"
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
		if err := dp.Conntrack.Lookup(&k, &old); err == nil && old.Epoch == e.Epoch && dp.live(svcs, &k, &old, now) {
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
	n, err := dp.Conntrack.BatchUpdate(keys, vals, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		for n = 0; n < len(keys); n++ {
			if err = dp.Conntrack.Put(&keys[n], &vals[n]); err != nil {
				break
			}
		}
	}
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
		if err := dp.Conntrack.Lookup(&k, &v); errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		} else if err != nil {
			return n, fmt.Errorf("read conntrack: %w", err)
		}
		if v.Backend != e.BackendID || v.Flags&ctCopy == 0 {
			continue
		}
		if err := dp.Conntrack.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, fmt.Errorf("delete from conntrack: %w", err)
		}
		n++
	}
	return n, nil
}
