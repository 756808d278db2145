package compiler

import (
	"fmt"
	"sort"
)

// RingFill names the algorithm that fills a service's ring from its
// members' Maglev permutations (R-MAGLEV). Every fill gives each member
// its exact share (R-MAGLEV-2) and depends only on the members' names and
// weights and on the ring size; they differ in how many slots move when the
// eligible set changes (R-MAGLEV-3) and so in which backend a slot holds.
type RingFill string

// Ring fills; the zero value means FillEarliestRank.
const (
	// FillEarliestRank gives each slot to the member whose permutation
	// reaches it earliest, scaled by weight (a rendezvous choice over the
	// Maglev permutations), then moves the fewest slots needed to reach
	// the exact quotas: members above quota give up the slots they reach
	// latest, members below quota take them in the same earliest-rank
	// order. A removed member's slots mostly go to the next member in
	// each slot's order, so few other slots move.
	FillEarliestRank RingFill = "EARLIEST_RANK"
	// FillProbeStride is lbc's fill before FillEarliestRank: members take
	// turns claiming their next free slot, Maglev style, in the order of a
	// stride scheduler whose virtual time is a member's probe count over
	// its quota. It is kept so that a fleet can stay on the rings it has.
	FillProbeStride RingFill = "PROBE_STRIDE"
)

// RingFills lists the accepted values of ringFill, the default first.
var RingFills = []RingFill{FillEarliestRank, FillProbeStride}

func (f RingFill) orDefault() RingFill {
	if f == "" {
		return FillEarliestRank
	}
	return f
}

// code is the fill's stable number in the ring-reuse key.
func (f RingFill) code() uint64 {
	switch f.orDefault() {
	case FillEarliestRank:
		return 1
	case FillProbeStride:
		return 2
	}
	return 0
}

// checkFill reports an unknown fill.
func checkFill(f RingFill) error {
	if f.code() == 0 {
		return fmt.Errorf("ring fill %q: use %s or %s", string(f), FillEarliestRank, FillProbeStride)
	}
	return nil
}

// perm is one member's Maglev permutation: position j holds slot
// off + j·skip mod m.
type perm struct{ off, skip uint32 }

// fillEarliestRank fills r.Slots (all -1 on entry) for members with
// weights w (at least one positive). The member of a slot is decided by
// the time j+1 over weight at which the member's permutation reaches the
// slot at position j; ties go to the lower index (the members are sorted
// by name). Arithmetic is integer only, so every machine agrees.
func fillEarliestRank(r *Ring, w []uint64, ps []perm) {
	m := uint32(len(r.Slots))
	n := len(w)
	owner := r.Slots
	var total uint64
	for _, x := range w {
		total += x
	}
	// 1. Earliest rank: every slot to the member that reaches it first.
	next, at := earliestRank(owner, w, ps)

	// 2. Quotas: the floor of each exact share, and one more slot for as
	// many members as the remainder needs, chosen among those whose share
	// is not whole by how far their earliest-rank count exceeds their
	// share (so the fewest slots move), ties to the lower index.
	count := r.Counts
	for _, o := range owner {
		count[o]++
	}
	quota := make([]int, n)
	var rest []int
	given := 0
	for i := range w {
		share := uint64(m) * w[i]
		quota[i] = int(share / total)
		given += quota[i]
		if share%total != 0 {
			rest = append(rest, i)
		}
	}
	excess := func(i int) int64 { return int64(count[i])*int64(total) - int64(uint64(m)*w[i]) }
	sort.SliceStable(rest, func(a, b int) bool { return excess(rest[a]) > excess(rest[b]) })
	for _, i := range rest[:int(m)-given] {
		quota[i]++
	}

	// 3. Members above quota give up the slots their permutation reaches
	// latest: each walks its permutation back from where it stopped.
	free := 0
	for i := 0; i < n; i++ {
		extra := count[i] - quota[i]
		if extra <= 0 {
			continue
		}
		back := m - ps[i].skip // -skip mod m
		s := at[i]
		for j := next[i]; extra > 0; {
			j--
			if s += back; s >= m {
				s -= m
			}
			// A member reaches a slot at one position only: an owned
			// slot here is the one it reached at j.
			if owner[s] == int32(i) {
				owner[s] = -1
				extra--
				free++
			}
		}
		count[i] = quota[i]
	}
	if free == 0 {
		return
	}

	// 4. Members below quota take the given-up slots in earliest-rank
	// order, each until it has its quota.
	takeFree(owner, count, w, ps, func(i int32) bool { return count[i] < quota[i] },
		func(i int32) bool { return count[i] == quota[i] }, free)
}

// takeFree gives left free slots of owner (-1) to the members take picks,
// in earliest-rank order: they walk their permutations again, merged by
// time, and each takes every free slot it reaches until full says it is
// done. Slots only get taken here, so a walker may skip ahead to its next
// free slot on its own; the heap orders these candidates, and one found
// taken when its turn comes is replaced by the walker's next.
func takeFree(owner []int32, count []int, w []uint64, ps []perm, take, full func(int32) bool, left int) {
	m := uint32(len(owner))
	// Walkers test a bitmap of taken slots (8 KiB for 65537 slots: it
	// stays in L1) rather than owner.
	taken := make([]uint64, (m+63)/64)
	for s, o := range owner {
		if o >= 0 {
			taken[s>>6] |= 1 << (s & 63)
		}
	}
	h := walkHeap{w: w}
	for i := int32(0); int(i) < len(w); i++ {
		if take(i) {
			x := walker{i: i, s: ps[i].off}
			if owner[x.s] >= 0 {
				x.seek(taken, ps[i].skip, m)
			}
			h.items = append(h.items, x)
		}
	}
	h.init()
	for left > 0 {
		x := &h.items[0]
		if owner[x.s] < 0 {
			owner[x.s] = x.i
			taken[x.s>>6] |= 1 << (x.s & 63)
			count[x.i]++
			left--
			if full(x.i) {
				h.pop()
				continue
			}
		}
		x.seek(taken, ps[x.i].skip, m)
		h.down(0)
	}
}

// earliestRank is the first step of FillEarliestRank, a rendezvous choice
// over the permutations: it gives every slot of owner (all -1 on entry) to
// the member that reaches it first. It returns, per member, how far it
// walked (next) and the slot at that position (at); every slot a member
// owns lies before next.
func earliestRank(owner []int32, w []uint64, ps []perm) (next, at []uint32) {
	m := uint32(len(owner))
	n := len(w)
	var total uint64
	equal := true
	for _, x := range w {
		total += x
		equal = equal && x == w[0]
	}
	next = make([]uint32, n)
	at = make([]uint32, n)
	for i := range ps {
		at[i] = ps[i].off
	}

	if equal {
		// Equal weights: time order is rounds of j, members in index
		// order within a round, so the first to reach a slot owns it.
		covered := uint32(0)
		j := uint32(0)
		for ; covered < m; j++ {
			for i := range at {
				s := at[i]
				if owner[s] < 0 {
					owner[s] = int32(i)
					covered++
				}
				if s += ps[i].skip; s >= m {
					s -= m
				}
				at[i] = s
			}
		}
		for i := range next {
			next[i] = j
		}
	} else {
		// The owner of a slot is the minimum over all members, so
		// members may walk in any order: each walks up to a time bound,
		// and the bound grows until every slot is reached. A probe beyond
		// an earlier bound is later than every time recorded so far, so
		// it can only claim a slot nobody has reached.
		//
		// So a slot reached in an earlier round is settled, and ties
		// between members fall to the lower index whatever order they
		// walk in (the comparison includes the index): the result is the
		// minimum of (time, index) over all members. While a quarter or
		// more of the slots are unreached (dense rounds: the first one or
		// two) every probe runs the comparison without
		// a branch on its outcome, which is unpredictable there; later
		// rounds test the bitmap old (8 KiB for 65537 slots, it stays in
		// L1) of slots reached in earlier rounds first and skip those,
		// most probes by then.
		rank := make([]uint32, m)
		old := make([]uint64, (m+63)/64)
		fresh := make([]uint32, m+1) // slots first reached in this round, and one spare
		wp := make([]uint64, n+1)    // wp[o+1] = w[o]; 0 for no owner (-1)
		copy(wp[1:], w)
		covered := uint32(0)
		for bound := (uint64(m) + total - 1) / total; covered < m; bound += bound/4 + 1 {
			dense := covered < m/4*3
			nf := 0
			for i := 0; i < n; i++ {
				if w[i] == 0 {
					continue
				}
				lim := uint32(min(bound*w[i], uint64(m)))
				if dense {
					next[i], at[i], nf = walkDense(owner, rank, wp, fresh, nf, int32(i), next[i], lim, at[i], ps[i].skip)
				} else {
					next[i], at[i], nf = walkSparse(owner, rank, old, wp, fresh, nf, int32(i), next[i], lim, at[i], ps[i].skip)
				}
			}
			for _, s := range fresh[:nf] {
				old[s>>6] |= 1 << (s & 63)
			}
			covered += uint32(nf)
		}
	}
	return next, at
}

// walker is a member walking its permutation: position j, slot s.
type walker struct {
	i    int32
	j, s uint32
}

// seek moves the walker to the next free slot after its current one (a
// clear bit of taken). A walker with a deficit always finds one: its
// permutation covers every slot, and free slots remain while it is short.
// Four positions are computed at once from the first, so that the wrap
// (without a branch; slots are below m < 2³¹) does not chain from probe
// to probe.
func (x *walker) seek(taken []uint64, skip, m uint32) {
	free := func(s uint32) bool { return taken[s>>6]&(1<<(s&63)) == 0 }
	k2 := skip + skip - m
	k2 += m & uint32(int32(k2)>>31)
	k3 := k2 + skip - m
	k3 += m & uint32(int32(k3)>>31)
	k4 := k3 + skip - m
	k4 += m & uint32(int32(k4)>>31)
	d1, d2, d3, d4 := skip-m, k2-m, k3-m, k4-m
	j, s := x.j, x.s
	for {
		s1 := s + d1
		s1 += m & uint32(int32(s1)>>31)
		s2 := s + d2
		s2 += m & uint32(int32(s2)>>31)
		s3 := s + d3
		s3 += m & uint32(int32(s3)>>31)
		s4 := s + d4
		s4 += m & uint32(int32(s4)>>31)
		switch {
		case free(s1):
			x.j, x.s = j+1, s1
			return
		case free(s2):
			x.j, x.s = j+2, s2
			return
		case free(s3):
			x.j, x.s = j+3, s3
			return
		case free(s4):
			x.j, x.s = j+4, s4
			return
		}
		j, s = j+4, s4
	}
}

// walkHeap orders walkers by the time (j+1)/w of their next probe, ties
// to the lower member index, compared exactly by cross-multiplication.
type walkHeap struct {
	items []walker
	w     []uint64
}

func (h *walkHeap) before(a, b walker) bool {
	x, y := uint64(a.j+1)*h.w[b.i], uint64(b.j+1)*h.w[a.i]
	return x < y || (x == y && a.i < b.i)
}

func (h *walkHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *walkHeap) pop() {
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	if last > 0 {
		h.down(0)
	}
}

func (h *walkHeap) down(i int) {
	it := h.items
	n := len(it)
	x := it[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.before(it[r], it[l]) {
			c = r
		}
		if !h.before(it[c], x) {
			break
		}
		it[i] = it[c]
		i = c
	}
	it[i] = x
}

// walkDense walks member i (weight wp[i+1] > 0) from position j at slot s
// up to position lim for earliestRank. Every probe compares the time
// (j+1)/w with the slot's owner's, ties to the lower index; an unowned slot
// (owner -1, rank 0, weight wp[0] = 0) always loses. Slots first owned are
// appended to fresh[nf:]. Neither outcome is a branch: owner, rank and
// fresh are written on every probe. Positions wrap without a branch too
// (slots are below m < 2³¹).
func walkDense(owner []int32, rank []uint32, wp []uint64, fresh []uint32, nf int, i int32, j, lim, s, skip uint32) (uint32, uint32, int) {
	m := uint32(len(owner))
	wi := wp[i+1]
	d := skip - m
	for ; j < lim; j++ {
		o := owner[s]
		x, y := uint64(j+1)*wp[o+1], uint64(rank[s]+1)*wi
		lt, eq := uint32(0), uint32(0)
		if x < y {
			lt = 1
		}
		if x == y && i < o {
			eq = 1
		}
		take := -(lt | eq) // all ones when member i takes the slot
		owner[s] = o ^ ((o ^ i) & int32(take))
		rank[s] ^= (rank[s] ^ j) & take
		fresh[nf] = s
		nf += int(uint32(o) >> 31)
		s += d
		s += m & uint32(int32(s)>>31)
	}
	return j, s, nf
}

// walkSparse is walkDense for rounds where most slots are reached: a probe
// of a slot in old (reached in an earlier round, so earlier than any
// probe of this round) is skipped; four positions are computed at once
// from the first, so that the wrap, four operations long, does not chain
// from probe to probe.
func walkSparse(owner []int32, rank []uint32, old []uint64, wp []uint64, fresh []uint32, nf int, i int32, j, lim, s, skip uint32) (uint32, uint32, int) {
	m := uint32(len(owner))
	wi := wp[i+1]
	probe := func(j, s uint32) {
		if old[s>>6]&(1<<(s&63)) != 0 {
			return
		}
		o := owner[s]
		if o < 0 {
			owner[s], rank[s] = i, j
			fresh[nf] = s
			nf++
		} else if x, y := uint64(j+1)*wp[o+1], uint64(rank[s]+1)*wi; x < y || x == y && i < o {
			owner[s], rank[s] = i, j
		}
	}
	// dc is c·skip mod m, minus m (mod 2³²).
	k2 := skip + skip - m
	k2 += m & uint32(int32(k2)>>31)
	k3 := k2 + skip - m
	k3 += m & uint32(int32(k3)>>31)
	k4 := k3 + skip - m
	k4 += m & uint32(int32(k4)>>31)
	d1, d2, d3, d4 := skip-m, k2-m, k3-m, k4-m
	for ; j+4 <= lim; j += 4 {
		s1 := s + d1
		s1 += m & uint32(int32(s1)>>31)
		s2 := s + d2
		s2 += m & uint32(int32(s2)>>31)
		s3 := s + d3
		s3 += m & uint32(int32(s3)>>31)
		s4 := s + d4
		s4 += m & uint32(int32(s4)>>31)
		probe(j, s)
		probe(j+1, s1)
		probe(j+2, s2)
		probe(j+3, s3)
		s = s4
	}
	for ; j < lim; j++ {
		probe(j, s)
		s += d1
		s += m & uint32(int32(s)>>31)
	}
	return j, s, nf
}
