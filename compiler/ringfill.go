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
	h := walkHeap{w: w}
	for i := int32(0); int(i) < len(w); i++ {
		if take(i) {
			x := walker{i: i, s: ps[i].off}
			if owner[x.s] >= 0 {
				x.seek(owner, ps[i].skip, m)
			}
			h.items = append(h.items, x)
		}
	}
	h.init()
	for left > 0 {
		x := &h.items[0]
		if owner[x.s] < 0 {
			owner[x.s] = x.i
			count[x.i]++
			left--
			if full(x.i) {
				h.pop()
				continue
			}
		}
		x.seek(owner, ps[x.i].skip, m)
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
		rank := make([]uint32, m)
		covered := uint32(0)
		for bound := (uint64(m) + total - 1) / total; covered < m; bound += bound/4 + 1 {
			for i := 0; i < n; i++ {
				if w[i] == 0 {
					continue
				}
				lim := min(bound*w[i], uint64(m))
				j, s, skip, wi := next[i], at[i], ps[i].skip, w[i]
				for ; uint64(j) < lim; j++ {
					if o := owner[s]; o < 0 {
						owner[s], rank[s] = int32(i), j
						covered++
					} else if uint64(j+1)*w[o] < uint64(rank[s]+1)*wi {
						owner[s], rank[s] = int32(i), j
					}
					if s += skip; s >= m {
						s -= m
					}
				}
				next[i], at[i] = j, s
			}
		}
	}
	return next, at
}

// walker is a member walking its permutation: position j, slot s.
type walker struct {
	i    int32
	j, s uint32
}

// seek moves the walker to the next free slot after its current one. A
// walker with a deficit always finds one: its permutation covers every
// slot, and free slots remain while it is short.
func (x *walker) seek(owner []int32, skip, m uint32) {
	for {
		x.j++
		if x.s += skip; x.s >= m {
			x.s -= m
		}
		if owner[x.s] < 0 {
			return
		}
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
