package compiler

import (
	"fmt"
	"math/rand"
	"testing"
)

func members(weights ...int) []RingMember {
	out := make([]RingMember, len(weights))
	for i, w := range weights {
		out[i] = RingMember{Name: fmt.Sprintf("be-%03d", i), Weight: w}
	}
	return out
}

func countsByName(r *Ring) map[string]int {
	out := map[string]int{}
	for i, m := range r.Members {
		out[m.Name] = r.Counts[i]
	}
	return out
}

// checkRing asserts the invariants every ring must hold: every slot owned,
// counts match the slots, and each count within 1 of the largest-remainder
// apportionment of m by weight (R-MAGLEV-2).
func checkRing(t *testing.T, r *Ring, ms []RingMember, m int, weighted bool) {
	t.Helper()
	if len(r.Slots) != m {
		t.Fatalf("ring has %d slots, want %d", len(r.Slots), m)
	}
	seen := make([]int, len(r.Members))
	for s, o := range r.Slots {
		if o < 0 {
			t.Fatalf("slot %d empty", s)
		}
		seen[o]++
	}
	w := make([]int, len(r.Members))
	for i, x := range r.Members {
		w[i] = 1
		if weighted {
			w[i] = x.Weight
		}
	}
	want := Apportion(m, w)
	for i := range r.Members {
		if seen[i] != r.Counts[i] {
			t.Fatalf("%s: Counts %d but owns %d slots", r.Members[i].Name, r.Counts[i], seen[i])
		}
		if d := seen[i] - want[i]; d < -1 || d > 1 {
			t.Fatalf("%s: %d slots, apportionment %d (off by more than 1)", r.Members[i].Name, seen[i], want[i])
		}
	}
}

// TestRMAGLEV2_SeedWeights checks the seed's examples and small ratios: 1:4
// → 20/80 %, 0:2:6 → 0/25/75 % with exactly 0 slots for weight 0, and 1:2
// honoured (a well-known implementation treats it as unweighted).
func TestRMAGLEV2_SeedWeights(t *testing.T) {
	tests := []struct {
		weights []int
		m       int
		share   []float64
	}{
		{[]int{1, 4}, 65537, []float64{0.2, 0.8}},
		{[]int{0, 2, 6}, 65537, []float64{0, 0.25, 0.75}},
		{[]int{1, 2}, 65537, []float64{1.0 / 3, 2.0 / 3}},
		{[]int{1, 1000}, 65537, []float64{1.0 / 1001, 1000.0 / 1001}},
		{[]int{1, 4}, 4096, []float64{0.2, 0.8}},
		{[]int{3, 3, 3}, 251, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.weights, tt.m), func(t *testing.T) {
			ms := members(tt.weights...)
			r, err := BuildRing(ms, tt.m, true)
			if err != nil {
				t.Fatal(err)
			}
			checkRing(t, r, ms, tt.m, true)
			c := countsByName(r)
			for i, x := range ms {
				want := tt.share[i] * float64(tt.m)
				if d := float64(c[x.Name]) - want; d < -1 || d > 1 {
					t.Errorf("%s (weight %d): %d slots, want %.1f ± 1", x.Name, x.Weight, c[x.Name], want)
				}
				if x.Weight == 0 && c[x.Name] != 0 {
					t.Errorf("%s: weight 0 owns %d slots, want 0", x.Name, c[x.Name])
				}
			}
		})
	}
}

func TestRMAGLEV2_UnweightedEven(t *testing.T) {
	for _, n := range []int{1, 3, 10, 100, 250} {
		ms := members(make([]int, n)...)
		r, err := BuildRing(ms, 65537, false)
		if err != nil {
			t.Fatal(err)
		}
		checkRing(t, r, ms, 65537, false)
		lo, hi := r.Counts[0], r.Counts[0]
		for _, c := range r.Counts {
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Fatalf("n=%d: counts from %d to %d, want a spread of at most 1", n, lo, hi)
		}
	}
}

// TestRMAGLEV3_Deterministic: the same names, weights and size give the
// same ring whatever the input order.
func TestRMAGLEV3_Deterministic(t *testing.T) {
	ms := members(5, 1, 7, 0, 3, 3, 9)
	a, _ := BuildRing(ms, 65537, true)
	rev := make([]RingMember, len(ms))
	for i := range ms {
		rev[len(ms)-1-i] = ms[i]
	}
	b, _ := BuildRing(rev, 65537, true)
	for i := range a.Slots {
		if a.Owner(i) != b.Owner(i) {
			t.Fatalf("slot %d: %s vs %s after reordering the input", i, a.Owner(i), b.Owner(i))
		}
	}
}

// TestRMAGLEV_PowerOfTwo: power-of-two rings (Tofino) use odd skips and
// fill every slot.
func TestRMAGLEV_PowerOfTwo(t *testing.T) {
	ms := members(1, 2, 3, 4, 5)
	r, err := BuildRing(ms, 1<<14, true)
	if err != nil {
		t.Fatal(err)
	}
	checkRing(t, r, ms, 1<<14, true)
	if _, err := BuildRing(ms, 1000, true); err == nil {
		t.Fatal("ring size 1000 (neither prime nor a power of two) accepted")
	}
}

// TestRMAGLEV_Properties builds rings over random member sets and checks the
// invariants, determinism, and that removing one member moves its own slots
// plus a bounded overhead (R-MAGLEV-3).
func TestRMAGLEV_Properties(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	sizes := []int{4099, 16384, 65537}
	for iter := 0; iter < 40; iter++ {
		n := 2 + rng.Intn(60)
		m := sizes[rng.Intn(len(sizes))]
		weighted := rng.Intn(2) == 0
		ms := make([]RingMember, n)
		for i := range ms {
			ms[i] = RingMember{Name: fmt.Sprintf("n%d-%d", iter, rng.Intn(1<<30)), Weight: 1 + rng.Intn(1000)}
		}
		r, err := BuildRing(ms, m, weighted)
		if err != nil {
			t.Fatal(err)
		}
		checkRing(t, r, ms, m, weighted)
		again, _ := BuildRing(ms, m, weighted)
		for i := range r.Slots {
			if r.Slots[i] != again.Slots[i] {
				t.Fatalf("iter %d: slot %d differs between two builds", iter, i)
			}
		}
		k := rng.Intn(n)
		less := append(append([]RingMember(nil), ms[:k]...), ms[k+1:]...)
		r2, _ := BuildRing(less, m, weighted)
		moved, minimum := Disruption(r, r2)
		if moved < minimum {
			t.Fatalf("iter %d: moved %d below the minimum %d", iter, moved, minimum)
		}
		// Slots of surviving members that changed owner: the overhead.
		// Bounded generously; the benchmark reports the measured ratio.
		if float64(moved) > 2.5*float64(minimum)+float64(n) {
			t.Fatalf("iter %d (n=%d, m=%d, weighted=%v): removing one member moved %d slots, minimum %d", iter, n, m, weighted, moved, minimum)
		}
	}
}

func TestApportion(t *testing.T) {
	tests := []struct {
		m    int
		w    []int
		want []int
	}{
		{10, []int{1, 1, 1}, []int{4, 3, 3}},
		{10, []int{1, 4}, []int{2, 8}},
		{7, []int{0, 2, 6}, []int{0, 2, 5}},
		{5, []int{0, 0}, []int{3, 2}},
		{100, []int{1, 2}, []int{33, 67}},
	}
	for _, tt := range tests {
		got := Apportion(tt.m, tt.w)
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("Apportion(%d, %v) = %v, want %v", tt.m, tt.w, got, tt.want)
				break
			}
		}
	}
}

func BenchmarkRingBuild(b *testing.B) {
	for _, weighted := range []bool{false, true} {
		for _, n := range []int{10, 100, 250, 1000} {
			rng := rand.New(rand.NewSource(int64(n)))
			ms := make([]RingMember, n)
			for i := range ms {
				ms[i] = RingMember{Name: fmt.Sprintf("backend-%d", i), Weight: 1 + rng.Intn(1000)}
			}
			kind := "unweighted"
			if weighted {
				kind = "weighted"
			}
			for _, classic := range []bool{false, true} {
				alg := "lbc"
				if classic {
					alg = "classic"
				}
				b.Run(fmt.Sprintf("%s/N=%d/%s", kind, n, alg), func(b *testing.B) {
					b.ReportAllocs()
					for i := 0; i < b.N; i++ {
						if _, err := buildRing(ms, 65537, weighted, classic); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkDisruption reports slots moved over the minimum that had to
// move (R-MAGLEV-3) when one backend is removed, added or reweighted, at
// M=65537. A ratio of 1.00 is the ideal; "classic" is the same build with
// classic Maglev's skip-ahead probing, measured in the same run.
func BenchmarkDisruption(b *testing.B) {
	for _, n := range []int{10, 100, 250} {
		ms := make([]RingMember, n)
		for i := range ms {
			ms[i] = RingMember{Name: fmt.Sprintf("backend-%d", i), Weight: 100}
		}
		cases := []struct {
			name     string
			after    []RingMember
			weighted bool
		}{
			{"remove-1", ms[1:], false},
			{"add-1", append(append([]RingMember(nil), ms...), RingMember{Name: "backend-new", Weight: 100}), false},
			{"reweight-1", func() []RingMember {
				x := append([]RingMember(nil), ms...)
				x[n/2].Weight = 50
				return x
			}(), true},
		}
		for _, c := range cases {
			for _, alg := range []struct {
				name    string
				classic bool
			}{{"lbc", false}, {"classic", true}} {
				b.Run(fmt.Sprintf("%s/N=%d/%s", c.name, n, alg.name), func(b *testing.B) {
					var moved, minimum int
					for i := 0; i < b.N; i++ {
						before, _ := buildRing(ms, 65537, c.weighted, alg.classic)
						after, _ := buildRing(c.after, 65537, c.weighted, alg.classic)
						moved, minimum = Disruption(before, after)
					}
					b.ReportMetric(float64(moved)/float64(minimum), "moved/min")
					b.ReportMetric(float64(moved), "moved")
					b.ReportMetric(float64(minimum), "min")
				})
			}
		}
	}
}
