package sim

import (
	"os"
	"testing"
)

// idealSkewed is a model-only geometry for R-CT-CAP exploration, NOT the
// TNA program: Ways ways of 2^Bits buckets of Bucket slots, each way
// indexed by its own hash of the flow (splitmix64 of the tracking hash,
// standing in for independent CRCs), Passes index hashes per way (the
// second one read by the resubmit pass: a second chance in the same
// registers). A new flow takes the first free slot in pass, way and
// bucket order, else is refused; an ended flow's slot is freed.
type idealSkewed struct {
	Ways, Bits, Bucket, Passes int
	used                       []bool
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (g *idealSkewed) add(k Key, _ int) int {
	h := uint64(k.Hash())<<8 | uint64(k.ServiceID&0xff)
	for p := 0; p < g.Passes; p++ {
		for w := 0; w < g.Ways; w++ {
			b := int(splitmix(h^uint64(p*64+w)<<40) & (1<<g.Bits - 1))
			base := (w<<g.Bits + b) * g.Bucket
			for s := 0; s < g.Bucket; s++ {
				if !g.used[base+s] {
					g.used[base+s] = true
					return base + s
				}
			}
		}
	}
	return -1
}

func (g *idealSkewed) end(_ Key, slot, _ int) { g.used[slot] = false }

func (g *idealSkewed) slots() int { return g.Ways << g.Bits * g.Bucket }

// TestRCTCAP_ExploreTofino1Geometries (model-only, issue 32 item 3): which
// geometries of Tofino 1's 131,072 slots would hold ≥ 64 k flows at ≤ 1 %
// steady-state refusal. Figures of idealSkewed (independent hashes), not
// of the program; the first row checks it against the TNA model of the
// committed geometry (48,960). Only logged: compiling any of them needs
// p4c-barefoot. LBC_EXPLORE=1 runs it (about a minute per row, loaded).
func TestRCTCAP_ExploreTofino1Geometries(t *testing.T) {
	if testing.Short() || !explore() {
		t.Skip("model-only exploration; set LBC_EXPLORE=1 (and no -short) to run it")
	}
	for _, g := range []idealSkewed{
		{Ways: 4, Bits: 15, Bucket: 1, Passes: 1},
		{Ways: 8, Bits: 14, Bucket: 1, Passes: 1},
		{Ways: 16, Bits: 13, Bucket: 1, Passes: 1},
		{Ways: 4, Bits: 15, Bucket: 1, Passes: 2},
		{Ways: 4, Bits: 14, Bucket: 2, Passes: 1},
		{Ways: 2, Bits: 14, Bucket: 4, Passes: 1},
		{Ways: 4, Bits: 13, Bucket: 4, Passes: 1},
		{Ways: 4, Bits: 14, Bucket: 2, Passes: 2},
	} {
		gg := g
		n, err := SteadyFlowsHeld(func(n int) (float64, error) {
			c := gg
			c.used = make([]bool, c.slots())
			return steadyLoss(&c, n, 1)
		}, g.slots())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("model-only: %d ways × 2^%d buckets × %d slots, %d pass(es): %d slots, %d flows held at ≤ 1 %% steady-state refusal (%.1f %%)",
			g.Ways, g.Bits, g.Bucket, g.Passes, g.slots(), n, 100*float64(n)/float64(g.slots()))
	}
}

func explore() bool { return os.Getenv("LBC_EXPLORE") == "1" }
