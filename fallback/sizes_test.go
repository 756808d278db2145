package fallback

import (
	"strings"
	"testing"
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
			p := newRingPool(tc.entries)
			n := 0
			for {
				if _, err := p.alloc(halfKey{uint32(n/2 + 1), uint8(n % 2)}, KatranRingSize, noMoves{t}, &placeStats{}); err != nil {
					break
				}
				n++
			}
			if n != tc.fit {
				t.Fatalf("%d entries hold %d halves at ringSize %d, want %d", tc.entries, n, KatranRingSize, tc.fit)
			}
		})
	}
}

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
