package scenario

import "math"

// The share check's statistics: an exact two-sided binomial test. A
// normal bound with a continuity correction (the check before) is too
// narrow in the upper tail at the windows the scenarios have (n ≈ 60,
// p = 0.25: binomial tails are skewed), and at a family-wise error of
// 10⁻⁵ that difference is what a correct datapath fails on.

// DefaultShareConfidence is a step's share check's confidence when the
// scenario does not set one. `make test` runs about 50 share checks (every
// shipped scenario's share steps on both topologies,
// TestShareChecksFamilyWise), so a correct datapath fails a CI run's share
// checks with probability ≤ 50 × 10⁻⁵ = 0.05 %.
const DefaultShareConfidence = 0.99999

// binomPMF is P(X = i) for X ~ Binomial(n, p), 0 < p < 1.
func binomPMF(n, i int, p float64) float64 {
	lc, _ := math.Lgamma(float64(n + 1))
	a, _ := math.Lgamma(float64(i + 1))
	b, _ := math.Lgamma(float64(n - i + 1))
	return math.Exp(lc - a - b + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
}

// shareInterval is the acceptance interval [lo, hi] of the count of n
// trials that land on a backend of share p (0 < p < 1), when each tail may
// hold at most a of the probability: lo is the least count with
// P(X ≤ lo) > a, hi the greatest with P(X ≥ hi) > a. A correct datapath
// falls outside it with probability ≤ 2a.
func shareInterval(n int, p, a float64) (lo, hi int) {
	c := 0.0
	for lo = 0; lo < n; lo++ {
		if c += binomPMF(n, lo, p); c > a {
			break
		}
	}
	c = 0
	for hi = n; hi > 0; hi-- {
		if c += binomPMF(n, hi, p); c > a {
			break
		}
	}
	return lo, hi
}

// tailAlpha is one tail's share of a step's error budget: 1 − confidence
// split over k backends (Bonferroni) and two tails.
func tailAlpha(confidence float64, k int) float64 {
	return (1 - confidence) / float64(2*max(k, 1))
}
