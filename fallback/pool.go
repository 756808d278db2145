package fallback

import (
	"fmt"
	"sort"
)

// The rings array is one pool of ring halves (issue 35). At rest a
// service holds only the half its row points at; a change writes the new
// ring into a region of its own, flips the row to it, and frees the old
// half, so the spare room of the map is shared by the services that change
// instead of doubling every ring. This file is the allocator, with no
// kernel in it; rings.go moves the slots and the rows.
//
// Placement is first fit: the lowest free run of entries that holds the
// half. It is simple, keeps the live regions toward the start of the map,
// and leaves the large run at the end whole for the large rings.
//
// A freed region is quarantined, not given out again: a packet that read
// a row just before may still be reading it. The quarantine ends with a
// grace (grace.go: the wait until every packet that was in the program
// has left it), which a run of ring writes begins with when regions wait
// in quarantine (rings.go), and which the pool asks for when a request
// fits nowhere else.
//
// Compaction, when a request does not fit by first fit but the free
// entries would hold it: plan picks a window of the request's length and
// moves every live region out of it, each to free space outside the
// window, which is never a live region's (its own old place included) nor
// a quarantined one, so no packet reading through any row ever sees a
// slot change under it; each move copies, then repoints the row (one
// word), and quarantines the old place; then a grace, after which the
// window is free. Space a move frees is thus reused only after a grace,
// never within the microseconds a packet that read the old row may still
// be reading it. When no window can be emptied in one round, slide moves
// regions toward the start of the map and plan tries again.
// span is a run of entries of `rings`, [base, base+n).
type span struct{ base, n uint32 }

func (s span) end() uint32 { return s.base + s.n }

func (s span) overlaps(o span) bool { return s.base < o.end() && o.base < s.end() }

// halfKey names one half of one service's ring.
type halfKey struct {
	svc  uint32
	half uint8
}

type ringPool struct {
	size uint32
	// halves are the live regions: every half the loader holds.
	halves map[halfKey]span
	// free is the space neither live nor quarantined, sorted by base,
	// adjacent runs merged.
	free []span
	// quarantine is the space freed since the last grace.
	quarantine []span
}

func newRingPool(size uint32) *ringPool {
	p := &ringPool{size: size, halves: map[halfKey]span{}}
	p.rebuildFree()
	return p
}

// rebuildFree makes free the complement of the live and quarantined
// regions.
func (p *ringPool) rebuildFree() {
	used := make([]span, 0, len(p.halves)+len(p.quarantine))
	for _, s := range p.halves {
		used = append(used, s)
	}
	used = append(used, p.quarantine...)
	sort.Slice(used, func(i, j int) bool { return used[i].base < used[j].base })
	p.free = p.free[:0]
	at := uint32(0)
	for _, u := range used {
		if u.base > at {
			p.free = append(p.free, span{at, u.base - at})
		}
		at = max(at, u.end())
	}
	if at < p.size {
		p.free = append(p.free, span{at, p.size - at})
	}
}

// firstFit returns the lowest base of n free entries.
func (p *ringPool) firstFit(n uint32) (uint32, bool) {
	for _, g := range p.free {
		if g.n >= n {
			return g.base, true
		}
	}
	return 0, false
}

// take removes s, which must lie inside one free run, from the free space.
func (p *ringPool) take(s span) {
	i := sort.Search(len(p.free), func(i int) bool { return p.free[i].end() > s.base })
	if i == len(p.free) || p.free[i].base > s.base || p.free[i].end() < s.end() {
		panic(fmt.Sprintf("rings pool: %v is not free", s)) // a bug of this file
	}
	g := p.free[i]
	var parts []span
	if s.base > g.base {
		parts = append(parts, span{g.base, s.base - g.base})
	}
	if g.end() > s.end() {
		parts = append(parts, span{s.end(), g.end() - s.end()})
	}
	p.free = append(p.free[:i], append(parts, p.free[i+1:]...)...)
}

// release frees k's region into the quarantine.
func (p *ringPool) release(k halfKey) {
	if s, ok := p.halves[k]; ok {
		delete(p.halves, k)
		p.quarantine = append(p.quarantine, s)
	}
}

// unquarantine makes the quarantined space free: a grace has passed, so
// no packet can still be reading it.
func (p *ringPool) unquarantine() {
	if len(p.quarantine) == 0 {
		return
	}
	all := append(p.free, p.quarantine...)
	sort.Slice(all, func(i, j int) bool { return all[i].base < all[j].base })
	merged := all[:0]
	for _, s := range all {
		if k := len(merged); k > 0 && merged[k-1].end() == s.base {
			merged[k-1].n += s.n
			continue
		}
		merged = append(merged, s)
	}
	p.free, p.quarantine = merged, nil
}

// used is the entries the live regions take.
func (p *ringPool) used() uint32 {
	n := uint32(0)
	for _, s := range p.halves {
		n += s.n
	}
	return n
}

func total(ss []span) uint32 {
	n := uint32(0)
	for _, s := range ss {
		n += s.n
	}
	return n
}

// ringMover does what the pool cannot do alone: move a region's slots (and
// the row that points at it), and wait until no packet can still be
// reading what the rows pointed at before.
type ringMover interface {
	// move copies the n slots of from to the start of to (free, and
	// disjoint from from), then points the row at to if it pointed at from.
	move(k halfKey, from, to span) error
	// grace returns once every packet that was in the program when it was
	// called has left it.
	grace() error
}

// placeStats counts what finding room cost.
type placeStats struct {
	copied uint32 // slots compaction copied
	graces int
}

// alloc gives k a region of n entries and returns it (its slots are
// stale: the caller clears them). A region k holds already stays live
// (the caller copies it and frees it: growth) and is never moved to make
// room. First fit; when nothing fits, a grace frees the quarantine; when
// nothing fits still but the free space would hold n, compaction.
func (p *ringPool) alloc(k halfKey, n uint32, mv ringMover, st *placeStats) (span, error) {
	if n == 0 {
		return span{}, fmt.Errorf("rings pool: a region of 0 entries for service %d half %d", k.svc, k.half)
	}
	grace := func() error {
		if err := mv.grace(); err != nil {
			return fmt.Errorf("wait for packets in flight before reusing ring entries: %w", err)
		}
		st.graces++
		p.unquarantine()
		return nil
	}
	base, ok := p.firstFit(n)
	if !ok && len(p.quarantine) > 0 {
		if err := grace(); err != nil {
			return span{}, err
		}
		base, ok = p.firstFit(n)
	}
	// Compaction: the cheapest window that one round of moves empties;
	// failing that, rounds that slide regions toward the start of the
	// map, until a window can be emptied or nothing moves.
	for round := 0; !ok && total(p.free) >= n && round <= maxSlides; round++ {
		moves, fits := p.plan(n, k)
		if !fits && round < maxSlides {
			moves = p.slide(k)
		}
		if len(moves) == 0 {
			break
		}
		for _, m := range moves {
			to := span{m.to, m.from.n}
			p.take(to)
			if err := mv.move(m.k, m.from, to); err != nil {
				return span{}, fmt.Errorf("compaction: move service %d half %d from %d to %d: %w", m.k.svc, m.k.half, m.from.base, m.to, err)
			}
			p.halves[m.k] = to
			p.quarantine = append(p.quarantine, m.from)
			st.copied += m.from.n
		}
		if err := grace(); err != nil {
			return span{}, err
		}
		base, ok = p.firstFit(n)
		if fits && !ok {
			return span{}, fmt.Errorf("rings pool: compaction emptied no run of %d entries (a bug)", n)
		}
	}
	if !ok {
		return span{}, p.full(k, n)
	}
	s := span{base, n}
	p.take(s)
	p.halves[k] = s
	return s, nil
}

// full is the error for a region of n entries that does not fit.
func (p *ringPool) full(k halfKey, n uint32) *FullError {
	return &FullError{Map: "rings", Size: p.size, Used: p.used(), Need: n,
		What: fmt.Sprintf("service %d's ring of %d slots (half %d)", k.svc, n, k.half)}
}

// move is one step of a compaction: k's region from → to (same length).
type move struct {
	k    halfKey
	from span
	to   uint32
}

type liveSpan struct {
	k halfKey
	s span
}

// plan finds a window of n entries that moving live regions out of would
// empty, each moved region going to free space outside the window (never
// onto its own old place, nor onto another region, so no packet reading
// through a row ever sees a slot overwritten), and returns the moves of
// the cheapest window: the fewest slots copied. One round: the regions are
// moved, a grace passes, and the window is free. pinned's region (one
// being grown) does not move. The quarantine must be empty (a grace first).
//
// Regions cannot be split (a ring is contiguous), so free space in pieces
// each smaller than the regions that would have to make way for it cannot
// be joined: then plan fails, and the map is full for this ring.
func (p *ringPool) plan(n uint32, pinned halfKey) ([]move, bool) {
	if n > p.size {
		return nil, false
	}
	live := p.sorted()
	free := total(p.free)
	// Windows start or end where a free run or a region does.
	starts := map[uint32]bool{0: true, p.size - n: true}
	edge := func(s span) {
		starts[s.base] = true
		if s.end() >= n {
			starts[s.end()-n] = true
		}
	}
	for _, g := range p.free {
		edge(g)
	}
	for _, l := range live {
		edge(l.s)
	}
	type window struct {
		at    uint32
		cost  uint32
		first int // index in live of the first region it overlaps
		count int
	}
	var ws []window
	for at := range starts {
		if at > p.size-n {
			continue
		}
		w := span{at, n}
		i := sort.Search(len(live), func(i int) bool { return live[i].s.end() > at })
		win := window{at: at, first: i}
		inside := uint32(0) // live entries inside the window
		ok := true
		for j := i; j < len(live) && live[j].s.base < w.end(); j++ {
			if live[j].k == pinned {
				ok = false
				break
			}
			win.cost += live[j].s.n
			win.count++
			inside += min(live[j].s.end(), w.end()) - max(live[j].s.base, at)
		}
		// The moved regions go to the free space outside the window.
		if ok && win.count > 0 && free-(n-inside) >= win.cost {
			ws = append(ws, win)
		}
	}
	sort.Slice(ws, func(i, j int) bool {
		if ws[i].cost != ws[j].cost {
			return ws[i].cost < ws[j].cost
		}
		return ws[i].at < ws[j].at
	})
	for _, w := range ws {
		if moves, ok := p.evacuate(span{w.at, n}, live[w.first:w.first+w.count]); ok {
			return moves, true
		}
	}
	return nil, false
}

// maxSlides bounds the rounds of slide in one allocation: each costs a
// grace and copies, and a pool that many rounds do not defragment is full.
const maxSlides = 16

// slide plans one round of moves toward the start of the map: each
// region, in address order, to the lowest free run before it that holds
// it. The places they leave are free after the grace, beside the runs
// that were free; the next plan may then find a window.
func (p *ringPool) slide(pinned halfKey) []move {
	live := p.sorted()
	bins := append([]span(nil), p.free...)
	var moves []move
	for _, l := range live {
		if l.k == pinned {
			continue
		}
		for b := range bins {
			if bins[b].base >= l.s.base {
				break
			}
			if bins[b].n >= l.s.n { // a free run before a live region ends before it
				moves = append(moves, move{k: l.k, from: l.s, to: bins[b].base})
				bins[b].base += l.s.n
				bins[b].n -= l.s.n
				break
			}
		}
	}
	return moves
}

// sorted returns the live regions by base.
func (p *ringPool) sorted() []liveSpan {
	live := make([]liveSpan, 0, len(p.halves))
	for k, s := range p.halves {
		live = append(live, liveSpan{k, s})
	}
	sort.Slice(live, func(i, j int) bool { return live[i].s.base < live[j].s.base })
	return live
}

// packBudget bounds the search of evacuate: exact for the few regions a
// window holds, cut short for many.
const packBudget = 100000

// evacuate places the regions out of win, in the free runs outside it
// (largest first, a depth-first search over the runs).
func (p *ringPool) evacuate(win span, out []liveSpan) ([]move, bool) {
	var bins []span
	for _, g := range p.free {
		if g.base < win.base {
			bins = append(bins, span{g.base, min(g.end(), win.base) - g.base})
		}
		if g.end() > win.end() {
			b := max(g.base, win.end())
			bins = append(bins, span{b, g.end() - b})
		}
	}
	items := append([]liveSpan(nil), out...)
	sort.Slice(items, func(i, j int) bool {
		if items[i].s.n != items[j].s.n {
			return items[i].s.n > items[j].s.n
		}
		return items[i].s.base < items[j].s.base
	})
	moves := make([]move, 0, len(items))
	budget := packBudget
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(items) {
			return true
		}
		if budget--; budget < 0 {
			return false
		}
		n := items[i].s.n
		tried := map[uint32]bool{} // runs of one length are alike
		for b := range bins {
			if bins[b].n < n || tried[bins[b].n] {
				continue
			}
			tried[bins[b].n] = true
			moves = append(moves, move{k: items[i].k, from: items[i].s, to: bins[b].base})
			bins[b].base += n
			bins[b].n -= n
			if place(i + 1) {
				return true
			}
			bins[b].base -= n
			bins[b].n += n
			moves = moves[:len(moves)-1]
		}
		return false
	}
	if !place(0) {
		return nil, false
	}
	return moves, true
}
