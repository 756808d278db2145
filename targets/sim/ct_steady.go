package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lbc-dev/lbc/internal/tick"
)

// R-CT-CAP's steady state: "holds N" means that with N flows holding
// entries, and flows ending (their entry freed) and new ones starting at
// the same rate, at most HeldLoss of the new flows are lost. A fill from
// empty (FlowsHeld) overstates it: the fill's loss is cumulative over
// flows stored while the table was emptier, and its entries sit in the
// ways a fill favours (the first), not where turnover leaves them.
//
// The experiment (steadyLoss), for a table and n:
//
//  1. fill: new flows are started until n hold an entry;
//  2. turnover, SteadyWarmup × n times, then SteadyMeasured × n times
//     counted: a live flow chosen at random ends (its entry is freed),
//     then new flows are started until n hold an entry again.
//
// A new flow is lost when it finds no entry (a refusing table, TNA: it is
// forwarded by the ring without one, holds no slot, and leaves the
// population) or when its entry evicts a live flow's (an evicting table,
// the v1model registers: the evicted flow will miss and leaves the
// population; its next packet comes back as a new flow). The loss is the
// flows lost per new flow started during the counted turnovers. A lost
// flow is not retried: each new flow is one attempt.
const (
	SteadyWarmup   = 3
	SteadyMeasured = 2
)

// steadyTable is a conntrack geometry driven by steadyLoss through the
// model's own calls.
type steadyTable interface {
	// add starts flow k at step s: the slot it took, or -1 if it found
	// none (refused). A slot taken from a live flow is an eviction.
	add(k Key, s int) int
	// end ends flow k, which holds slot, at step s: its entry is freed.
	end(k Key, slot, s int)
	// slots is the number of slots.
	slots() int
}

// steadyLoss is the experiment above at n flows, the flows and the choice
// of which ends drawn from seed. It is 1 when n flows cannot be placed.
func steadyLoss(tb steadyTable, n int, seed uint64) (float64, error) {
	if n <= 0 {
		return 0, nil
	}
	if n > tb.slots() {
		return 1, nil
	}
	type flow struct {
		k    Key
		slot int
	}
	live := make([]flow, 0, n)
	// owner[slot] is the index in live of the flow holding slot, +1; 0 when
	// no live flow holds it.
	owner := make([]int32, tb.slots())
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ab1e))
	var next uint64 // the next new flow: syntheticKey(seed, next)
	drop := func(i int) {
		owner[live[i].slot] = 0
		last := len(live) - 1
		if i != last {
			live[i] = live[last]
			owner[live[i].slot] = int32(i + 1)
		}
		live = live[:last]
	}
	// refill starts new flows until n hold an entry: the flows started and
	// lost; it gives up (ok false) after a budget no table at ≤ HeldLoss
	// comes near, so a table that cannot hold n stops.
	refill := func(s int) (started, lost int, ok bool) {
		for len(live) < n {
			if started > 64+n/8 {
				return started, lost, false
			}
			k := syntheticKey(seed, next)
			next++
			started++
			slot := tb.add(k, s)
			if slot < 0 {
				lost++
				continue
			}
			if o := owner[slot]; o != 0 {
				lost++ // a live flow's entry overwritten: it is lost
				drop(int(o - 1))
			}
			live = append(live, flow{k, slot})
			owner[slot] = int32(len(live))
		}
		return started, lost, true
	}
	if _, _, ok := refillAll(refill, n); !ok {
		return 1, nil
	}
	warm, total := SteadyWarmup*n, (SteadyWarmup+SteadyMeasured)*n
	started, lost := 0, 0
	for s := 1; s <= total; s++ {
		i := rng.IntN(len(live))
		tb.end(live[i].k, live[i].slot, s)
		drop(i)
		st, l, ok := refill(s)
		if !ok {
			return 1, nil
		}
		if s > warm {
			started += st
			lost += l
		}
	}
	if started == 0 {
		return 0, fmt.Errorf("steady state at %d flows: no new flow started", n)
	}
	return float64(lost) / float64(started), nil
}

// refillAll is the first fill, from empty: refill's budget is per
// turnover, so the fill calls it until n flows hold entries or a whole
// budget adds none.
func refillAll(refill func(int) (int, int, bool), n int) (int, int, bool) {
	for {
		st, l, ok := refill(0)
		if ok {
			return st, l, true
		}
		if st == l { // the whole budget lost: the table cannot take more
			return st, l, false
		}
	}
}

// SteadyFlowsHeld is R-CT-CAP's figure: the largest n in [0, max] whose
// steady-state loss (steadyLoss through loss) is at most HeldLoss, by
// bisection down to a step of max(1, hi/512): the loss grows with n, and
// one sample's noise (about 3 % of the rate at 1 %, from about a thousand
// lost flows per figure) is already larger than that step.
func SteadyFlowsHeld(loss func(n int) (float64, error), max int) (int, error) {
	lo, hi := 0, max
	for hi-lo > 1 && hi-lo > hi/512 {
		m := lo + (hi-lo)/2
		l, err := loss(m)
		if err != nil {
			return 0, err
		}
		if l <= HeldLoss {
			lo = m
		} else {
			hi = m
		}
	}
	if hi == max { // never measured: every midpoint was within
		if l, err := loss(hi); err != nil || l <= HeldLoss {
			return hi, err
		}
	}
	return lo, nil
}

// tnaSteady drives the TNA model: one step is one tick; a new flow is
// stored (StoreIdle) with an idle timeout longer than the experiment, so
// only its end frees it. A flow's end is its last packet with the timeout
// run out: RefreshHit with a zero timeout leaves the entry expired from
// that tick, which is how the program frees a slot (it has no delete: an
// expired slot is a free one, claimed by the next flow that needs it).
// The steady state thus counts a flow from its first packet to its
// entry's expiry; N is the entries live, idle ones included.
type tnaSteady struct {
	t    *TNA
	idle time.Duration
}

func newTNASteady(g TNAGeometry, n int) (*tnaSteady, error) {
	t, err := NewTNA(g, 0)
	if err != nil {
		return nil, err
	}
	steps := (SteadyWarmup + SteadyMeasured + 1) * n
	if steps >= 1<<30 {
		return nil, fmt.Errorf("steady state at %d flows: %d ticks pass the program's 2^31-tick alive window; measure fewer flows", n, steps)
	}
	return &tnaSteady{t: t, idle: time.Duration(steps+2) * tick.TNA}, nil
}

func (s *tnaSteady) now(step int) time.Duration { return time.Duration(step) * tick.TNA }

func (s *tnaSteady) add(k Key, step int) int {
	now := s.now(step)
	if !s.t.StoreIdle(k, Entry{BackendID: 1, LastSeen: now}, s.idle) {
		return -1
	}
	p := s.t.place(k)
	w := s.t.live(p, s.t.Tick(now))
	return w<<s.t.WayBits | int(p.idx[w])
}

func (s *tnaSteady) end(k Key, _ int, step int) { s.t.RefreshHit(k, s.now(step), 0) }

func (s *tnaSteady) slots() int { return s.t.Slots() }

// TNASteadyLoss is the steady-state loss (refusals per new flow) of the
// TNA geometry g at n live flows, from seed.
func TNASteadyLoss(g TNAGeometry, n int, seed uint64) (float64, error) {
	tb, err := newTNASteady(g, n)
	if err != nil {
		return 0, err
	}
	return steadyLoss(tb, n, seed)
}

// TNASteadyFlowsHeld is R-CT-CAP's figure for the TNA geometry g from
// seed: the flows held at ≤ 1 % steady-state refusal, searched up to the
// slots (it comes out below the fill figure, TNAFlowsHeld).
func TNASteadyFlowsHeld(g TNAGeometry, seed uint64) (int, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	return SteadyFlowsHeld(func(n int) (float64, error) { return TNASteadyLoss(g, n, seed) }, g.Slots())
}

// registerSteady drives the v1model model: Store takes the key's way (the
// same signature, else the first empty, else the least recently seen,
// evicting it). A flow's end frees its way: on the switch the ended
// flow's entry ages out and, seen least recently in its bucket, is the
// one a new flow overwrites before any live flow's; freeing it at once
// makes the same choice, so a live entry is evicted only when all the
// bucket's ways hold live flows.
type registerSteady struct{ r *Register }

func (s registerSteady) add(k Key, step int) int {
	s.r.Store(k, Entry{BackendID: 1, LastSeen: time.Duration(step)})
	base, w, _ := s.r.find(k)
	return base + w
}

func (s registerSteady) end(_ Key, slot, _ int) { s.r.free(slot) }

func (s registerSteady) slots() int { return s.r.Slots() }

// free empties slot i (a flow's end in the steady-state measure).
func (r *Register) free(i int) {
	if r.sig[i] != 0 {
		r.n--
	}
	r.sig[i], r.e[i] = 0, Entry{}
}

// RegisterSteadyLoss is the steady-state loss (live entries evicted, or
// shadowed by a signature, per new flow) of the v1model geometry at n live
// flows, from seed.
func RegisterSteadyLoss(buckets, ways, n int, seed uint64) (float64, error) {
	r, err := NewRegister(buckets, ways)
	if err != nil {
		return 0, err
	}
	return steadyLoss(registerSteady{r}, n, seed)
}

// RegisterSteadyFlowsHeld is R-CT-CAP's figure for the v1model geometry
// from seed: the flows held at ≤ 1 % steady-state loss, searched up to the
// slots (it comes out below the fill figure, RegisterFlowsHeld).
func RegisterSteadyFlowsHeld(buckets, ways int, seed uint64) (int, error) {
	if buckets <= 0 || ways <= 0 {
		return 0, fmt.Errorf("conntrack geometry %d buckets × %d ways: both must be positive", buckets, ways)
	}
	return SteadyFlowsHeld(func(n int) (float64, error) { return RegisterSteadyLoss(buckets, ways, n, seed) }, buckets*ways)
}

// HeldFigures are R-CT-CAP's two figures for a geometry (seed 1): flows
// held at ≤ 1 % loss in steady state (the capacity), and by a fill from
// empty (the older figure, which overstates it).
type HeldFigures struct{ Steady, Fill int }

// CommittedTNAHeld is HeldFigures for the geometries p4/tna/lb.p4 is
// compiled with, as TNASteadyFlowsHeld and TNAFlowsHeld (seed 1) measured
// them: the steady state's search takes 15 s (Tofino 1) to minutes, too
// long for every `lbc validate`. TestRCTCAP_CommittedFigures checks them
// (the loss at Steady is within 1 %, at 1 % more flows it is not); ok is
// false for another geometry, which the caller measures.
func CommittedTNAHeld(g TNAGeometry) (HeldFigures, bool) {
	switch g {
	case TNATofino1:
		return HeldFigures{Steady: 48960, Fill: 81057}, true
	case TNATofino2:
		return HeldFigures{Steady: 196096, Fill: 324246}, true
	}
	return HeldFigures{}, false
}

// CommittedRegisterHeld is CommittedTNAHeld for the v1model geometry of
// the committed BMv2 build (RegisterSteadyFlowsHeld, RegisterFlowsHeld).
func CommittedRegisterHeld(buckets, ways int) (HeldFigures, bool) {
	if buckets == 262144 && ways == P4Ways {
		return HeldFigures{Steady: 225280, Fill: 337279}, true
	}
	return HeldFigures{}, false
}

// TNAHeld is HeldFigures for the TNA geometry g: the committed figures, or
// measured (seed 1).
func TNAHeld(g TNAGeometry) (HeldFigures, error) {
	if f, ok := CommittedTNAHeld(g); ok {
		return f, nil
	}
	s, err := TNASteadyFlowsHeld(g, 1)
	if err != nil {
		return HeldFigures{}, err
	}
	f, err := TNAFlowsHeld(g)
	return HeldFigures{Steady: s, Fill: f}, err
}

// RegisterHeld is TNAHeld for the v1model geometry.
func RegisterHeld(buckets, ways int) (HeldFigures, error) {
	if f, ok := CommittedRegisterHeld(buckets, ways); ok {
		return f, nil
	}
	s, err := RegisterSteadyFlowsHeld(buckets, ways, 1)
	if err != nil {
		return HeldFigures{}, err
	}
	f, err := RegisterFlowsHeld(buckets, ways)
	return HeldFigures{Steady: s, Fill: f}, err
}
