// Package ringpool is the allocator of ring regions: one pool of ring
// regions per datapath (issue 35). The XDP loader (fallback) keeps its
// `rings` array map in one, and the P4 switch target (targets/bmv2) will need
// the same for its ring table, so the allocator lives here, with no
// datapath in it: a datapath moves the slots and the rows (Mover).
//
// A datapath's rings live in one array, a pool of ring halves. At rest a
// service holds only the half its row points at; a change writes the new
// ring into a region of its own, flips the row to it, and frees the old
// half, so the spare room of the array is shared by the services that
// change instead of doubling every ring.
//
// Placement is first fit: the lowest free run of entries that holds the
// half. It is simple, keeps the live regions toward the start of the map,
// and leaves the large run at the end whole for the large rings.
//
// A freed region is quarantined, not given out again: a packet that read
// a row just before may still be reading it. The quarantine ends with a
// grace (Mover.Grace: the wait until every packet that was in the
// datapath has left it; fallback/grace.go), which a run of ring writes
// begins with when regions wait in quarantine (fallback/rings.go), and
// which the pool asks for when a request fits nowhere else.
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
//
// A pool may be banked (NewBanked): the array is several tables of one
// size (Tofino's ring is four direct-indexed tables, docs/tofino.md "The
// dense ring"), and a region never crosses from one to the next. The free
// space is kept cut at the banks' edges, so that first fit, compaction and
// slide, which only ever place a region inside one free run, respect them.
package ringpool

import (
	"fmt"
	"slices"
	"sort"
)

// Key names one half of one service's ring: the pool holds at most one
// region per key.
type Key struct {
	Svc  uint32 // the service's ID
	Half uint8  // 0 or 1
}

// Span is a run of entries of the ring array, [Base, Base+N).
type Span struct{ Base, N uint32 }

// End is the first entry after s.
func (s Span) End() uint32 { return s.Base + s.N }

// Overlaps reports whether s and o share an entry.
func (s Span) Overlaps(o Span) bool { return s.Base < o.End() && o.Base < s.End() }

// Pool is the allocator of one ring array: the live regions, the free
// space, and the space that waits for a grace. It does not lock: its
// datapath's writer owns it.
type Pool struct {
	size uint32
	bank uint32 // a region lies inside [k·bank, (k+1)·bank); = size unbanked
	// halves are the live regions: every half the loader holds.
	halves map[Key]Span
	// free is the space neither live nor quarantined, sorted by base,
	// adjacent runs merged.
	free []Span
	// quarantine is the space freed since the last grace.
	quarantine []Span
}

// New returns an empty pool of size entries: all of them free.
func New(size uint32) *Pool { return NewBanked(size, size) }

// NewBanked returns an empty pool of size entries in banks of bank entries
// each (the last may be shorter): no region crosses from one bank to the
// next. A bank of 0 or of size or more is one bank.
func NewBanked(size, bank uint32) *Pool {
	if bank == 0 || bank > size {
		bank = size
	}
	p := &Pool{size: size, bank: bank, halves: map[Key]Span{}}
	p.Rebuild()
	return p
}

// Size is the entries of the array the pool allocates from.
func (p *Pool) Size() uint32 { return p.size }

// Bank is the entries of one bank: no region crosses a multiple of it.
func (p *Pool) Bank() uint32 { return p.bank }

// crossesBank reports whether s holds entries of two banks.
func (p *Pool) crossesBank(s Span) bool {
	return p.bank > 0 && s.N > 0 && s.Base/p.bank != (s.End()-1)/p.bank
}

// cut appends s to runs, cut at the banks' edges.
func (p *Pool) cut(runs []Span, s Span) []Span {
	for s.N > 0 {
		n := s.N
		if p.bank > 0 {
			n = min(n, p.bank-s.Base%p.bank)
		}
		runs = append(runs, Span{s.Base, n})
		s = Span{s.Base + n, s.N - n}
	}
	return runs
}

// Rebuild makes the free space the complement of the live and quarantined
// regions: after Place and Quarantine have rebuilt a pool from what a
// datapath holds.
func (p *Pool) Rebuild() {
	used := make([]Span, 0, len(p.halves)+len(p.quarantine))
	for _, s := range p.halves {
		used = append(used, s)
	}
	used = append(used, p.quarantine...)
	sort.Slice(used, func(i, j int) bool { return used[i].Base < used[j].Base })
	p.free = p.free[:0]
	at := uint32(0)
	for _, u := range used {
		if u.Base > at {
			p.free = p.cut(p.free, Span{at, u.Base - at})
		}
		at = max(at, u.End())
	}
	if at < p.size {
		p.free = p.cut(p.free, Span{at, p.size - at})
	}
}

// Place marks s live for k while a pool (New) is rebuilt from the regions
// a datapath's rows record; call Rebuild after placing (and Quarantine).
// It refuses, with an error (rows are data, possibly torn by another
// process's writes), an empty span or one beyond Size, a key that holds a
// region already, and a span that is not free: one that overlaps another
// live region. (On a pool in use, quarantined space is not free either.)
func (p *Pool) Place(k Key, s Span) error {
	if s.N == 0 {
		return fmt.Errorf("rings pool: an empty region at %d for service %d half %d", s.Base, k.Svc, k.Half)
	}
	if s.End() > p.size || s.End() < s.Base {
		return fmt.Errorf("rings pool: region %d+%d of service %d half %d is out of the %d entries", s.Base, s.N, k.Svc, k.Half, p.size)
	}
	if p.crossesBank(s) {
		return fmt.Errorf("rings pool: region %d+%d of service %d half %d crosses from one ring table to the next (%d entries each)", s.Base, s.N, k.Svc, k.Half, p.bank)
	}
	if o, ok := p.halves[k]; ok {
		return fmt.Errorf("rings pool: service %d half %d holds %d+%d already", k.Svc, k.Half, o.Base, o.N)
	}
	if !p.isFree(s) {
		return fmt.Errorf("rings pool: region %d+%d of service %d half %d is not free", s.Base, s.N, k.Svc, k.Half)
	}
	p.take(s)
	p.halves[k] = s
	return nil
}

// firstFit returns the lowest base of n free entries.
func (p *Pool) firstFit(n uint32) (uint32, bool) {
	for _, g := range p.free {
		if g.N >= n {
			return g.Base, true
		}
	}
	return 0, false
}

// freeRun returns the index in free of the run that would hold s.
func (p *Pool) freeRun(s Span) int {
	return sort.Search(len(p.free), func(i int) bool { return p.free[i].End() > s.Base })
}

// isFree reports whether s lies inside one free run.
func (p *Pool) isFree(s Span) bool {
	i := p.freeRun(s)
	return i < len(p.free) && p.free[i].Base <= s.Base && p.free[i].End() >= s.End()
}

// take removes s, which must lie inside one free run, from the free space.
// It splits the run in place (Place calls it once a row, on a rebuild of
// thousands of rows).
func (p *Pool) take(s Span) {
	if !p.isFree(s) {
		panic(fmt.Sprintf("rings pool: %v is not free", s)) // a bug of this package
	}
	i := p.freeRun(s)
	g := p.free[i]
	before, after := Span{g.Base, s.Base - g.Base}, Span{s.End(), g.End() - s.End()}
	switch {
	case before.N > 0 && after.N > 0:
		p.free[i] = before
		p.free = slices.Insert(p.free, i+1, after)
	case before.N > 0:
		p.free[i] = before
	case after.N > 0:
		p.free[i] = after
	default:
		p.free = slices.Delete(p.free, i, i+1)
	}
}

// Release frees k's region (if it holds one) into the quarantine.
func (p *Pool) Release(k Key) {
	if s, ok := p.halves[k]; ok {
		delete(p.halves, k)
		p.quarantine = append(p.quarantine, s)
	}
}

// Quarantine puts s, no longer any key's (the old region after a growth
// move, or what waited for a grace when a pool is rebuilt), into the
// quarantine: a packet may still read it until the next grace.
func (p *Pool) Quarantine(s Span) { p.quarantine = append(p.quarantine, s) }

// Quarantined reports whether any space waits for a grace: a datapath
// then begins a run of ring writes with one, so that first fit has it.
func (p *Pool) Quarantined() bool { return len(p.quarantine) > 0 }

// QuarantinedSpans returns the space that waits for a grace, for a pool
// rebuilt from the rows to keep it waiting.
func (p *Pool) QuarantinedSpans() []Span { return slices.Clone(p.quarantine) }

// Unquarantine makes the quarantined space free: a grace has passed, so
// no packet can still be reading it.
func (p *Pool) Unquarantine() {
	if len(p.quarantine) == 0 {
		return
	}
	all := append(p.free, p.quarantine...)
	sort.Slice(all, func(i, j int) bool { return all[i].Base < all[j].Base })
	merged := all[:0]
	for _, s := range all {
		if k := len(merged); k > 0 && merged[k-1].End() == s.Base && !p.crossesBank(Span{merged[k-1].Base, merged[k-1].N + s.N}) {
			merged[k-1].N += s.N
			continue
		}
		merged = append(merged, s)
	}
	p.free, p.quarantine = merged, nil
}

// Region returns k's region, if it holds one.
func (p *Pool) Region(k Key) (Span, bool) {
	s, ok := p.halves[k]
	return s, ok
}

// Keys returns the keys that hold a region, sorted by service, then half:
// a datapath reads its rings back in that order.
func (p *Pool) Keys() []Key {
	keys := make([]Key, 0, len(p.halves))
	for k := range p.halves {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Svc != keys[j].Svc {
			return keys[i].Svc < keys[j].Svc
		}
		return keys[i].Half < keys[j].Half
	})
	return keys
}

// Used is the entries the live regions take.
func (p *Pool) Used() uint32 {
	n := uint32(0)
	for _, s := range p.halves {
		n += s.N
	}
	return n
}

func total(ss []Span) uint32 {
	n := uint32(0)
	for _, s := range ss {
		n += s.N
	}
	return n
}

// Mover does what the pool cannot do alone: move a region's slots (and
// the row that points at it), and wait until no packet can still be
// reading what the rows pointed at before.
type Mover interface {
	// Move copies the N slots of from to the start of to (free, and
	// disjoint from from), then points the row at to if it pointed at from.
	Move(k Key, from, to Span) error
	// Grace returns once every packet that was in the datapath when it
	// was called has left it.
	Grace() error
}

// Stats counts what finding room cost, for a datapath to report.
type Stats struct {
	Copied uint32 // slots compaction copied
	Graces int    // graces waited for
}

// FullError says that no region of Need entries can be made for Key: the
// free entries are too few (Used + Need > Size), or in pieces that moving
// the live regions cannot join. A datapath names its array and its flag
// (fallback.FullError).
type FullError struct {
	// Size is the pool's entries, Used those the live regions take (old
	// and new halves while a push changes rings), Need the request's.
	Size, Used, Need uint32
	Key              Key // whose region did not fit
}

// Error names the ring, the entries in use, and how many are short or
// that the free ones are in pieces.
func (e *FullError) Error() string {
	what := fmt.Sprintf("rings pool: no room for service %d's ring of %d slots (half %d): %d of its %d entries in use", e.Key.Svc, e.Need, e.Key.Half, e.Used, e.Size)
	if n := uint64(e.Used) + uint64(e.Need); n > uint64(e.Size) {
		return fmt.Sprintf("%s, %d short", what, n-uint64(e.Size))
	}
	return fmt.Sprintf("%s, and the %d free are in pieces that moving the rings in use cannot join", what, e.Size-e.Used)
}

// Alloc gives k a region of n entries and returns it (its slots are
// stale: the caller clears them). A region k holds already stays live
// (the caller copies it and frees it: growth) and is never moved to make
// room. First fit; when nothing fits, a grace frees the quarantine; when
// nothing fits still but the free space would hold n, compaction. When
// no region can be made, the error is a *FullError.
func (p *Pool) Alloc(k Key, n uint32, mv Mover, st *Stats) (Span, error) {
	if n == 0 {
		return Span{}, fmt.Errorf("rings pool: a region of 0 entries for service %d half %d", k.Svc, k.Half)
	}
	grace := func() error {
		if err := mv.Grace(); err != nil {
			return fmt.Errorf("wait for packets in flight before reusing ring entries: %w", err)
		}
		st.Graces++
		p.Unquarantine()
		return nil
	}
	base, ok := p.firstFit(n)
	if !ok && len(p.quarantine) > 0 {
		if err := grace(); err != nil {
			return Span{}, err
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
			to := Span{m.to, m.from.N}
			p.take(to)
			if err := mv.Move(m.k, m.from, to); err != nil {
				return Span{}, fmt.Errorf("compaction: move service %d half %d from %d to %d: %w", m.k.Svc, m.k.Half, m.from.Base, m.to, err)
			}
			p.halves[m.k] = to
			p.quarantine = append(p.quarantine, m.from)
			st.Copied += m.from.N
		}
		if err := grace(); err != nil {
			return Span{}, err
		}
		base, ok = p.firstFit(n)
		if fits && !ok {
			return Span{}, fmt.Errorf("rings pool: compaction emptied no run of %d entries (a bug)", n)
		}
	}
	if !ok {
		return Span{}, p.full(k, n)
	}
	s := Span{base, n}
	p.take(s)
	p.halves[k] = s
	return s, nil
}

// full is the error for a region of n entries that does not fit.
func (p *Pool) full(k Key, n uint32) *FullError {
	return &FullError{Size: p.size, Used: p.Used(), Need: n, Key: k}
}

// move is one step of a compaction: k's region from → to (same length).
type move struct {
	k    Key
	from Span
	to   uint32
}

type liveSpan struct {
	k Key
	s Span
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
//
// In a banked pool (NewBanked) a window lies inside one bank.
func (p *Pool) plan(n uint32, pinned Key) ([]move, bool) {
	if n > p.size {
		return nil, false
	}
	live := p.sorted()
	free := total(p.free)
	// Windows start or end where a free run or a region does.
	starts := map[uint32]bool{0: true, p.size - n: true}
	edge := func(s Span) {
		starts[s.Base] = true
		if s.End() >= n {
			starts[s.End()-n] = true
		}
	}
	for _, g := range p.free {
		edge(g)
	}
	for _, l := range live {
		edge(l.s)
	}
	for b := p.bank; b < p.size; b += p.bank {
		edge(Span{b - p.bank, p.bank})
	}
	type window struct {
		at    uint32
		cost  uint32
		first int // index in live of the first region it overlaps
		count int
	}
	var ws []window
	for at := range starts {
		w := Span{at, n}
		if at > p.size-n || p.crossesBank(w) {
			continue
		}
		i := sort.Search(len(live), func(i int) bool { return live[i].s.End() > at })
		win := window{at: at, first: i}
		inside := uint32(0) // live entries inside the window
		ok := true
		for j := i; j < len(live) && live[j].s.Base < w.End(); j++ {
			if live[j].k == pinned {
				ok = false
				break
			}
			win.cost += live[j].s.N
			win.count++
			inside += min(live[j].s.End(), w.End()) - max(live[j].s.Base, at)
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
		if moves, ok := p.evacuate(Span{w.at, n}, live[w.first:w.first+w.count]); ok {
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
func (p *Pool) slide(pinned Key) []move {
	live := p.sorted()
	bins := append([]Span(nil), p.free...)
	var moves []move
	for _, l := range live {
		if l.k == pinned {
			continue
		}
		for b := range bins {
			if bins[b].Base >= l.s.Base {
				break
			}
			if bins[b].N >= l.s.N { // a free run before a live region ends before it
				moves = append(moves, move{k: l.k, from: l.s, to: bins[b].Base})
				bins[b].Base += l.s.N
				bins[b].N -= l.s.N
				break
			}
		}
	}
	return moves
}

// sorted returns the live regions by base.
func (p *Pool) sorted() []liveSpan {
	live := make([]liveSpan, 0, len(p.halves))
	for k, s := range p.halves {
		live = append(live, liveSpan{k, s})
	}
	sort.Slice(live, func(i, j int) bool { return live[i].s.Base < live[j].s.Base })
	return live
}

// packBudget bounds the search of evacuate: exact for the few regions a
// window holds, cut short for many.
const packBudget = 100000

// evacuate places the regions out of win, in the free runs outside it
// (largest first, a depth-first search over the runs).
func (p *Pool) evacuate(win Span, out []liveSpan) ([]move, bool) {
	var bins []Span
	for _, g := range p.free {
		if g.Base < win.Base {
			bins = append(bins, Span{g.Base, min(g.End(), win.Base) - g.Base})
		}
		if g.End() > win.End() {
			b := max(g.Base, win.End())
			bins = append(bins, Span{b, g.End() - b})
		}
	}
	items := append([]liveSpan(nil), out...)
	sort.Slice(items, func(i, j int) bool {
		if items[i].s.N != items[j].s.N {
			return items[i].s.N > items[j].s.N
		}
		return items[i].s.Base < items[j].s.Base
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
		n := items[i].s.N
		tried := map[uint32]bool{} // runs of one length are alike
		for b := range bins {
			if bins[b].N < n || tried[bins[b].N] {
				continue
			}
			tried[bins[b].N] = true
			moves = append(moves, move{k: items[i].k, from: items[i].s, to: bins[b].Base})
			bins[b].Base += n
			bins[b].N -= n
			if place(i + 1) {
				return true
			}
			bins[b].Base -= n
			bins[b].N += n
			moves = moves[:len(moves)-1]
		}
		return false
	}
	if !place(0) {
		return nil, false
	}
	return moves, true
}
