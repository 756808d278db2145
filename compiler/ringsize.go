package compiler

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/lbc-dev/lbc/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// RingSizeSpec is a service's ringSize: a number of slots, or auto (zero,
// the default), for which AutoRingSize picks the size.
type RingSizeSpec int

var wholeLiteral = regexp.MustCompile(`^[-+]?[0-9_]+$`)

// UnmarshalYAML accepts auto or a whole number; anything else is a
// problem worded as strictyaml words a wrong type.
func (r *RingSizeSpec) UnmarshalYAML(n *yaml.Node) error {
	const want = "auto or a whole number"
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: not a single value; this field wants %s", n.Line, want)
	}
	if strings.EqualFold(n.Value, "auto") {
		*r = 0
		return nil
	}
	tag := n.ShortTag()
	if tag == "!!float" && wholeLiteral.MatchString(n.Value) {
		tag = "!!int" // beyond 64 bits: yaml.v3 calls it a float
	}
	switch tag {
	case "!!int":
		v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 0)
		if err != nil {
			if strings.HasPrefix(n.Value, "-") {
				return fmt.Errorf("line %d: %s is too small (at least %d)", n.Line, strictyaml.Clip(n.Value), math.MinInt)
			}
			return fmt.Errorf("line %d: %s is too large (at most %d)", n.Line, strictyaml.Clip(n.Value), math.MaxInt)
		}
		*r = RingSizeSpec(v)
		return nil
	case "!!str":
		return fmt.Errorf("line %d: %q is text, but this field wants %s", n.Line, strictyaml.Clip(n.Value), want)
	default:
		return fmt.Errorf("line %d: %s is not a whole number; this field wants %s", n.Line, strictyaml.Clip(n.Value), want)
	}
}

// Under ringSize auto a ring has at least AutoMinSlots slots and
// AutoSlotsPerEndpoint per endpoint, whatever ringPrecision allows: with
// fewer, a backend that leaves moves clearly more slots than the minimum
// (R-MAGLEV-3; TestAutoRingFloorDisruption measures it, docs/semantics.md
// gives the figures). At the default precision the floor never binds.
const (
	AutoMinSlots         = 64
	AutoSlotsPerEndpoint = 32
)

// AutoRingSize is the ring size ringSize auto picks for n endpoints at
// precision p: the smallest power of two at which one slot is at most p of
// an equal share (n/M ≤ p), so that every member's share, which the fill
// keeps within one slot of its ideal (R-MAGLEV-2), is within p of it; and
// at least the floor. Powers of two fit every datapath, so a switch and its
// XDP fallback, and every node of a fleet, hold the same ring (R-HASH).
//
// It depends on the configuration alone (the number of endpoints of every
// group, not the eligible set nor the weights a health check reports): a
// ring that changed size with health would move almost every flow. A subset
// of the endpoints has larger shares, so the bound holds for every eligible
// set; under WEIGHTED_MAGLEV it holds for a member of average weight, and a
// lighter member's bound grows by the ratio (ShareError says what a
// ring achieves).
func AutoRingSize(n int, p float64) int {
	if p <= 0 {
		p = DefaultRingPrecision
	}
	need := max(AutoMinSlots, AutoSlotsPerEndpoint*n, int(math.Ceil(float64(n)/p-1e-9)))
	return min(nextPow2(need), MaxRingSize)
}

// PrecisionOf is the share bound a ring of m slots gives n endpoints: one
// slot in an equal share, n/m. It is what ringPrecision would have to be
// for auto to accept m.
func PrecisionOf(n, m int) float64 {
	if m <= 0 {
		return math.Inf(1)
	}
	return float64(n) / float64(m)
}

// ShareError is the ring's worst relative share error: over the members
// that should hold slots, the largest |slots − ideal| / ideal, where the
// ideal is m·weight/Σweights (every weight 1 when weighted is false or all
// weights are zero). It is 0 for an empty ring.
func ShareError(r *Ring, weighted bool) float64 {
	if r == nil || len(r.Members) == 0 || len(r.Slots) == 0 {
		return 0
	}
	w := make([]float64, len(r.Members))
	total := 0.0
	for i, x := range r.Members {
		w[i] = 1
		if weighted {
			w[i] = float64(x.Weight)
		}
		total += w[i]
	}
	if total == 0 {
		for i := range w {
			w[i] = 1
		}
		total = float64(len(w))
	}
	worst := 0.0
	m := float64(len(r.Slots))
	for i := range r.Members {
		if w[i] == 0 {
			continue
		}
		ideal := m * w[i] / total
		worst = max(worst, math.Abs(float64(r.Counts[i])-ideal)/ideal)
	}
	return worst
}
