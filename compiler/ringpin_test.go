package compiler

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"testing"
)

// weightPatterns are the weight patterns issue 34 names, per member index:
// equal, 1:4 and 0:2:6 repeated over the members, weights with zeros (a
// quarter 0, the rest 1..1000) and 1..1000 without zeros. The random ones
// are seeded by n, so a pattern and n give one member set.
var weightPatterns = []struct {
	name   string
	weight func(rng *rand.Rand, i int) int
}{
	{"equal", func(_ *rand.Rand, _ int) int { return 100 }},
	{"1:4", func(_ *rand.Rand, i int) int { return []int{1, 4}[i%2] }},
	{"0:2:6", func(_ *rand.Rand, i int) int { return []int{0, 2, 6}[i%3] }},
	{"zeros", func(rng *rand.Rand, _ int) int {
		if rng.Intn(4) == 0 {
			return 0
		}
		return 1 + rng.Intn(1000)
	}},
	{"1..1000", func(rng *rand.Rand, _ int) int { return 1 + rng.Intn(1000) }},
}

// patternMembers is n members backend-0 … backend-(n-1) weighted by the
// named pattern.
func patternMembers(pattern string, n int) []RingMember {
	for _, p := range weightPatterns {
		if p.name == pattern {
			rng := rand.New(rand.NewSource(int64(n)))
			ms := make([]RingMember, n)
			for i := range ms {
				ms[i] = RingMember{Name: fmt.Sprintf("backend-%d", i), Weight: p.weight(rng, i)}
			}
			return ms
		}
	}
	panic("unknown weight pattern " + pattern)
}

// ringDigest is the SHA-256 of a ring's slot owners (int32 little-endian,
// indices into the name-sorted members) and its fill.
func ringDigest(r *Ring) string {
	h := sha256.New()
	h.Write([]byte(r.Fill))
	b := make([]byte, 4*len(r.Slots))
	for i, o := range r.Slots {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(o))
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// pinCase is one ring whose slots TestRingPinned pins.
type pinCase struct {
	pattern  string
	n, m     int
	weighted bool
	fill     RingFill
}

func (c pinCase) String() string {
	return fmt.Sprintf("%s/%s/N=%d/M=%d/weighted=%v", c.fill, c.pattern, c.n, c.m, c.weighted)
}

// pinCases crosses the fills, weight patterns and sizes, and adds edge
// cases: one member, all weights zero, weights far apart, power-of-two
// and small prime rings.
func pinCases() []pinCase {
	var cs []pinCase
	for _, fill := range allFills {
		for _, p := range weightPatterns {
			for _, n := range []int{1, 2, 3, 10, 100, 250, 1000} {
				cs = append(cs, pinCase{p.name, n, 65537, true, fill})
			}
			for _, n := range []int{7, 250} {
				cs = append(cs, pinCase{p.name, n, 4099, true, fill}, pinCase{p.name, n, 16384, true, fill})
			}
			cs = append(cs, pinCase{p.name, 5, 13, true, fill})
		}
		for _, n := range []int{1, 10, 250, 1000} {
			cs = append(cs, pinCase{"equal", n, 65537, false, fill}, pinCase{"0:2:6", n, 65537, false, fill})
		}
		cs = append(cs,
			pinCase{"allzero", 7, 65537, true, fill},
			pinCase{"far", 4, 65537, true, fill},
			pinCase{"far", 50, 4099, true, fill},
			pinCase{"ties", 12, 251, true, fill},
		)
	}
	return cs
}

func (c pinCase) members() []RingMember {
	switch c.pattern {
	case "allzero":
		return members(make([]int, c.n)...)
	case "far":
		// Weights from 1 to 10⁶: float keys (PROBE_STRIDE) and cross
		// products (EARLIEST_RANK) far apart.
		ms := members(make([]int, c.n)...)
		for i := range ms {
			ms[i].Weight = []int{1, 1000000, 3, 999983}[i%4]
		}
		return ms
	case "ties":
		// Weights whose scheduler keys tie often: 1, 2, 3, 6.
		ms := members(make([]int, c.n)...)
		for i := range ms {
			ms[i].Weight = []int{1, 2, 3, 6}[i%4]
		}
		return ms
	}
	return patternMembers(c.pattern, c.n)
}

// TestRingPinned pins every slot of the rings of pinCases: the digests were
// computed by the builder before issue 34, item 3 made it faster, so a
// faster build that changes any slot of any of these rings fails here.
// LBC_PRINT_RING_PINS=1 prints the table for a deliberate change of the
// rings (which moves every fleet's slots).
func TestRingPinned(t *testing.T) {
	cs := pinCases()
	if os.Getenv("LBC_PRINT_RING_PINS") != "" {
		for _, c := range cs {
			r, err := BuildRing(c.members(), c.m, c.weighted, c.fill)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("\t%q: %q,\n", c.String(), ringDigest(r))
		}
		return
	}
	if len(cs) != len(ringPins) {
		t.Fatalf("%d cases, %d pinned digests", len(cs), len(ringPins))
	}
	for _, c := range cs {
		ms := c.members()
		r, err := BuildRing(ms, c.m, c.weighted, c.fill)
		if err != nil {
			t.Fatal(err)
		}
		checkRing(t, r, ms, c.m, c.weighted)
		want, ok := ringPins[c.String()]
		if !ok {
			t.Fatalf("%s: no pinned digest", c)
		}
		if got := ringDigest(r); got != want {
			t.Errorf("%s: ring digest %s, pinned %s: the slots changed", c, got, want)
		}
	}
}

// BenchmarkRingBuildPattern times one weighted 65537-slot build per fill,
// weight pattern and N, alone (for profiles: -cpuprofile with -bench
// 'RingBuildPattern/EARLIEST_RANK/1:4/N=250'); bench/peers compares the
// same builds with Cilium's.
func BenchmarkRingBuildPattern(b *testing.B) {
	for _, fill := range allFills {
		for _, p := range weightPatterns {
			for _, n := range []int{10, 100, 250, 1000} {
				ms := patternMembers(p.name, n)
				b.Run(fmt.Sprintf("%s/%s/N=%d", fill, p.name, n), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						if _, err := BuildRing(ms, 65537, true, fill); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
