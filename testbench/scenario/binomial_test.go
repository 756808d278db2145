package scenario

import (
	"math"
	"testing"

	"github.com/lbc-dev/lbc/testbench/scenarios"
)

// shareInterval's bounds are exact: each tail outside holds at most a,
// and moving either bound one step inward would put more than a outside.
func TestShareIntervalIsExact(t *testing.T) {
	cdf := func(n, k int, p float64) float64 { // P(X ≤ k)
		c := 0.0
		for i := 0; i <= k; i++ {
			c += binomPMF(n, i, p)
		}
		return c
	}
	for _, n := range []int{10, 59, 91, 118, 420, 2000} {
		for _, p := range []float64{0.01, 0.2, 0.25, 1.0 / 3, 0.5, 0.8} {
			for _, a := range []float64{1e-2, 1.25e-4, 1.25e-6} {
				lo, hi := shareInterval(n, p, a)
				below, above := cdf(n, lo-1, p), 1-cdf(n, hi, p)
				if below > a*(1+1e-9) || above > a*(1+1e-9) {
					t.Errorf("n=%d p=%g a=%g: [%d, %d] leaves %.3g below and %.3g above, want each ≤ a", n, p, a, lo, hi, below, above)
				}
				if lo > 0 && cdf(n, lo, p) <= a {
					t.Errorf("n=%d p=%g a=%g: lo %d could be %d", n, p, a, lo, lo+1)
				}
				if hi < n && 1-cdf(n, hi-1, p) <= a {
					t.Errorf("n=%d p=%g a=%g: hi %d could be %d", n, p, a, hi, hi-1)
				}
				if mean := float64(n) * p; float64(lo) > mean || float64(hi) < mean {
					t.Errorf("n=%d p=%g a=%g: [%d, %d] does not hold the mean %.1f", n, p, a, lo, hi, mean)
				}
			}
		}
	}
	{
		s := 0.0
		for i := 0; i <= 91; i++ {
			s += binomPMF(91, i, 0.25)
		}
		if math.Abs(s-1) > 1e-12 {
			t.Errorf("Binomial(91, 0.25) sums to %v", s)
		}
	}
}

// The two counts that failed CI runs with a correct ring (normal bound at
// 0.999: 28 of 59 at 25 %, exact tail 1.6·10⁻⁴; 7 of 91, 2.1·10⁻⁵) are
// inside the default bounds; a backend the datapath never picks, or one
// that takes two thirds of a four-way split, is not.
func TestShareBoundsAtDefaultConfidence(t *testing.T) {
	a := tailAlpha(DefaultShareConfidence, 4)
	for _, tc := range []struct {
		n, obs int
		in     bool
	}{
		{59, 28, true}, {91, 7, true}, {59, 15, true},
		{59, 0, false}, {59, 40, false}, {91, 0, false}, {91, 60, false},
	} {
		lo, hi := shareInterval(tc.n, 0.25, a)
		if in := lo <= tc.obs && tc.obs <= hi; in != tc.in {
			t.Errorf("%d of %d at 25 %%: inside [%d, %d] = %v, want %v", tc.obs, tc.n, lo, hi, in, tc.in)
		}
	}
}

// Every share check `make test` runs (each shipped scenario's share steps
// on both topologies) at its confidence: together a correct datapath fails
// them with probability ≤ 0.1 % (Bonferroni over the steps).
func TestShareChecksFamilyWise(t *testing.T) {
	total, steps := 0.0, 0
	for _, name := range scenarios.Names() {
		data, _ := scenarios.Get(name)
		sc, err := Parse(name+".yaml", data)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range sc.Steps {
			if sh := st.Expect.Share; sh != nil {
				steps += 2 // netns and mininet
				total += 2 * (1 - sh.Confidence)
			}
		}
	}
	t.Logf("%d share checks in a CI run, family-wise false-failure rate ≤ %.3g", steps, total)
	if total > 0.001 {
		t.Errorf("the shipped scenarios' %d share checks fail a correct datapath with probability up to %.3g per CI run, want ≤ 0.001: raise their confidence", steps, total)
	}
}
