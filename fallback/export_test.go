package fallback

import (
	"errors"
	"fmt"

	"github.com/lbc-dev/lbc/internal/ringpool"
)

// VIPFilterBit exposes vipFilterBit to the external tests.
var VIPFilterBit = vipFilterBit

// ReadCountersBy makes ReadStats read the per-CPU counter arrays row by
// row ("rows") or whole, in batches ("batch"), until restore is called.
func ReadCountersBy(how string) (restore func()) {
	old := perBatchRow
	perBatchRow = 0 // rows × 0 < size: row by row
	if how == "batch" {
		perBatchRow = 1 << 32
	}
	return func() { perBatchRow = old }
}

// ReserveRings gives services ids a region of cap entries of `rings` each
// (their half 0), without rows or ring slots (as if they held rings at
// rest), so that a test reaches the end of a large map without writing
// every ring before it. It places by first fit only: it neither moves
// regions nor waits for a grace.
func ReserveRings(dp *Datapath, ids []uint32, cap uint32) error {
	if err := dp.index(); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := dp.pool.Alloc(ringpool.Key{Svc: id, Half: 0}, cap, noMoves{}, &ringpool.Stats{}); err != nil {
			return ringsFull(err)
		}
	}
	return nil
}

// noMoves is a mover for allocations that must neither move regions nor
// wait for a grace: it refuses both.
type noMoves struct{}

func (noMoves) Move(k ringpool.Key, from, to ringpool.Span) error {
	return fmt.Errorf("move of service %d half %d from %v to %v: this allocation may not move regions", k.Svc, k.Half, from, to)
}

func (noMoves) Grace() error { return errors.New("this allocation may not wait for a grace") }

// SetGrace replaces dp's wait for packets in flight (grace.go), for a test
// that counts the waits or makes them take time; nil restores the RCU
// grace.
func SetGrace(dp *Datapath, grace func() error) { dp.grace = grace }

// HeldRegions returns the regions of the ring halves dp holds, by service
// and half: [base, base+n).
func HeldRegions(dp *Datapath) map[[2]uint32][2]uint32 {
	out := map[[2]uint32][2]uint32{}
	if err := dp.index(); err != nil {
		panic(err)
	}
	for _, k := range dp.pool.Keys() {
		s, _ := dp.pool.Region(k)
		out[[2]uint32{k.Svc, uint32(k.Half)}] = [2]uint32{s.Base, s.N}
	}
	return out
}

// ConntrackEntry is one conntrack entry as the map holds it, valid or not.
type ConntrackEntry struct {
	Service, Backend, Epoch uint32
	Src, Dst                [16]byte
}

// AllConntrack returns every entry of the conntrack maps (conntrack4 and
// conntrack), stale ones too (ReadConntrack returns the valid ones).
func AllConntrack(dp *Datapath) ([]ConntrackEntry, error) {
	var out []ConntrackEntry
	err := dp.walkConntrack(func(k *ctKey, v *ctVal) {
		out = append(out, ConntrackEntry{Service: k.Service, Backend: v.Backend, Epoch: v.Epoch, Src: k.Src, Dst: k.Dst})
	})
	return out, err
}

// SetRingRecord writes service id's ring_base and ring_cap as given (its
// ring word unchanged): rows as an lbc before issue 35 recorded them, one
// region of two halves of cap entries from base.
func SetRingRecord(dp *Datapath, id, base, cap uint32) error {
	if err := dp.index(); err != nil {
		return err
	}
	slot, ok := dp.svcSlots.byID[id]
	if !ok {
		return fmt.Errorf("no service %d", id)
	}
	dp.svcMem.store64(slot, svcOffRegion, uint64(cap)<<32|uint64(base))
	return nil
}

// RCUGrace is the grace dp waits for when no test replaces it.
func RCUGrace(dp *Datapath) error { return dp.rcuWait() }

// SetMovePause makes every region move of dp call pause between its copy
// and its repoint, so that traffic meets moves half-done.
func SetMovePause(dp *Datapath, pause func()) { dp.movePause = pause }
