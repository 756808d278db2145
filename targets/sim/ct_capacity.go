package sim

import (
	"fmt"
	"time"
)

// HeldLoss is the entry loss R-CT-CAP states capacity at: 1 %.
const HeldLoss = 0.01

// FlowsHeld is R-CT-CAP's fill-from-empty figure for a geometry, which
// overstates what it holds (the capacity is the steady state's,
// SteadyFlowsHeld, ct_steady.go): the largest number F of
// concurrent live flows such that, when F distinct flows are stored one per
// time step and then all looked up, at most HeldLoss of them miss. loss(n)
// is that experiment for n flows (LossAt, TNALossAt); F is searched in
// [0, max] by bisection (the loss grows with n; the flows of a smaller
// experiment are a prefix of a larger one's, from the same seed).
func FlowsHeld(loss func(n int) (float64, error), max int) (int, error) {
	lo, hi := 0, max
	for lo < hi {
		m := lo + (hi-lo+1)/2
		l, err := loss(m)
		if err != nil {
			return 0, err
		}
		if l <= HeldLoss {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo, nil
}

// TNALossAt is LossAt for the TNA geometry g, through the code the
// datapath uses (StoreIdle, LookupAt): n distinct live flows of one
// service (syntheticKey, from seed), stored one per microsecond with a
// 1-hour idle timeout, then each looked up; it returns the fraction that
// misses or finds another backend (refused, or shadowed by a false hit).
func TNALossAt(g TNAGeometry, n int, seed uint64) (float64, error) {
	t, err := NewTNA(g, 0)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, nil
	}
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = syntheticKey(seed, uint64(i))
		t.StoreIdle(keys[i], Entry{BackendID: uint32(i + 1), LastSeen: time.Duration(i) * time.Microsecond}, time.Hour)
	}
	end := time.Duration(n) * time.Microsecond
	lost := 0
	for i, k := range keys {
		if e, ok := t.LookupAt(k, end); !ok || e.BackendID != uint32(i+1) || !alive(e.Expiry, t.Tick(end)) {
			lost++
		}
	}
	return float64(lost) / float64(n), nil
}

// TNAFlowsHeld is FlowsHeld for the TNA geometry g (seed 1). The geometry
// evicts nothing, so the flows lost among the first n are those it
// refused plus any shadowed by a false hit: one pass counts the refusals
// for every n, which places the answer; the full experiment (TNALossAt)
// then confirms it, and bisection below it takes over if false hits pushed
// the loss over.
func TNAFlowsHeld(g TNAGeometry) (int, error) {
	t, err := NewTNA(g, 0)
	if err != nil {
		return 0, err
	}
	best, refused := 0, 0
	for i := 0; i < g.Slots(); i++ {
		if !t.StoreIdle(syntheticKey(1, uint64(i)), Entry{BackendID: uint32(i + 1), LastSeen: time.Duration(i) * time.Microsecond}, time.Hour) {
			refused++
		}
		if float64(refused) <= HeldLoss*float64(i+1) {
			best = i + 1
		}
	}
	loss := func(n int) (float64, error) { return TNALossAt(g, n, 1) }
	if l, err := loss(best); err != nil || l <= HeldLoss {
		return best, err
	}
	return FlowsHeld(loss, best)
}

// RegisterFlowsHeld is FlowsHeld for the v1model geometry (seed 1).
func RegisterFlowsHeld(buckets, ways int) (int, error) {
	if buckets <= 0 || ways <= 0 {
		return 0, fmt.Errorf("conntrack geometry %d buckets × %d ways: both must be positive", buckets, ways)
	}
	return FlowsHeld(func(n int) (float64, error) { return registerLoss(buckets, ways, n, 1) }, buckets*ways)
}
