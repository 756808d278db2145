package ringpool_test

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/internal/ringpool"
)

// key and span spell the pool's types short (keyed: they are another
// package's).
func key(svc uint32, half uint8) ringpool.Key { return ringpool.Key{Svc: svc, Half: half} }
func span(base, n uint32) ringpool.Span       { return ringpool.Span{Base: base, N: n} }
func h(svc uint32) ringpool.Key               { return key(svc, 0) }

// readers is a mover that checks, apart from the pool's own bookkeeping,
// that no entry a packet may still read is ever overwritten: what a packet
// may read is every live region, and every region freed (by the test or
// by a move) since the last grace. Each slot's content is its owner's
// name; a move copies it.
type readers struct {
	t       *testing.T
	p       *ringpool.Pool
	mem     []string
	live    map[ringpool.Key]ringpool.Span
	freed   []ringpool.Span
	moves   []string
	graces  int
	copies  uint32
	failMov error
}

func newReaders(t *testing.T, size uint32) *readers { return newBankedReaders(t, size, size) }

func newBankedReaders(t *testing.T, size, bank uint32) *readers {
	return &readers{t: t, p: ringpool.NewBanked(size, bank), mem: make([]string, size), live: map[ringpool.Key]ringpool.Span{}}
}

// writable fails the test if s overlaps what a packet may read.
func (r *readers) writable(s ringpool.Span, what string) {
	r.t.Helper()
	for k, l := range r.live {
		if l.Overlaps(s) {
			r.t.Fatalf("%s %v overwrites live %v of %v", what, s, l, k)
		}
	}
	for _, f := range r.freed {
		if f.Overlaps(s) {
			r.t.Fatalf("%s %v overwrites %v, freed since the last grace (a packet may still read it)", what, s, f)
		}
	}
}

func (r *readers) Move(k ringpool.Key, from, to ringpool.Span) error {
	r.t.Helper()
	if r.failMov != nil {
		return r.failMov
	}
	if r.live[k] != from {
		r.t.Fatalf("move of %v from %v, which holds %v", k, from, r.live[k])
	}
	delete(r.live, k) // its own old place is still read: checked below
	r.writable(to, "move destination")
	if from.Overlaps(to) {
		r.t.Fatalf("move of %v onto its own place: %v → %v", k, from, to)
	}
	copy(r.mem[to.Base:to.End()], r.mem[from.Base:from.End()])
	r.live[k] = to
	r.freed = append(r.freed, from)
	r.moves = append(r.moves, fmt.Sprintf("%d/%d %d→%d", k.Svc, k.Half, from.Base, to.Base))
	r.copies += from.N
	return nil
}

func (r *readers) Grace() error {
	r.graces++
	r.freed = nil
	return nil
}

// alloc allocates and writes k's region.
func (r *readers) alloc(k ringpool.Key, n uint32) (ringpool.Span, error) {
	r.t.Helper()
	var st ringpool.Stats
	s, err := r.p.Alloc(k, n, r, &st)
	if err != nil {
		return s, err
	}
	if s.N != n {
		r.t.Fatalf("alloc %v of %d: %v", k, n, s)
	}
	r.writable(s, "new region")
	name := fmt.Sprint(k)
	for i := s.Base; i < s.End(); i++ {
		r.mem[i] = name
	}
	r.live[k] = s
	return s, nil
}

// place rebuilds the pool with regions, as a datapath does from its rows.
func (r *readers) place(regions map[ringpool.Key]ringpool.Span) {
	r.t.Helper()
	for k, s := range regions {
		if err := r.p.Place(k, s); err != nil {
			r.t.Fatalf("place %v at %v: %v", k, s, err)
		}
		r.live[k] = s
		for i := s.Base; i < s.End(); i++ {
			r.mem[i] = fmt.Sprint(k)
		}
	}
	r.p.Rebuild()
}

func (r *readers) release(k ringpool.Key) {
	r.p.Release(k)
	if s, ok := r.live[k]; ok {
		delete(r.live, k)
		r.freed = append(r.freed, s)
	}
}

// nextApply is the grace the ring writes of the next Apply begin with
// (fallback/rings.go): packets of before it are gone.
func (r *readers) nextApply() {
	r.p.Unquarantine()
	r.freed = nil
}

// regions returns the pool's live regions by key.
func regions(p *ringpool.Pool) map[ringpool.Key]ringpool.Span {
	out := map[ringpool.Key]ringpool.Span{}
	for _, k := range p.Keys() {
		s, ok := p.Region(k)
		if !ok {
			panic(fmt.Sprintf("Keys lists %v, Region has none", k))
		}
		out[k] = s
	}
	return out
}

func total(ss []ringpool.Span) uint32 {
	n := uint32(0)
	for _, s := range ss {
		n += s.N
	}
	return n
}

// check compares the pool with what the readers hold, and every live
// region's content with its owner.
func (r *readers) check() {
	r.t.Helper()
	held := regions(r.p)
	if len(held) != len(r.live) {
		r.t.Fatalf("pool holds %v, readers %v", held, r.live)
	}
	for k, s := range r.live {
		if held[k] != s {
			r.t.Fatalf("pool has %v at %v, readers at %v", k, held[k], s)
		}
		if b := r.p.Bank(); s.Base/b != (s.End()-1)/b {
			r.t.Fatalf("%v at %v crosses from one bank of %d entries to the next", k, s, b)
		}
		name := fmt.Sprint(k)
		for i := s.Base; i < s.End(); i++ {
			if r.mem[i] != name {
				r.t.Fatalf("%v at %v: entry %d holds %q", k, s, i, r.mem[i])
			}
		}
	}
	free, quarantined := total(ringpool.Free(r.p)), total(r.p.QuarantinedSpans())
	if got := r.p.Used() + free + quarantined; got != r.p.Size() {
		r.t.Fatalf("used %d + free %d + quarantined %d = %d, want the size %d", r.p.Used(), free, quarantined, got, r.p.Size())
	}
	if r.p.Quarantined() != (quarantined > 0) {
		r.t.Fatalf("Quarantined() %v with %d entries quarantined", r.p.Quarantined(), quarantined)
	}
}

// TestPoolFirstFit: a half goes to the lowest free run that holds it;
// freed space is not given out again before the next Apply (whose ring
// writes begin with a grace), unless nothing else holds the request, and
// then only after a grace.
func TestPoolFirstFit(t *testing.T) {
	type step struct {
		op     string // alloc, release, next (Apply)
		k      ringpool.Key
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
			{"next", ringpool.Key{}, 0, 0, 0},
			{"alloc", h(5), 4, 10, 0}, // the lowest run that holds it
			{"alloc", h(6), 2, 27, 0}, // 14..15 is one entry
			{"alloc", h(7), 1, 14, 0},
		}},
		{"both halves of a service", 30, []step{
			{"alloc", key(1, 0), 10, 0, 0}, {"alloc", key(1, 1), 12, 10, 0},
			{"release", key(1, 0), 0, 0, 0}, {"next", ringpool.Key{}, 0, 0, 0},
			{"alloc", key(1, 0), 8, 0, 0},
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
					if err != nil || got.Base != s.base || r.graces != s.graces {
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
// fails with a FullError that says which, and by how much.
func TestPoolCompaction(t *testing.T) {
	type region struct {
		k    ringpool.Key
		base uint32
		n    uint32
	}
	for _, tc := range []struct {
		name    string
		size    uint32
		regions []region
		pin     ringpool.Key // grows: the request is for this key
		n       uint32
		// want: the moves ("svc/half from→to"), or the error's text.
		moves  []string
		copied uint32
		err    string
		used   uint32 // the FullError's
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
			nil, 0, "rings pool: no room for service 9's ring of 3 slots (half 0): 9 of its 12 entries in use, and the 3 free are in pieces that moving the rings in use cannot join", 9},
		{"pieces: regions of 2 among free entries of 1", 12, []region{{h(1), 1, 2}, {h(2), 4, 2}, {h(3), 7, 2}, {h(4), 10, 1}}, h(9), 5,
			nil, 0, "pieces", 7},
		{"more than the free space", 12, []region{{h(1), 0, 3}, {h(2), 4, 3}, {h(3), 9, 3}}, h(9), 5,
			nil, 0, "rings pool: no room for service 9's ring of 5 slots (half 0): 9 of its 12 entries in use, 2 short", 9},
		{"a growing region does not move", 12, []region{{h(1), 0, 3}, {h(2), 5, 2}, {h(3), 9, 3}}, h(2), 4,
			nil, 0, "pieces", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReaders(t, tc.size)
			placed := map[ringpool.Key]ringpool.Span{}
			for _, g := range tc.regions {
				placed[g.k] = span(g.base, g.n)
			}
			r.place(placed)
			r.check()
			var err error
			var got ringpool.Span
			if _, grows := r.p.Region(tc.pin); grows {
				var st ringpool.Stats
				got, err = r.p.Alloc(tc.pin, tc.n, r, &st)
				if err == nil {
					t.Fatalf("grew %v to %v, want a failure", tc.pin, got)
				}
			} else {
				got, err = r.alloc(tc.pin, tc.n)
			}
			if tc.err != "" {
				var full *ringpool.FullError
				want := ringpool.FullError{Size: tc.size, Used: tc.used, Need: tc.n, Key: tc.pin}
				if !errors.As(err, &full) || !strings.Contains(err.Error(), tc.err) || *full != want {
					t.Fatalf("alloc of %d: %v (%+v), want a FullError %+v containing %q", tc.n, err, full, want, tc.err)
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
		k    ringpool.Key
		base uint32
		n    uint32
	}{{h(1), 0, 2}, {h(2), 5, 2}, {h(3), 10, 6}} {
		if err := r.p.Place(g.k, span(g.base, g.n)); err != nil {
			t.Fatal(err)
		}
	}
	r.p.Rebuild()
	r.failMov = errors.New("no")
	var st ringpool.Stats
	if _, err := r.p.Alloc(h(9), 5, r, &st); err == nil || !strings.Contains(err.Error(), "compaction: move service 1 half 0") {
		t.Fatalf("alloc with a failing move: %v", err)
	}
}

// TestPoolPlace: a pool rebuilt from a datapath's rows takes the regions
// that fit, refuses (an error) those out of range, overlapping another, or
// for a key placed already, keeps what waits for a grace out of first fit
// until one, and lists its keys by service and half.
func TestPoolPlace(t *testing.T) {
	r := newReaders(t, 20)
	r.place(map[ringpool.Key]ringpool.Span{key(3, 1): span(0, 4), key(3, 0): span(10, 2), key(1, 0): span(5, 3)})
	for _, bad := range []struct {
		k    ringpool.Key
		s    ringpool.Span
		want string
	}{
		{h(7), span(18, 3), "out of"},
		{h(7), span(^uint32(0), 2), "out of"},
		{h(7), span(4, 0), "empty"},
		{h(7), span(3, 2), "not free"},
		{h(7), span(7, 4), "not free"},
		{h(7), span(11, 1), "not free"},
		{key(1, 0), span(14, 2), "holds 5+3 already"},
	} {
		if err := r.p.Place(bad.k, bad.s); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("place %v at %v: %v, want an error containing %q", bad.k, bad.s, err, bad.want)
		}
	}
	r.check()
	if got, want := fmt.Sprint(r.p.Keys()), "[{1 0} {3 0} {3 1}]"; got != want {
		t.Errorf("keys %s, want %s", got, want)
	}
	if r.p.Used() != 9 || r.p.Size() != 20 {
		t.Errorf("used %d of %d, want 9 of 20", r.p.Used(), r.p.Size())
	}
	// What waited for a grace before the rebuild waits still: 12..20 is
	// out of first fit until the grace.
	r.p.Quarantine(span(12, 8))
	r.freed = append(r.freed, span(12, 8))
	r.p.Rebuild()
	r.check()
	if got, err := r.alloc(h(8), 2); err != nil || got != span(8, 2) {
		t.Fatalf("alloc of 2 beside the quarantine: %v, %v; want 8+2", got, err)
	}
	if got, err := r.alloc(h(9), 5); err != nil || got != span(12, 5) || r.graces != 1 {
		t.Fatalf("alloc of 5: %v, %v after %d graces; want 12+5 after 1", got, err, r.graces)
	}
	r.check()
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
	testPoolChurn(t, []uint32{64, 128, 256, 509, 1024, 2048}, 40000, 40000, 36000)
}

// TestPoolChurnBanked: the same on a pool of four banks (Tofino's ring
// tables) with the power-of-two rings Tofino takes: no region ever crosses
// a bank, and every push that fits the total fits the banks.
func TestPoolChurnBanked(t *testing.T) {
	testPoolChurn(t, []uint32{64, 128, 256, 512, 1024, 2048}, 32768, 8192, 29000)
}

func testPoolChurn(t *testing.T, sizes []uint32, size, bank, load uint32) {
	compactions := 0
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			r := newBankedReaders(t, size, bank)
			active := map[uint32]uint8{} // service → active half
			ring := map[uint32]uint32{}
			next := uint32(1)
			alloc := func(k ringpool.Key, n uint32) {
				t.Helper()
				before := r.copies
				if _, err := r.alloc(k, n); err != nil {
					t.Fatalf("service %d half %d, %d entries, beside %d in use: %v\nfree %v\nlive %v", k.Svc, k.Half, n, r.p.Used(), err, ringpool.Free(r.p), regions(r.p))
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
						alloc(key(next, 0), n)
						active[next], ring[next] = 0, n
						next++
					case x < 8: // a ring changes: new half, flip, old half freed
						svc := pick(rng, active)
						n := sizes[rng.Intn(len(sizes))]
						if sum-ring[svc]+n > load {
							continue
						}
						k := key(svc, 1-active[svc])
						alloc(k, n)
						r.release(key(svc, active[svc]))
						active[svc], ring[svc] = k.Half, n
					default: // a service goes
						svc := pick(rng, active)
						r.release(key(svc, active[svc]))
						delete(active, svc)
						delete(ring, svc)
					}
					r.check()
				}
				r.nextApply()
				sum := uint32(0)
				for svc, half := range active {
					if s, ok := r.p.Region(key(svc, half)); !ok || s.N != ring[svc] {
						t.Fatalf("apply %d: service %d's active half %d: %v, want %d entries", apply, svc, half, s, ring[svc])
					}
					sum += ring[svc]
				}
				if used, n := r.p.Used(), len(r.p.Keys()); used != sum || n != len(active) {
					t.Fatalf("apply %d: %d entries in use in %d regions, want the active rings' %d in %d", apply, used, n, sum, len(active))
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
