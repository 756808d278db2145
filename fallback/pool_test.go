package fallback

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
)

// noMoves is a mover for allocations that must neither move nor wait.
type noMoves struct{ t *testing.T }

func (m noMoves) move(k halfKey, from, to span) error {
	m.t.Errorf("unexpected move of %v from %v to %v", k, from, to)
	return nil
}

func (m noMoves) grace() error {
	m.t.Errorf("unexpected grace")
	return nil
}

// readers is a mover that checks, apart from the pool's own bookkeeping,
// that no entry a packet may still read is ever overwritten: what a packet
// may read is every live region, and every region freed (by the test or
// by a move) since the last grace. Each slot's content is its owner's
// name; a move copies it.
type readers struct {
	t       *testing.T
	p       *ringPool
	mem     []string
	live    map[halfKey]span
	freed   []span
	moves   []string
	graces  int
	copies  uint32
	failMov error
}

func newReaders(t *testing.T, size uint32) *readers {
	return &readers{t: t, p: newRingPool(size), mem: make([]string, size), live: map[halfKey]span{}}
}

// readable fails the test if s overlaps what a packet may read.
func (r *readers) writable(s span, what string) {
	r.t.Helper()
	for k, l := range r.live {
		if l.overlaps(s) {
			r.t.Fatalf("%s %v overwrites live %v of %v", what, s, l, k)
		}
	}
	for _, f := range r.freed {
		if f.overlaps(s) {
			r.t.Fatalf("%s %v overwrites %v, freed since the last grace (a packet may still read it)", what, s, f)
		}
	}
}

func (r *readers) move(k halfKey, from, to span) error {
	r.t.Helper()
	if r.failMov != nil {
		return r.failMov
	}
	if r.live[k] != from {
		r.t.Fatalf("move of %v from %v, which holds %v", k, from, r.live[k])
	}
	delete(r.live, k) // its own old place is still read: checked below
	r.writable(to, "move destination")
	if from.overlaps(to) {
		r.t.Fatalf("move of %v onto its own place: %v → %v", k, from, to)
	}
	copy(r.mem[to.base:to.end()], r.mem[from.base:from.end()])
	r.live[k] = to
	r.freed = append(r.freed, from)
	r.moves = append(r.moves, fmt.Sprintf("%d/%d %d→%d", k.svc, k.half, from.base, to.base))
	r.copies += from.n
	return nil
}

func (r *readers) grace() error {
	r.graces++
	r.freed = nil
	return nil
}

// alloc allocates and writes k's region.
func (r *readers) alloc(k halfKey, n uint32) (span, error) {
	r.t.Helper()
	var st placeStats
	s, err := r.p.alloc(k, n, r, &st)
	if err != nil {
		return s, err
	}
	if s.n != n {
		r.t.Fatalf("alloc %v of %d: %v", k, n, s)
	}
	r.writable(s, "new region")
	name := fmt.Sprint(k)
	for i := s.base; i < s.end(); i++ {
		r.mem[i] = name
	}
	r.live[k] = s
	return s, nil
}

func (r *readers) release(k halfKey) {
	r.p.release(k)
	if s, ok := r.live[k]; ok {
		delete(r.live, k)
		r.freed = append(r.freed, s)
	}
}

// nextApply is the grace the ring writes of the next Apply begin with
// (rings.go): packets of before it are gone.
func (r *readers) nextApply() {
	r.p.unquarantine()
	r.freed = nil
}

// check compares the pool with what the readers hold, and every live
// region's content with its owner.
func (r *readers) check() {
	r.t.Helper()
	if len(r.p.halves) != len(r.live) {
		r.t.Fatalf("pool holds %v, readers %v", r.p.halves, r.live)
	}
	for k, s := range r.live {
		if r.p.halves[k] != s {
			r.t.Fatalf("pool has %v at %v, readers at %v", k, r.p.halves[k], s)
		}
		name := fmt.Sprint(k)
		for i := s.base; i < s.end(); i++ {
			if r.mem[i] != name {
				r.t.Fatalf("%v at %v: entry %d holds %q", k, s, i, r.mem[i])
			}
		}
	}
	if got := r.p.used() + total(r.p.free) + total(r.p.quarantine); got != r.p.size {
		r.t.Fatalf("used %d + free %d + quarantined %d = %d, want the size %d", r.p.used(), total(r.p.free), total(r.p.quarantine), got, r.p.size)
	}
}

func h(svc uint32) halfKey { return halfKey{svc, 0} }

// TestPoolFirstFit: a half goes to the lowest free run that holds it;
// freed space is not given out again before the next Apply (whose ring
// writes begin with a grace), unless nothing else holds the request, and
// then only after a grace.
func TestPoolFirstFit(t *testing.T) {
	type step struct {
		op     string // alloc, release, next (Apply)
		k      halfKey
		n      uint32
		base   uint32 // alloc: where it must land
		graces int    // alloc: graces so far
	}
	for _, tc := range []struct {
		name  string
		size  uint32
		steps []step
	}{
		{"first fit, freed space in the next Apply", 40, []step{
			{"alloc", h(1), 10, 0, 0}, {"alloc", h(2), 5, 10, 0}, {"alloc", h(3), 7, 15, 0},
			{"release", h(2), 0, 0, 0},
			{"alloc", h(4), 5, 22, 0}, // 10..15 is quarantined
			{"next", halfKey{}, 0, 0, 0},
			{"alloc", h(5), 4, 10, 0}, // the lowest run that holds it
			{"alloc", h(6), 2, 27, 0}, // 14..15 is one entry
			{"alloc", h(7), 1, 14, 0},
		}},
		{"both halves of a service", 30, []step{
			{"alloc", halfKey{1, 0}, 10, 0, 0}, {"alloc", halfKey{1, 1}, 12, 10, 0},
			{"release", halfKey{1, 0}, 0, 0, 0}, {"next", halfKey{}, 0, 0, 0},
			{"alloc", halfKey{1, 0}, 8, 0, 0},
		}},
		{"quarantine reused after a grace when nothing else holds it", 20, []step{
			{"alloc", h(1), 10, 0, 0}, {"alloc", h(2), 10, 10, 0},
			{"release", h(1), 0, 0, 0},
			{"alloc", h(3), 10, 0, 1},
			{"release", h(2), 0, 0, 0}, {"release", h(3), 0, 0, 0},
			{"alloc", h(4), 20, 0, 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReaders(t, tc.size)
			for i, s := range tc.steps {
				switch s.op {
				case "alloc":
					got, err := r.alloc(s.k, s.n)
					if err != nil || got.base != s.base || r.graces != s.graces {
						t.Fatalf("step %d: alloc %v of %d = %v, %v after %d graces; want base %d after %d", i, s.k, s.n, got, err, r.graces, s.base, s.graces)
					}
				case "release":
					r.release(s.k)
				case "next":
					r.nextApply()
				}
				r.check()
			}
		})
	}
}

// TestPoolCompaction: a request that no free run holds but the free space
// would is placed after live regions move (each to free space of its own,
// then a grace, then the request in the space they left); one that the
// free space cannot hold, or whose free space is in pieces no move joins,
// fails with a FullError naming --ring-entries and by how much.
func TestPoolCompaction(t *testing.T) {
	type region struct {
		k    halfKey
		base uint32
		n    uint32
	}
	for _, tc := range []struct {
		name    string
		size    uint32
		regions []region
		pin     halfKey // grows: the request is for this key
		n       uint32
		// want: the moves ("svc/half from→to"), or the error's text.
		moves  []string
		copied uint32
		err    string
		short  uint32
	}{
		{"one region out of the way (the lowest of two alike)", 16, []region{{h(1), 0, 2}, {h(2), 5, 2}, {h(3), 10, 6}}, h(9), 5,
			[]string{"1/0 0→7"}, 2, "", 0},
		{"the cheapest window: a region to the tail of the run it ends", 20, []region{{h(1), 1, 3}, {h(2), 5, 3}, {h(3), 9, 2}}, h(9), 10,
			[]string{"3/0 9→18"}, 2, "", 0},
		{"two regions into the runs outside", 24, []region{{h(1), 2, 2}, {h(2), 5, 2}, {h(3), 9, 6}, {h(4), 17, 3}}, h(9), 7,
			[]string{"1/0 2→7", "2/0 5→15"}, 4, "", 0},
		{"free space exactly the request: every region slides", 20, []region{{h(1), 2, 2}, {h(2), 5, 3}, {h(3), 10, 4}, {h(4), 16, 3}}, h(9), 8,
			[]string{"1/0 2→0", "2/0 5→2", "3/0 10→5", "4/0 16→9"}, 12, "", 0},
		{"no one round does it: slide, then a window", 30, []region{{h(1), 0, 8}, {h(2), 10, 2}, {h(3), 14, 8}, {h(4), 24, 3}}, h(9), 8,
			[]string{"2/0 10→8", "4/0 24→10"}, 5, "", 0},
		{"pieces no move joins", 12, []region{{h(1), 0, 3}, {h(2), 4, 3}, {h(3), 9, 3}}, h(9), 3,
			nil, 0, "the 3 free are in pieces that moving the rings in use cannot join (the map's size is set when it is created, with --ring-entries)", 0},
		{"pieces: regions of 2 among free entries of 1", 12, []region{{h(1), 1, 2}, {h(2), 4, 2}, {h(3), 7, 2}, {h(4), 10, 1}}, h(9), 5,
			nil, 0, "pieces", 0},
		{"more than the free space", 12, []region{{h(1), 0, 3}, {h(2), 4, 3}, {h(3), 9, 3}}, h(9), 5,
			nil, 0, "rings map: no room for service 9's ring of 5 slots (half 0): 9 of its 12 entries in use, 2 short (the map's size is set when it is created, with --ring-entries)", 2},
		{"a growing region does not move", 12, []region{{h(1), 0, 3}, {h(2), 5, 2}, {h(3), 9, 3}}, h(2), 4,
			nil, 0, "pieces", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReaders(t, tc.size)
			for _, g := range tc.regions {
				s := span{g.base, g.n}
				r.p.halves[g.k] = s
				r.live[g.k] = s
				for i := s.base; i < s.end(); i++ {
					r.mem[i] = fmt.Sprint(g.k)
				}
			}
			r.p.rebuildFree()
			r.check()
			var err error
			var got span
			if _, grows := r.p.halves[tc.pin]; grows {
				var st placeStats
				got, err = r.p.alloc(tc.pin, tc.n, r, &st)
				if err == nil {
					t.Fatalf("grew %v to %v, want a failure", tc.pin, got)
				}
			} else {
				got, err = r.alloc(tc.pin, tc.n)
			}
			if tc.err != "" {
				var full *FullError
				if !errors.As(err, &full) || !strings.Contains(err.Error(), tc.err) || full.Short() != tc.short {
					t.Fatalf("alloc of %d: %v (short %v), want a FullError containing %q, %d short", tc.n, err, full, tc.err, tc.short)
				}
				r.check()
				return
			}
			if err != nil {
				t.Fatalf("alloc of %d after moves %v: %v", tc.n, r.moves, err)
			}
			if tc.moves != nil && (strings.Join(r.moves, ", ") != strings.Join(tc.moves, ", ") || r.copies != tc.copied) {
				t.Fatalf("moves %v (%d slots copied), want %v (%d)", r.moves, r.copies, tc.moves, tc.copied)
			}
			if len(r.moves) == 0 || r.graces == 0 {
				t.Fatalf("placed %v with %d moves and %d graces, want compaction", got, len(r.moves), r.graces)
			}
			r.check()
		})
	}
}

// TestPoolMoveFailure: a move that fails fails the allocation, and the
// pool still describes what is where.
func TestPoolMoveFailure(t *testing.T) {
	r := newReaders(t, 16)
	for _, g := range []struct {
		k    halfKey
		base uint32
		n    uint32
	}{{h(1), 0, 2}, {h(2), 5, 2}, {h(3), 10, 6}} {
		r.p.halves[g.k] = span{g.base, g.n}
	}
	r.p.rebuildFree()
	r.failMov = errors.New("no")
	var st placeStats
	if _, err := r.p.alloc(h(9), 5, r, &st); err == nil || !strings.Contains(err.Error(), "compaction: move service 1 half 0") {
		t.Fatalf("alloc with a failing move: %v", err)
	}
}

// TestPoolChurn runs random Applies against the pool: services come, their
// rings change size (the new half beside the old one, then the old one
// freed) and go, the rings at rest filling up to 90 % of the map, so that
// the pool fragments and compacts. No entry a packet may read is ever
// overwritten (readers), at the end of every Apply the pool holds exactly
// the active halves, and every request fits, by compaction where first
// fit finds no run. Rings are at most a twentieth of the map here; where
// they are larger against it, requests fail that no hitless move places
// (in 12,000 entries at 75 %, four rings of 2,048 leave runs all shorter
// than 2,048 between them: none of them can move, so no run of 2,048 can
// be made), and the refusal says so (TestPoolCompaction's "pieces").
func TestPoolChurn(t *testing.T) {
	sizes := []uint32{64, 128, 256, 509, 1024, 2048}
	const size, load = 40000, 36000
	compactions := 0
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			r := newReaders(t, size)
			active := map[uint32]uint8{} // service → active half
			ring := map[uint32]uint32{}
			next := uint32(1)
			alloc := func(k halfKey, n uint32) {
				t.Helper()
				before := r.copies
				if _, err := r.alloc(k, n); err != nil {
					t.Fatalf("service %d half %d, %d entries, beside %d in use: %v\nfree %v\nlive %v", k.svc, k.half, n, r.p.used(), err, r.p.free, r.p.sorted())
				}
				if r.copies > before {
					compactions++
				}
			}
			for apply := 0; apply < 400; apply++ {
				for op := 0; op < 1+rng.Intn(3); op++ {
					sum := uint32(0)
					for _, n := range ring {
						sum += n
					}
					switch x := rng.Intn(10); {
					case x < 3 && sum+sizes[len(sizes)-1] <= load || len(active) < 3: // a new service
						n := sizes[rng.Intn(len(sizes))]
						alloc(halfKey{next, 0}, n)
						active[next], ring[next] = 0, n
						next++
					case x < 8: // a ring changes: new half, flip, old half freed
						svc := pick(rng, active)
						n := sizes[rng.Intn(len(sizes))]
						if sum-ring[svc]+n > load {
							continue
						}
						k := halfKey{svc, 1 - active[svc]}
						alloc(k, n)
						r.release(halfKey{svc, active[svc]})
						active[svc], ring[svc] = k.half, n
					default: // a service goes
						svc := pick(rng, active)
						r.release(halfKey{svc, active[svc]})
						delete(active, svc)
						delete(ring, svc)
					}
					r.check()
				}
				r.nextApply()
				sum := uint32(0)
				for svc, half := range active {
					if s, ok := r.p.halves[halfKey{svc, half}]; !ok || s.n != ring[svc] {
						t.Fatalf("apply %d: service %d's active half %d: %v, want %d entries", apply, svc, half, s, ring[svc])
					}
					sum += ring[svc]
				}
				if used := r.p.used(); used != sum || len(r.p.halves) != len(active) {
					t.Fatalf("apply %d: %d entries in use in %d regions, want the active rings' %d in %d", apply, used, len(r.p.halves), sum, len(active))
				}
			}
			t.Logf("%d slots copied by compaction, %d graces", r.copies, r.graces)
		})
	}
	t.Logf("%d compactions", compactions)
	if compactions == 0 {
		t.Errorf("no compaction ran: the test does not test it")
	}
}

func pick(rng *rand.Rand, m map[uint32]uint8) uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys[rng.Intn(len(keys))]
}
