package compiler

import (
	"fmt"
	"strings"
	"testing"
)

// TestAutoRingSize (issue 35): auto picks the smallest power of two at
// which one slot is at most ringPrecision of an equal share, above the
// floor: 8 equal endpoints need 1,024 slots at 1 %, 16 need 2,048.
func TestAutoRingSize(t *testing.T) {
	for _, tc := range []struct {
		n    int
		p    float64
		want int
	}{
		{8, 0.01, 1024},
		{16, 0.01, 2048},
		{2, 0.01, 256},
		{1, 0.01, 128},
		{100, 0.01, 16384},
		{250, 0.01, 32768},
		{10, 0.01, 1024}, // 1,000 slots: exactly 1 %
		{11, 0.01, 2048}, // 1,100
		{8, 0.05, 256},   // 160 by precision; the floor is 32 an endpoint
		{1, 0.25, 64},    // the floor of 64 slots
		{0, 0.01, 64},    // no endpoints: the floor
		{8, 0.125, 256},  // 64 by precision, exactly; the floor wins
		{8, 0, 1024},     // zero: the default precision
		{1 << 20, 0.0001, MaxRingSize},
	} {
		if got := AutoRingSize(tc.n, tc.p); got != tc.want {
			t.Errorf("AutoRingSize(%d, %g) = %d, want %d", tc.n, tc.p, got, tc.want)
		}
	}
}

// TestRMAGLEV2_AutoPrecisionEverySubset: at the size auto picks, every
// member's share is within ringPrecision of its ideal for every eligible
// set the configuration can produce (any subset of its endpoints), since a
// subset's shares are larger.
func TestRMAGLEV2_AutoPrecisionEverySubset(t *testing.T) {
	for _, n := range []int{1, 3, 7, 8, 16, 33} {
		for _, p := range []float64{0.01, 0.003, 0.05} {
			m := AutoRingSize(n, p)
			ms := make([]RingMember, n)
			for i := range ms {
				ms[i] = RingMember{Name: fmt.Sprintf("be-%d", i), Weight: 1}
			}
			for k := 1; k <= n; k++ {
				r, err := BuildRing(ms[:k], m, false, "")
				if err != nil {
					t.Fatal(err)
				}
				if e := ShareError(r, false); e > p {
					t.Errorf("n %d, precision %g: ring %d, %d of the endpoints eligible: share error %.4f", n, p, m, k, e)
				}
			}
		}
	}
}

// TestShareError: the worst relative distance of a member's slots from its
// ideal, by weight.
func TestShareError(t *testing.T) {
	ring := func(counts []int, weights []int) *Ring {
		r := &Ring{}
		for i, c := range counts {
			r.Members = append(r.Members, RingMember{Name: fmt.Sprint(i), Weight: weights[i]})
			r.Counts = append(r.Counts, c)
			for range c {
				r.Slots = append(r.Slots, int32(i))
			}
		}
		return r
	}
	for _, tc := range []struct {
		name     string
		r        *Ring
		weighted bool
		want     float64
	}{
		{"exact", ring([]int{4, 4}, []int{1, 1}), false, 0},
		{"one slot off", ring([]int{5, 3}, []int{1, 1}), false, 0.25},
		{"weights ignored unweighted", ring([]int{6, 2}, []int{3, 1}), false, 0.5},
		{"weights", ring([]int{6, 2}, []int{3, 1}), true, 0},
		{"weight 0 holds nothing", ring([]int{8, 0}, []int{1, 0}), true, 0},
		{"all zero count as equal", ring([]int{4, 4}, []int{0, 0}), true, 0},
		{"empty", &Ring{}, false, 0},
	} {
		if got := ShareError(tc.r, tc.weighted); got != tc.want {
			t.Errorf("%s: ShareError = %g, want %g", tc.name, got, tc.want)
		}
	}
}

// TestAutoRingFloorDisruption measures why auto keeps a floor of
// AutoSlotsPerEndpoint slots an endpoint (R-MAGLEV-3): when one endpoint
// leaves, the slots that move over the minimum fall as the ring grows;
// below the floor they rise steeply. The figures are in docs/semantics.md
// ("ringSize auto"); this test fails if the fill changes them.
func TestAutoRingFloorDisruption(t *testing.T) {
	ratio := func(n, m int) float64 {
		moved, minimum := 0, 0
		for trial := range 5 {
			ms := make([]RingMember, n)
			for i := range ms {
				ms[i] = RingMember{Name: fmt.Sprintf("t%d-be-%d", trial, i), Weight: 1}
			}
			before, err := BuildRing(ms, m, false, "")
			if err != nil {
				t.Fatal(err)
			}
			for k := 0; k < n && k < 10; k++ {
				rest := append(append([]RingMember(nil), ms[:k]...), ms[k+1:]...)
				after, err := BuildRing(rest, m, false, "")
				if err != nil {
					t.Fatal(err)
				}
				mv, mn := Disruption(before, after)
				moved, minimum = moved+mv, minimum+mn
			}
		}
		return float64(moved) / float64(minimum)
	}
	for _, n := range []int{4, 8, 16} {
		var line strings.Builder
		at := map[int]float64{}
		for _, per := range []int{4, 8, 16, 32, 64, 128} {
			at[per] = ratio(n, nextPow2(per*n))
			fmt.Fprintf(&line, "  %d/endpoint: %.2f", per, at[per])
		}
		t.Logf("N=%d moved/minimum:%s", n, line.String())
		floor := AutoSlotsPerEndpoint
		if at[floor] > 1.4 {
			t.Errorf("N=%d: at the floor (%d slots an endpoint) a leaving endpoint moves %.2f× the minimum, over 1.4×", n, floor, at[floor])
		}
		if at[floor/4] <= at[floor] {
			t.Errorf("N=%d: %d slots an endpoint move %.2f× the minimum, no worse than the floor's %.2f×: the floor buys nothing", n, floor/4, at[floor/4], at[floor])
		}
	}
}

// twoEndpoints is a service of two endpoints; tests append its ring fields.
const twoEndpoints = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 10.0.0.1
    protocol: TCP
    ports: [80]
    backends: [{name: g, endpoints: [{name: a, ip: 10.1.0.1}, {name: b, ip: 10.1.0.2}]}]
`

// TestRingSizeYAML: ringSize takes auto or a whole number, and says so.
func TestRingSizeYAML(t *testing.T) {
	for _, tc := range []struct {
		extra string
		ring  int
		auto  bool
		err   string
	}{
		{"", 256, true, ""},
		{"    ringSize: auto\n", 256, true, ""},
		{"    ringSize: AUTO\n", 256, true, ""},
		{"    ringSize: 1024\n", 1024, false, ""},
		{"    ringSize: 0x400\n", 1024, false, ""},
		{"    ringSize: auto\n    ringPrecision: 0.001\n", 2048, true, ""},
		{"    ringSize: big\n", 0, false, `ringSize: "big" is text, but this field wants auto or a whole number`},
		{"    ringSize: 1.5\n", 0, false, `ringSize: 1.5 is not a whole number; this field wants auto or a whole number`},
		{"    ringSize: [1]\n", 0, false, `ringSize: not a single value`},
		{"    ringPrecision: 0.5\n", 0, false, `ringPrecision: 0.5 out of range 0.0001..0.25 (a fraction: 0.01 means every endpoint's ring share within 1 % of its ideal`},
		{"    ringPrecision: 0.00001\n", 0, false, `ringPrecision: 1e-05 out of range`},
		{"    ringSize: 13\n", 0, false, `ringSize: 13 is too small for 2 endpoints (need at least 10 slots each); use ringSize 23 or more, or auto`},
	} {
		d, err := Load("lb.yaml", []byte(twoEndpoints+tc.extra))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.extra, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.extra, err)
			continue
		}
		s := &d.Config.Services[0]
		if s.Ring() != tc.ring || s.RingAuto() != tc.auto {
			t.Errorf("%q: ring %d auto %v, want %d %v", tc.extra, s.Ring(), s.RingAuto(), tc.ring, tc.auto)
		}
	}
}

// TestRingSizeWarnings: an explicit ring coarser than 1 % and a
// ringPrecision that auto does not use are warnings that name the fix.
func TestRingSizeWarnings(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"    ringSize: 101\n", `ringSize: 101 slots for 2 endpoints: weights are honoured only to 1 slot in 50 (share error up to 2 %); ringSize auto picks 256 (1 %)`},
		{"    ringSize: 4099\n    ringPrecision: 0.02\n", `ringPrecision: ringPrecision applies to ringSize auto only; this service sets ringSize 4099`},
	} {
		d, err := Load("lb.yaml", []byte(twoEndpoints+tc.extra))
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if got := d.Warnings.Error(); !strings.Contains(got, tc.want) {
			t.Errorf("%q: warnings %q lack %q", tc.extra, got, tc.want)
		}
	}
}

// TestCompileShowsAutoAndShareError: the IR records that auto chose the
// size and the ring's worst share error.
func TestCompileShowsAutoAndShareError(t *testing.T) {
	cfg := loadExample(t, "failover.yaml")
	res := compileOK(t, Input{Config: cfg})
	s := &res.IR.Services[0]
	if !s.RingAuto || s.RingSize != 1024 {
		t.Fatalf("service row: auto %v ring %d, want auto 1024", s.RingAuto, s.RingSize)
	}
	if want := ShareError(res.Services[0].Ring, false); s.ShareError != want || want > DefaultRingPrecision {
		t.Fatalf("share error %g, want %g (≤ 1 %%)", s.ShareError, want)
	}
}
