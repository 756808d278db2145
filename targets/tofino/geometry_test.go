package tofino

import (
	"fmt"
	"strings"
	"testing"

	p4configv1 "github.com/p4lang/p4runtime/go/p4/config/v1"

	"github.com/lbc-dev/lbc/targets/sim"
)

func regs(sizes map[string]int32) *p4configv1.P4Info {
	info := &p4configv1.P4Info{}
	for n, s := range sizes {
		info.Registers = append(info.Registers, &p4configv1.Register{Preamble: &p4configv1.Preamble{Name: n}, Size: s})
	}
	return info
}

// TestConntrackGeometryFromP4InfoRCTCAP: the geometry whose capacity lbc
// reports (R-CT-CAP) and on which generated tests run is read from the
// build's registers; anything that is not one program's is an error
// naming the register.
func TestConntrackGeometryFromP4InfoRCTCAP(t *testing.T) {
	four := map[string]int32{"LbIngress.ct_sig0": 1 << 15, "LbIngress.ct_sig1": 1 << 15, "LbIngress.ct_sig2": 1 << 15, "LbIngress.ct_sig3": 1 << 15,
		"LbIngress.ct_backend0": 1 << 15, "LbIngress.other": 7}
	banked := map[string]int32{"LbIngress.ct_exp0": 1 << 16, "LbIngress.ct_exp0b": 1 << 16}
	for w := range 4 {
		banked[fmt.Sprintf("LbIngress.ct_sig%d", w)] = 1 << 16
		banked[fmt.Sprintf("LbIngress.ct_sig%db", w)] = 1 << 16
	}
	for _, tc := range []struct {
		name  string
		sizes map[string]int32
		want  sim.TNAGeometry
		err   string
	}{
		{"4 ways (Tofino 1)", four, sim.TNATofino1, ""},
		{"4 ways of two arrays (Tofino 2)", banked, sim.TNATofino2, ""},
		{"a bank of another size", map[string]int32{"LbIngress.ct_sig0": 1 << 16, "LbIngress.ct_sig0b": 1 << 15}, sim.TNAGeometry{}, "ct_sig0b holds 32768 slots, ct_sig0 65536"},
		{"banks in some ways only", map[string]int32{"LbIngress.ct_sig0": 1 << 16, "LbIngress.ct_sig0b": 1 << 16, "LbIngress.ct_sig1": 1 << 17}, sim.TNAGeometry{}, "1 of 2 conntrack ways held in two register arrays"},
		{"direct-mapped", map[string]int32{"LbIngress.ct_sig": 1 << 16, "LbIngress.ct_backend": 1 << 16}, sim.TNAGeometry{Ways: 1, WayBits: 16}, ""},
		{"both", map[string]int32{"LbIngress.ct_sig": 1 << 16, "LbIngress.ct_sig0": 1 << 15}, sim.TNAGeometry{}, "both LbIngress.ct_sig"},
		{"unequal ways", map[string]int32{"LbIngress.ct_sig0": 1 << 15, "LbIngress.ct_sig1": 1 << 14}, sim.TNAGeometry{}, "ct_sig1 holds 16384 slots, ct_sig0 32768"},
		{"a way missing", map[string]int32{"LbIngress.ct_sig0": 1 << 15, "LbIngress.ct_sig2": 1 << 15}, sim.TNAGeometry{}, "ct_sig1 missing"},
		{"not a power of two", map[string]int32{"LbIngress.ct_sig0": 1000}, sim.TNAGeometry{}, "1000 slots: want a power of two"},
		{"no conntrack", map[string]int32{"LbIngress.x": 1}, sim.TNAGeometry{}, "no conntrack registers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := ConntrackGeometry(regs(tc.sizes))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error saying %q", g, err, tc.err)
				}
				return
			}
			if err != nil || g != tc.want {
				t.Fatalf("got %+v, %v; want %+v", g, err, tc.want)
			}
		})
	}
}
