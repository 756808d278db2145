package compiler

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// rankFunc returns the inverse of a member's permutation: the position at
// which it reaches slot x. skip is invertible mod m (m prime, or a power of
// two with an odd skip).
func rankFunc(p perm, m int) func(x int) uint64 {
	inv := modInverse(int64(p.skip), int64(m))
	return func(x int) uint64 {
		d := (uint64(x) + uint64(m) - uint64(p.off)) % uint64(m)
		return d * inv % uint64(m)
	}
}

func modInverse(a, m int64) uint64 {
	if m == 1 {
		return 0
	}
	t, nt, r, nr := int64(0), int64(1), m, a%m
	for nr != 0 {
		q := r / nr
		t, nt = nt, t-q*nt
		r, nr = nr, r-q*nr
	}
	if t < 0 {
		t += m
	}
	return uint64(t)
}

// nextChoiceThenFix is the best a fill can do, knowing the old ring, when
// the slots that must change hand go to the next member in each slot's
// earliest-rank order (position over weight, as in EARLIEST_RANK's first
// step): a removed member's slots go to their next member; an added
// member takes the slots it reaches before their owner, its earliest ones
// up to its share; a reweighted member keeps its earliest slots up to its
// new share and the rest go to their next member. Then the fewest further
// slots move to restore the exact shares (R-MAGLEV-2), the remainder going
// to the members that save a move. It returns the slots moved and the
// minimum that had to move, as Disruption counts them.
func nextChoiceThenFix(before *Ring, after []RingMember, weighted bool) (moved, minimum int) {
	m := len(before.Slots)
	ms := append([]RingMember(nil), after...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	n := len(ms)
	index := map[string]int{}
	w := make([]uint64, n)
	rank := make([]func(int) uint64, n)
	var total uint64
	for i, x := range ms {
		index[x.Name] = i
		w[i] = 1
		if weighted {
			w[i] = uint64(x.Weight)
		}
		total += w[i]
		rank[i] = rankFunc(permOf(x.Name, m), m)
	}
	earlier := func(i, j, x int) bool { // i's time at x before j's
		a, b := (rank[i](x)+1)*w[j], (rank[j](x)+1)*w[i]
		return a < b || (a == b && i < j)
	}
	next := func(x, not int) int {
		b := -1
		for i := 0; i < n; i++ {
			if i != not && w[i] > 0 && (b < 0 || earlier(i, b, x)) {
				b = i
			}
		}
		return b
	}
	oldWeight := map[string]int{}
	for _, x := range before.Members {
		oldWeight[x.Name] = x.Weight
	}
	var added []int
	for i, x := range ms {
		if _, ok := oldWeight[x.Name]; !ok {
			added = append(added, i)
		}
	}
	ceil := func(i int) int { return int((uint64(m)*w[i] + total - 1) / total) }

	owner := make([]int, m)
	contested := map[int][]int{} // member → slots it reaches first (added) or holds (reweighted)
	for x := range owner {
		name := before.Owner(x)
		o, ok := index[name]
		if !ok {
			owner[x] = next(x, -1)
			moved++
			continue
		}
		owner[x] = o
		for _, i := range added {
			if earlier(i, o, x) {
				contested[i] = append(contested[i], x)
			}
		}
		if ms[o].Weight != oldWeight[name] && weighted {
			contested[o] = append(contested[o], x)
		}
	}
	for i, xs := range contested {
		sort.Slice(xs, func(a, b int) bool { return rank[i](xs[a]) < rank[i](xs[b]) })
		_, old := oldWeight[ms[i].Name]
		for k, x := range xs {
			switch {
			case !old && k < ceil(i):
				owner[x] = i
				moved++
			case old && k >= ceil(i):
				owner[x] = next(x, i)
				moved++
			}
		}
	}

	count := make([]int, n)
	for _, o := range owner {
		count[o]++
	}
	quota := make([]int, n)
	rest := m
	for i := range w {
		quota[i] = int(uint64(m) * w[i] / total)
		rest -= quota[i]
	}
	// Each member above its floor that gets the remainder slot keeps one
	// slot it would otherwise give up.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return count[order[a]]-quota[order[a]] > count[order[b]]-quota[order[b]]
	})
	for _, i := range order[:rest] {
		quota[i]++
	}
	for i := range count {
		if count[i] > quota[i] {
			moved += count[i] - quota[i]
		}
	}
	for i, x := range before.Members {
		q := 0
		if j, ok := index[x.Name]; ok {
			q = quota[j]
		}
		if d := before.Counts[i] - q; d > 0 {
			minimum += d
		}
	}
	return moved, minimum
}

// TestRMAGLEV3_NextChoiceBound recomputes the table README → Performance
// gives for the next-choice bound (nextChoiceThenFix from the EARLIEST_RANK
// ring), per change and N, and checks that README states exactly these.
// A fill that hands a removed member's slots to each slot's next member in
// this order moves at least the remove row, whatever it remembers of the old
// ring; a disruption of 1.10 is below it from N = 100 on.
func TestRMAGLEV3_NextChoiceBound(t *testing.T) {
	var want []string
	for _, c := range changes {
		row := []string{c.name}
		for _, n := range []int{10, 100, 250, 1000} {
			ms := backends(n)
			before := lbcBuild(FillEarliestRank)(ms, c.weighted)
			moved, minimum := 0, 0
			for k := 0; k < 5; k++ {
				mv, mn := nextChoiceThenFix(before, c.after(ms, k), c.weighted)
				if mv < mn {
					t.Fatalf("%s N=%d: moved %d below the minimum %d", c.name, n, mv, mn)
				}
				moved += mv
				minimum += mn
			}
			row = append(row, fmt.Sprintf("%.2f", float64(moved)/float64(minimum)))
		}
		want = append(want, strings.Join(row, " "))
	}

	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	label := map[string]string{"remove one backend": "remove-1", "add one backend": "add-1", "reweight one backend 100 → 50": "reweight-1"}
	re := regexp.MustCompile(`(?m)^\| (.+?), next-choice bound \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		got = append(got, strings.Join(append([]string{label[m[1]]}, m[2:]...), " "))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README's next-choice bound (N = 10, 100, 250, 1000):\n%s\nrecomputed:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNextChoiceThenFixRemovesOnlyWhatMust: on a ring whose remaining
// members already hold their new exact shares after the removed member's
// slots reach their next member, the bound moves exactly the minimum; a
// guard that the bound counts like Disruption.
func TestNextChoiceThenFixRemovesOnlyWhatMust(t *testing.T) {
	ms := members(1, 1)
	before, err := BuildRing(ms, 13, false, FillEarliestRank)
	if err != nil {
		t.Fatal(err)
	}
	moved, minimum := nextChoiceThenFix(before, ms[:1], false)
	if moved != minimum || minimum != before.Counts[1] {
		t.Fatalf("removing one of two: moved %d, minimum %d, want both %d", moved, minimum, before.Counts[1])
	}
}
