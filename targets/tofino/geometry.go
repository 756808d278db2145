package tofino

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/lbc-dev/lbc/targets/sim"
)

// ConntrackGeometry is the conntrack geometry of a build of p4/tna/lb.p4,
// read from its P4Info: the N-way program declares LbIngress.ct_sig0 …
// ct_sig(N-1), one signature register per way (beside ct_exp and
// ct_backend), all of 2^CT_WAY_BITS slots, or on Tofino 2 two per way
// (ct_sig<w> and ct_sig<w>b) of half as many; the direct-mapped program it
// replaced declares LbIngress.ct_sig, one way.
// What the figures of `lbc validate --target tofino` and the model the
// generated tests run on describe is then always the program in the P4Info.
func ConntrackGeometry(info *p4configv1.P4Info) (sim.TNAGeometry, error) {
	ways, banks := map[int]int64{}, map[int]int64{}
	var direct int64
	for _, r := range info.GetRegisters() {
		name := r.GetPreamble().GetName()
		if name == "LbIngress.ct_sig" {
			direct = int64(r.GetSize())
		}
		if w, ok := strings.CutPrefix(name, "LbIngress.ct_sig"); ok {
			m := ways
			if b, ok := strings.CutSuffix(w, "b"); ok {
				w, m = b, banks
			}
			n, err := strconv.Atoi(w)
			if err != nil {
				continue
			}
			m[n] = int64(r.GetSize())
		}
	}
	// Tofino 2: way w's slots are held in ct_sig<w> and ct_sig<w>b, the
	// low and high half.
	for w, s := range banks {
		if s != ways[w] {
			return sim.TNAGeometry{}, fmt.Errorf("P4Info: LbIngress.ct_sig%db holds %d slots, ct_sig%d %d: a way's two register arrays must be equal", w, s, w, ways[w])
		}
		ways[w] += s
	}
	if len(banks) > 0 && len(banks) != len(ways) {
		return sim.TNAGeometry{}, fmt.Errorf("P4Info: %d of %d conntrack ways held in two register arrays (ct_sig<w>b): all or none must be", len(banks), len(ways))
	}
	var g sim.TNAGeometry
	n, size, reg, macro := len(ways), ways[0], "LbIngress.ct_sig0", "CT_WAY_BITS"
	switch {
	case n > 0 && direct > 0:
		return g, fmt.Errorf("P4Info declares both LbIngress.ct_sig (direct-mapped) and LbIngress.ct_sig0..%d (ways): not a build of one p4/tna/lb.p4", n-1)
	case n > 0:
		for w := range n {
			s, ok := ways[w]
			if !ok {
				return g, fmt.Errorf("P4Info: LbIngress.ct_sig%d missing among %d conntrack ways", w, n)
			}
			if s != size {
				return g, fmt.Errorf("P4Info: LbIngress.ct_sig%d holds %d slots, ct_sig0 %d: the ways must be equal", w, s, size)
			}
		}
	case direct > 0:
		n, size, reg, macro = 1, direct, "LbIngress.ct_sig", "CT_INDEX_BITS"
	default:
		return g, fmt.Errorf("P4Info: no conntrack registers (LbIngress.ct_sig0.. or LbIngress.ct_sig): not a build of p4/tna/lb.p4")
	}
	if size <= 0 || size&(size-1) != 0 {
		return g, fmt.Errorf("P4Info: %s holds %d slots: want a power of two (2^%s)", reg, size, macro)
	}
	g = sim.TNAGeometry{Ways: n, WayBits: bits.TrailingZeros64(uint64(size))}
	if _, err := sim.NewTNA(g, 0); err != nil {
		return g, fmt.Errorf("P4Info conntrack geometry: %w", err)
	}
	return g, nil
}
