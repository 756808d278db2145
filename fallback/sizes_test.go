package fallback

import (
	"errors"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/internal/ringpool"
)

// TestDefaultRingsHoldKatranScale: the default rings map holds Katran's
// default scale, 512 services at ringSize 65,537, with room for every one
// of those rings to change in one push (the new half beside the old), as
// the loader allocates halves (first fit): 1,024 halves, and not one more
// (1,024 such services at rest); at the old size (2^20) it held 15.
func TestDefaultRingsHoldKatranScale(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries uint32
		fit     int // halves of ringSize 65,537 that fit
	}{
		{"default", DefaultRingEntries, 2 * KatranServices},
		{"compiled (2^20)", 1 << 20, 15},
		{"one entry short of the default", DefaultRingEntries - 1, 2*KatranServices - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ringpool.New(tc.entries)
			n := 0
			var err error
			for {
				k := ringpool.Key{Svc: uint32(n/2 + 1), Half: uint8(n % 2)}
				if _, err = p.Alloc(k, KatranRingSize, noMoves{}, &ringpool.Stats{}); err != nil {
					break
				}
				n++
			}
			var full *FullError
			if err = ringsFull(err); n != tc.fit || !errors.As(err, &full) {
				t.Fatalf("%d entries hold %d halves at ringSize %d, then %v; want %d, then the map full", tc.entries, n, KatranRingSize, err, tc.fit)
			}
		})
	}
}

// TestRingsFullError: a ring the pool has no room for is the rings map's
// FullError, which names the ring, the entries in use, and by how much it
// is short, or that the free entries are in pieces, and the flag.
func TestRingsFullError(t *testing.T) {
	const set = " (the map's size is set when it is created, with --ring-entries)"
	for _, tc := range []struct {
		need  uint32
		want  string
		short uint32
	}{
		{3, "rings map: no room for service 9's ring of 3 slots (half 0): 9 of its 12 entries in use, and the 3 free are in pieces that moving the rings in use cannot join" + set, 0},
		{5, "rings map: no room for service 9's ring of 5 slots (half 0): 9 of its 12 entries in use, 2 short" + set, 2},
	} {
		p := ringpool.New(12)
		for i, base := range []uint32{0, 4, 9} {
			if err := p.Place(ringpool.Key{Svc: uint32(i + 1)}, ringpool.Span{Base: base, N: 3}); err != nil {
				t.Fatal(err)
			}
		}
		p.Rebuild()
		_, err := p.Alloc(ringpool.Key{Svc: 9}, tc.need, bookkeeping{}, &ringpool.Stats{})
		var full *FullError
		if err = ringsFull(err); !errors.As(err, &full) || err.Error() != tc.want || full.Short() != tc.short {
			t.Errorf("a ring of %d: %v, want %q, %d short", tc.need, err, tc.want, tc.short)
		}
	}
}

// bookkeeping is a mover with no datapath behind it: the pool's
// bookkeeping alone.
type bookkeeping struct{}

func (bookkeeping) Move(ringpool.Key, ringpool.Span, ringpool.Span) error { return nil }
func (bookkeeping) Grace() error                                          { return nil }

func TestSizesCheckAndOr(t *testing.T) {
	for _, tc := range []struct {
		s       Sizes
		wantErr string
	}{
		{Sizes{}, ""},
		{DefaultSizes(), ""},
		{Sizes{RingEntries: MaxMapEntries}, ""},
		{Sizes{RingEntries: MaxMapEntries + 1}, "rings: 2147483649 entries"},
		{Sizes{ConntrackEntries: ^uint32(0)}, "conntrack: 4294967295 entries"},
	} {
		err := tc.s.Check()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: Check() = %v, want %q", tc.s, err, tc.wantErr)
		}
	}
	got := Sizes{RingEntries: 5}.Or(DefaultSizes())
	if want := (Sizes{DefaultServiceEntries, DefaultBackendEntries, 5, DefaultConntrackEntries}); got != want {
		t.Errorf("Or: %+v, want %+v", got, want)
	}
}

// TestSizesGetSet: a map's size is read and written by its name, the
// counter maps by the map they follow; another name is no size.
func TestSizesGetSet(t *testing.T) {
	var s Sizes
	for i, m := range []string{"services", "backends", "rings", "conntrack"} {
		s.Set(m, uint32(10+i))
	}
	s.Set("vips", 99)
	want := Sizes{ServiceEntries: 10, BackendEntries: 11, RingEntries: 12, ConntrackEntries: 13}
	if s != want {
		t.Fatalf("after Set: %+v, want %+v", s, want)
	}
	for m, n := range map[string]uint32{"services": 10, "service_stats": 10, "backends": 11, "backend_stats": 11, "rings": 12, "conntrack": 13, "conntrack4": 13, "vips": 0} {
		if got := s.Get(m); got != n {
			t.Errorf("Get(%q) = %d, want %d", m, got, n)
		}
	}
}
